package journaltest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
)

// ClusterTimeout bounds the forming of a cluster.
const ClusterTimeout = 30 * time.Second

// Cluster is n embedded nats-servers with JetStream, clustered over
// loopback routes, each with a loopback client port and its own temporary
// storage; every node still up is shut down when the test ends.
type Cluster struct {
	Nodes []*journal.Embedded
	Names []string // server names: n0, n1, …
	URLs  []string // client URLs, in node order

	mu   sync.Mutex
	down []bool
	cfgs []journal.EmbeddedConfig // each node's, for Restart
}

// StartCluster starts n nodes and returns once JetStream is clustered and
// current on every one. The route ports are picked free and then handed to
// the servers; should another listener take one in between, the cluster is
// started again on fresh ports (three tries).
func StartCluster(tb testing.TB, n int) *Cluster {
	tb.Helper()
	var err error
	for range 3 {
		var c *Cluster
		if c, err = startCluster(tb, n); err == nil {
			tb.Cleanup(c.shutdown)
			testutil.Eventually(tb, ClusterTimeout, "the JetStream cluster to form", c.formed)
			return c
		}
	}
	tb.Fatalf("start a %d-node JetStream cluster: %v", n, err)
	return nil
}

func startCluster(tb testing.TB, n int) (*Cluster, error) {
	tb.Helper()
	routes := make([]string, n)
	ports := make([]int, n)
	for i := range n {
		ports[i] = testutil.FreePort(tb)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	c := &Cluster{down: make([]bool, n)}
	for i := range n {
		name := "n" + strconv.Itoa(i)
		cfg := journal.EmbeddedConfig{
			Dir: tb.TempDir(), Port: -1, ServerName: name,
			Cluster: &server.ClusterOpts{Name: "reprise-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		}
		e, err := journal.StartEmbedded(cfg)
		if err != nil {
			c.shutdown()
			return nil, fmt.Errorf("node %d (route port %d): %w", i, ports[i], err)
		}
		cfg.Port = e.Server.Addr().(*net.TCPAddr).Port // a restart listens where clients knew it
		c.cfgs = append(c.cfgs, cfg)
		c.Nodes = append(c.Nodes, e)
		c.Names = append(c.Names, name)
		c.URLs = append(c.URLs, e.Server.ClientURL())
	}
	return c, nil
}

func (c *Cluster) formed() bool {
	for i, e := range c.Nodes {
		if c.isDown(i) {
			continue
		}
		if !e.Server.JetStreamIsClustered() || !e.Server.JetStreamIsCurrent() {
			return false
		}
	}
	return true
}

// Kill shuts node i down and waits for it; killing a node twice is a no-op.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	if c.down[i] {
		c.mu.Unlock()
		return
	}
	c.down[i] = true
	c.mu.Unlock()
	c.Nodes[i].Shutdown()
}

// Restart starts node i, killed before, again on its store, its route
// and its client port, and returns once it is up; clients that knew it
// reconnect to it.
func (c *Cluster) Restart(tb testing.TB, i int) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.down[i] {
		tb.Fatalf("restart node %d: it is up", i)
	}
	e, err := journal.StartEmbedded(c.cfgs[i])
	if err != nil {
		tb.Fatalf("restart node %d: %v", i, err)
	}
	c.Nodes[i], c.down[i] = e, false
}

func (c *Cluster) isDown(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.down[i]
}

func (c *Cluster) shutdown() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// URLsFrom lists the client URLs starting with node first: a client with
// nats.DontRandomize connects to it, and fails over in order.
func (c *Cluster) URLsFrom(first int) []string {
	out := []string{c.URLs[first]}
	for i, u := range c.URLs {
		if i != first {
			out = append(out, u)
		}
	}
	return out
}

// Index returns the node named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.Names {
		if n == name {
			return i
		}
	}
	return -1
}

// Leaders returns the names of the nodes leading the journal's stream and
// the records bucket's stream (journal.DefaultStream, DefaultBucket), as
// seen through nc.
func (c *Cluster) Leaders(ctx context.Context, nc *nats.Conn) (events, records string, err error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", "", err
	}
	for _, s := range []struct {
		name string
		out  *string
	}{{journal.DefaultStream, &events}, {"KV_" + journal.DefaultBucket, &records}} {
		st, err := js.Stream(ctx, s.name)
		if err != nil {
			return "", "", err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return "", "", err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return "", "", fmt.Errorf("stream %s has no leader", s.name)
		}
		*s.out = info.Cluster.Leader
	}
	return events, records, nil
}
