package journal_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/reprise-dev/reprise/journal"
)

// freePort returns a TCP port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts n embedded servers clustered over routes and returns
// them once JetStream has a meta leader.
func startCluster(tb testing.TB, n int) []*journal.Embedded {
	tb.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range n {
		ports[i] = freePort(tb)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	nodes := make([]*journal.Embedded, n)
	for i := range n {
		e, err := journal.StartEmbedded(journal.EmbeddedConfig{
			Dir:        tb.TempDir(),
			Port:       -1,
			ServerName: "n" + strconv.Itoa(i),
			Cluster:    &server.ClusterOpts{Name: "reprise-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     routes,
		})
		if err != nil {
			tb.Fatalf("node %d: %v", i, err)
		}
		tb.Cleanup(e.Shutdown)
		nodes[i] = e
	}
	poll(tb, 30*time.Second, "the cluster to form", func() bool {
		for _, e := range nodes {
			if !e.Server.JetStreamIsClustered() || !e.Server.JetStreamIsCurrent() {
				return false
			}
		}
		return true
	})
	return nodes
}

// poll checks cond every 20ms until it holds, failing after timeout.
func poll(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// TestWriterFencedClustered: with three replicas (where JetStream checks
// message ids before the expected last subject sequence) a second writer of
// a started generation still fails with ErrFenced.
func TestWriterFencedClustered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	nodes := startCluster(t, 3)
	nc := connect(t, nodes[0])
	var j *journal.Journal
	var err error
	poll(t, 30*time.Second, "Open with 3 replicas", func() bool { // the meta leader may still be electing
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		j, err = journal.Open(ctx, nc, journal.Config{Replicas: 3})
		return err == nil
	})
	ref := journal.Ref{ID: "fence", Gen: 1}
	writeGen(t, j, ref, 3, journal.EndCompleted)

	ctx := waitCtx(t, waitTimeout)
	var c collector
	w := j.NewWriter(ref, c.sink)
	defer w.Abort()
	if err := w.Append(ctx, "", []byte("second")); !errors.Is(err, journal.ErrFenced) {
		t.Errorf("second writer: %v, want ErrFenced; its sink saw %+v", err, c.events())
	}
}
