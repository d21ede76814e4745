package tests

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/stream"
	"github.com/reprise-dev/reprise/stream/auth"
	"github.com/reprise-dev/reprise/stream/proxy"
)

// natsCluster is a 3-node JetStream cluster of embedded nats-servers,
// clustered over loopback routes, each with a loopback client port.
type natsCluster struct {
	tb    testing.TB
	nodes []*journal.Embedded
	names []string
	urls  []string
	down  []bool
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startNATSCluster starts n nodes and returns once JetStream is clustered
// and current everywhere.
func startNATSCluster(tb testing.TB, n int) *natsCluster {
	tb.Helper()
	c := &natsCluster{tb: tb, down: make([]bool, n)}
	routes := make([]string, n)
	ports := make([]int, n)
	for i := range n {
		ports[i] = freePort(tb)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	for i := range n {
		name := "n" + strconv.Itoa(i)
		e, err := journal.StartEmbedded(journal.EmbeddedConfig{
			Dir: tb.TempDir(), Port: -1, ServerName: name,
			Cluster: &server.ClusterOpts{Name: "reprise-chaos", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			tb.Fatalf("node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, e)
		c.names = append(c.names, name)
		c.urls = append(c.urls, e.Server.ClientURL())
		tb.Cleanup(func() { c.kill(i) })
	}
	pollUntil(tb, 30*time.Second, "the JetStream cluster to form", func() bool {
		for _, e := range c.nodes {
			if !e.Server.JetStreamIsClustered() || !e.Server.JetStreamIsCurrent() {
				return false
			}
		}
		return true
	})
	return c
}

// kill shuts node i down (idempotent).
func (c *natsCluster) kill(i int) {
	if c.down[i] {
		return
	}
	c.down[i] = true
	c.nodes[i].Shutdown()
}

// urlsFrom lists the client URLs starting with node first (with
// nats.DontRandomize a client connects to it, and fails over in order).
func (c *natsCluster) urlsFrom(first int) []string {
	out := []string{c.urls[first]}
	for i, u := range c.urls {
		if i != first {
			out = append(out, u)
		}
	}
	return out
}

func (c *natsCluster) index(name string) int {
	for i, n := range c.names {
		if n == name {
			return i
		}
	}
	return -1
}

// leaders returns the node names leading the journal's stream and the
// records bucket's stream.
func (c *natsCluster) leaders(ctx context.Context, nc *nats.Conn) (events, records string, err error) {
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

// pollUntil checks cond every 20ms until it holds, failing after timeout.
func pollUntil(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // polling external state; bounded above
	}
}

// instance is an in-process reprise (a proxy.Proxy on a loopback port) on
// NATS over TCP with reconnects (a cluster: journal and records at R3).
type instance struct {
	name string
	nc   *nats.Conn
	p    *proxy.Proxy
	addr string
	URL  string
	done bool

	grace   time.Duration
	lenient bool
}

type instanceOptions struct {
	lease     time.Duration
	replicas  int           // default 3
	grace     time.Duration // for the shutdown at cleanup; default 10s
	lenient   bool          // a shutdown that had to fail generations is no test failure
	configure func(*proxy.Config)
}

func startInstance(tb testing.TB, name string, urls []string, upstream string, o instanceOptions) *instance {
	tb.Helper()
	if o.lease == 0 {
		o.lease = time.Second
	}
	if o.replicas == 0 {
		o.replicas = 3
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name(name), nats.DontRandomize(),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.Timeout(2*time.Second))
	if err != nil {
		tb.Fatalf("%s: nats: %v", name, err)
	}
	up, _ := url.Parse(upstream)
	cfg := proxy.Config{
		NATS: nc, Journal: journal.Config{Replicas: o.replicas}, Owner: name, Lease: o.lease, Upstream: up,
		Auth: auth.Config{Secret: testSecret}, Logger: testLogger(), HTTP: stream.Settings{Heartbeat: 500 * time.Millisecond},
	}
	if o.configure != nil {
		o.configure(&cfg)
	}
	in := &instance{name: name, nc: nc, grace: o.grace, lenient: o.lenient}
	in.p, in.addr, in.URL = serveProxy(tb, cfg) // proxy.New waits for the meta leader if it is still electing
	if in.grace == 0 {
		in.grace = 10 * time.Second
	}
	tb.Cleanup(func() { in.stop(tb) })
	return in
}

// stop shuts the instance down gracefully (idempotent).
func (in *instance) stop(tb testing.TB) {
	if in.done {
		return
	}
	in.done = true
	stopProxy(tb, in.p, in.grace, in.lenient)
	in.nc.Close()
}

// startReprise runs the reprise binary with args (plus a loopback listen
// address and error logging) and waits until it is ready. SIGKILL it with
// p.cmd.Process.Kill().
func startReprise(tb testing.TB, args ...string) *process {
	tb.Helper()
	addr := freeAddr(tb)
	args = append([]string{"--listen", addr, "--log-level", "error", "--secret", string(testSecret)}, args...)
	cmd := exec.Command(reprisebin(tb), args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &process{cmd: cmd, URL: "http://" + addr}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == 200 {
			return p
		}
		select {
		case <-exited:
			tb.Fatalf("reprise %v exited before it was ready", args)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("reprise at %s not ready after 30s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond) // waiting for a child process to listen; bounded above
	}
}

// sigkill kills p for real and waits until it is gone.
func sigkill(tb testing.TB, p *process) {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	pollUntil(tb, 10*time.Second, "the killed reprise to stop answering", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
}

// fetchEvents sends a request and reads its event stream to the end,
// calling at (when set) right after the n-th event. Unlike do/readEvents
// it returns errors, so it may run in any goroutine.
func fetchEvents(ctx context.Context, method, url, body string, n int, at func(), header ...string) ([]event, error) {
	resp, err := send(ctx, method, url, body, header...)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("%s %s: %d %s: %s", method, url, resp.StatusCode, ct, b)
	}
	var out []event
	for ev, err := range sse.Read(resp.Body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
		if err != nil {
			return out, fmt.Errorf("%s %s: after %d events: %w", method, url, len(out), err)
		}
		out = append(out, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data})
		if len(out) == n && at != nil {
			at()
		}
	}
	return out, nil
}
