package journaltest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
)

// TestStartCluster: a started cluster takes a replicated journal, names its
// leaders, and survives a node killed (twice).
func TestStartCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a 3-node JetStream cluster")
	}
	c := journaltest.StartCluster(t, 3)
	if len(c.Nodes) != 3 || strings.Join(c.Names, ",") != "n0,n1,n2" || c.Index("n2") != 2 || c.Index("x") != -1 {
		t.Fatalf("nodes %d, names %v", len(c.Nodes), c.Names)
	}
	if got := c.URLsFrom(1); len(got) != 3 || got[0] != c.URLs[1] {
		t.Errorf("URLsFrom(1) = %v", got)
	}
	nc, err := nats.Connect(strings.Join(c.URLsFrom(0), ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	journaltest.Open(t, nc, journal.Config{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	events, records, err := c.Leaders(ctx, nc)
	if err != nil || c.Index(events) < 0 || c.Index(records) < 0 {
		t.Fatalf("leaders %q, %q: %v", events, records, err)
	}
	c.Kill(1)
	c.Kill(1)
	if c.Nodes[1].Server.Running() {
		t.Error("a killed node still runs")
	}
}
