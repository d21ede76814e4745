package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/stream"
)

// natsCluster is a JetStream cluster of embedded nats-servers
// (journaltest.Cluster) under the names the tests use.
type natsCluster struct {
	*journaltest.Cluster
	names []string
}

// startNATSCluster starts n nodes and returns once JetStream is clustered
// and current everywhere.
func startNATSCluster(tb testing.TB, n int) *natsCluster {
	tb.Helper()
	c := journaltest.StartCluster(tb, n)
	return &natsCluster{Cluster: c, names: c.Names}
}

// kill shuts node i down (idempotent).
func (c *natsCluster) kill(i int) { c.Kill(i) }

// urlsFrom lists the client URLs starting with node first (with
// nats.DontRandomize a client connects to it, and fails over in order).
func (c *natsCluster) urlsFrom(first int) []string { return c.URLsFrom(first) }

func (c *natsCluster) index(name string) int { return c.Index(name) }

// leaders returns the node names leading the journal's stream and the
// records bucket's stream.
func (c *natsCluster) leaders(ctx context.Context, nc *nats.Conn) (events, records string, err error) {
	return c.Leaders(ctx, nc)
}

// pollUntil checks cond until it holds, failing after timeout
// (testutil.Eventually).
func pollUntil(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	testutil.Eventually(tb, timeout, what, cond)
}

// startNATSServer starts one embedded JetStream server on a loopback port
// (instances reach it over TCP, with reconnects, as cmd/reprise does): the
// documented topology without a cluster, for tests that run several
// instances on one NATS.
func startNATSServer(tb testing.TB) *journal.Embedded {
	tb.Helper()
	ns, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: tb.TempDir(), Port: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(ns.Shutdown)
	return ns
}

// instance is an in-process reprise (a proxy.Proxy on a loopback port) on
// NATS over TCP with reconnects (a cluster: journal and records at R3).
type instance struct {
	name string
	nc   *nats.Conn
	rc   *nats.Conn // the key records'
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
	// Two connections, as cmd/reprise opens them: the events', and the
	// key records' (lease renewals never queue behind events).
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(strings.Join(urls, ","), append([]nats.Option{nats.Name(name), nats.DontRandomize(),
			nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.Timeout(2 * time.Second)}, journal.ConnectOptions()...)...)
		if err != nil {
			tb.Fatalf("%s: nats: %v", name, err)
		}
		return nc
	}
	nc, rc := connect(name), connect(name+"-records")
	up, _ := url.Parse(upstream)
	cfg := proxy.Config{
		NATS: nc, Journal: journal.Config{Replicas: o.replicas, Records: rc}, Owner: name, Lease: o.lease, Upstream: up,
		Auth: auth.Config{Secret: testSecret}, Logger: testLogger(), HTTP: stream.Settings{Heartbeat: 500 * time.Millisecond},
	}
	if o.configure != nil {
		o.configure(&cfg)
	}
	in := &instance{name: name, nc: nc, rc: rc, grace: o.grace, lenient: o.lenient}
	in.p, in.addr, in.URL = serveProxy(tb, cfg) // proxy.New waits for the meta leader if it is still electing
	if in.grace == 0 {
		in.grace = 10 * time.Second
	}
	tb.Cleanup(func() { in.stop(tb) })
	return in
}

// stop shuts the instance down gracefully (idempotent).
func (in *instance) stop(tb testing.TB) {
	tb.Helper()
	if in.done {
		return
	}
	in.done = true
	stopProxy(tb, in.p, in.grace, in.lenient)
	in.nc.Close()
	in.rc.Close()
}

// startReprise runs the reprise binary with args (plus a loopback listen
// address and error logging) and waits until it is ready. SIGKILL it with
// sigkill; p.exited is closed once it ended, with its exit status in p.err.
// The listen address is one that was free: should another listener take it
// first, the binary exits, and starts again on another (three tries).
func startReprise(tb testing.TB, args ...string) *process {
	tb.Helper()
	var err error
	for try := 1; try <= 3; try++ {
		var p *process
		if p, err = launchReprise(tb, testutil.FreeAddr(tb), args); err == nil {
			return p
		}
		if !errors.Is(err, testutil.ErrExited) {
			break
		}
		tb.Logf("reprise %v, try %d: %v", args, try, err)
	}
	tb.Fatalf("reprise %v: %v", args, err)
	return nil
}

// launchReprise starts the binary listening on addr and waits until it is
// ready, or has exited.
func launchReprise(tb testing.TB, addr string, args []string) (*process, error) {
	tb.Helper()
	args = append([]string{"--listen", addr, "--log-level", "error", "--secret", string(testSecret)}, args...)
	cmd := exec.Command(reprisebin(tb), args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &process{cmd: cmd, URL: "http://" + addr, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	return p, testutil.AwaitReady(p.URL, 30*time.Second, p.exited)
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
// refusedError is a request refused with 429 (overloaded, too many
// generations): a client asks again after retryAfter.
type refusedError struct {
	err        error
	retryAfter time.Duration
}

func (e *refusedError) Error() string { return e.err.Error() }

func fetchEvents(ctx context.Context, method, url, body string, n int, at func(), header ...string) ([]event, error) {
	resp, err := send(ctx, method, url, body, header...)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		err := fmt.Errorf("%s %s: %d %s: %s", method, url, resp.StatusCode, ct, b)
		if resp.StatusCode == http.StatusTooManyRequests {
			ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			return nil, &refusedError{err: err, retryAfter: time.Duration(max(ra, 1)) * time.Second}
		}
		return nil, err
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
