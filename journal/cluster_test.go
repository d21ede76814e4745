package journal_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// TestWriterSurvivesNodeLoss: a generation being written at R3 when a NATS
// node dies — the journal stream's leader, the node the writer is connected
// to, or both — is stored whole: the writer rides out the reconnect and the
// election, the end marker is acknowledged, and a reader gets every event
// once, in order, with nothing stored twice.
func TestWriterSurvivesNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3-node clusters")
	}
	// The failover must reach the writer: an append tried again, or its
	// connection moved to another node. A publish in flight when a node
	// dies may still be answered after the reconnect (nats.go re-sends what
	// it buffered), so on a busy machine no append may need a retry — but
	// in two of the three cases the writer's own node dies.
	var retried, reconnected uint64
	defer func() {
		if !t.Failed() && retried+reconnected == 0 {
			t.Errorf("three node kills mid-generation, and the writer neither tried an append again (journal.Stats) nor reconnected")
		}
	}()
	for _, victim := range []string{"stream leader", "writer's node, a follower", "writer's node, the leader"} {
		t.Run(victim, func(t *testing.T) {
			nodes := startCluster(t, 3)
			leader := func(nc *nats.Conn) string {
				var name string
				poll(t, 30*time.Second, "a stream leader", func() bool {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					js, _ := jetstream.New(nc)
					st, err := js.Stream(ctx, journal.DefaultStream)
					if err != nil {
						return false
					}
					info, err := st.Info(ctx)
					if err != nil || info.Cluster == nil {
						return false
					}
					name = info.Cluster.Leader
					return name != ""
				})
				return name
			}
			index := func(name string) int {
				for i, e := range nodes {
					if e.Server.Name() == name {
						return i
					}
				}
				t.Fatalf("no node %q", name)
				return -1
			}
			probe := connectURLs(t, nodes, 0)
			openClustered(t, probe)
			lead := index(leader(probe))
			probe.Close()
			kill, on := lead, (lead+1)%3
			switch victim {
			case "writer's node, a follower":
				kill = on
			case "writer's node, the leader":
				on = lead
			}
			nc := connectURLs(t, nodes, on)
			j := openClustered(t, nc)

			const n, killAt = 300, 60
			ref := journal.Ref{ID: "survive", Gen: 1}
			var c collector
			w := j.NewWriter(ref, c.sink)
			defer w.Abort()
			ctx := waitCtx(t, 90*time.Second)
			start := time.Now()
			var slowest time.Duration
			for i := 1; i <= n; i++ {
				if i == killAt {
					nodes[kill].Shutdown()
				}
				t0 := time.Now()
				if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
					t.Fatalf("Append %d after killing %s: %v", i, nodes[kill].Server.Name(), err)
				}
				slowest = max(slowest, time.Since(t0))
				time.Sleep(5 * time.Millisecond)
			}
			if err := w.End(ctx, journal.EndCompleted); err != nil {
				t.Fatalf("End: %v", err)
			}
			t.Logf("killed %s (leader %s, writer on %s): %d events stored in %s, slowest Append %s, new leader %s",
				nodes[kill].Server.Name(), nodes[lead].Server.Name(), nodes[on].Server.Name(), n, time.Since(start).Round(time.Millisecond),
				slowest.Round(time.Millisecond), leader(nc))
			st := j.Stats()
			t.Logf("journal stats: %+v", st)
			retried += st.AppendRetries
			reconnected += nc.Stats().Reconnects
			evs := c.events()
			if len(evs) != n+1 {
				t.Fatalf("the sink saw %d events, want %d", len(evs), n+1)
			}
			checkStored(t, j, ref, evs)
			checkNoRepeats(t, nc, ref)
		})
	}
}

// connectURLs connects over TCP to every node, node first, reconnecting fast.
func connectURLs(tb testing.TB, nodes []*journal.Embedded, first int) *nats.Conn {
	tb.Helper()
	urls := make([]string, 0, len(nodes))
	for i := range nodes {
		urls = append(urls, nodes[(first+i)%len(nodes)].Server.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name(tb.Name()), nats.DontRandomize(),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// openClustered opens the journal at R3, waiting out the meta leader's election.
func openClustered(tb testing.TB, nc *nats.Conn) *journal.Journal {
	tb.Helper()
	var j *journal.Journal
	poll(tb, 30*time.Second, "Open with 3 replicas", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		j, err = journal.Open(ctx, nc, journal.Config{Replicas: 3})
		return err == nil
	})
	return j
}
