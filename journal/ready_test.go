package journal_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
)

// TestReadyQuorumLost: a journal at R3 whose cluster lost its quorum is
// not ready within seconds (no write could be stored), and is ready again
// once a quorum is back.
func TestReadyQuorumLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := journaltest.StartCluster(t, 3)
	nc, err := nats.Connect(strings.Join(c.URLsFrom(0), ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	j := openClustered(t, nc)
	ready := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return j.Ready(ctx)
	}
	if err := ready(); err != nil {
		t.Fatalf("a formed cluster: %v", err)
	}
	c.Kill(1)
	c.Kill(2)
	lost := time.Now()
	poll(t, 30*time.Second, "Ready to fail with the quorum lost", func() bool { return ready() != nil })
	t.Logf("not ready %s after the quorum was lost", time.Since(lost).Round(100*time.Millisecond))
	c.Restart(t, 1)
	poll(t, 60*time.Second, "Ready again with a quorum back", func() bool { return ready() == nil })
}

// TestOpenReplicasOnOneServer: replicas asked of a server that is not
// clustered is refused at once, with NATS's word for it — not after the
// open timeout, and not silently tried again.
func TestOpenReplicasOnOneServer(t *testing.T) {
	t.Parallel()
	nc := connect(t, startServer(t, t.TempDir()))
	var retried atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := journal.Open(ctx, nc, journal.Config{Replicas: 3, OnOpenRetry: func(int, error) { retried.Add(1) }})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "replicas") {
		t.Fatalf("Open with 3 replicas on one server: %v (context %v), want NATS's refusal of replicas", err, ctx.Err())
	}
	if n := retried.Load(); n != 0 {
		t.Errorf("tried again %d times", n)
	}
	t.Logf("Open: %v", err)
}

// TestOpenTellsOfRetries: while JetStream cannot take the journal's assets
// Open tells of each failed attempt, with its error.
func TestOpenTellsOfRetries(t *testing.T) {
	t.Parallel()
	c := journaltest.StartCluster(t, 3)
	c.Kill(1)
	c.Kill(2) // the remaining node has no quorum: no asset can be made
	nc, err := nats.Connect(c.URLs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	told := make(chan error, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := make(chan error, 1)
	go func() {
		_, err := journal.Open(ctx, nc, journal.Config{Replicas: 3, OnOpenRetry: func(_ int, err error) {
			select {
			case told <- err:
			default:
			}
		}})
		opened <- err
	}()
	select {
	case err := <-told:
		if err == nil {
			t.Error("told of a retry without its error")
		}
		t.Logf("told: %v", err)
	case err := <-opened:
		t.Fatalf("Open ended before telling of a retry: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Open told of no retry within 30s")
	}
	cancel()
	if err := <-opened; err == nil {
		t.Error("Open without a quorum succeeded")
	}
}
