package tests

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream"
)

var testSecret = []byte("reprise-test-secret-0123456789")

// env is one reprise instance on an embedded JetStream, in front of the
// fake upstream, all inside the test process.
type env struct {
	tb  testing.TB
	dir string
	opt envOptions

	emb  *journal.Embedded
	nc   *nats.Conn
	rc   *nats.Conn // the key records' connection, as cmd/reprise has one
	p    *proxy.Proxy
	reg  *prometheus.Registry
	addr string // the proxy's listen address
	URL  string

	LLM    *mockllm.Server
	llmSrv *httptest.Server
}

type envOptions struct {
	lease      time.Duration
	attachWait time.Duration
	natsPort   int   // 0: in-process only; -1: a random TCP port
	maxStore   int64 // the embedded JetStream's disk cap (0: NATS's default)
	tokenDelay time.Duration
	// demoModel: the fake model as `go run ./cmd/reprise` serves it
	// (readable text, 120 tokens), for the page's screenshot.
	demoModel bool
	// abandon: generations still running at the end are failed after a
	// short grace (benchmarks with endless streams) instead of failing the test.
	abandon bool
	// upstream replaces the fake model (tests of odd upstreams).
	upstream http.Handler
	// configure adjusts the proxy's config before it starts (policies, timeouts).
	configure func(*proxy.Config)
	// journal adjusts the journal's config.
	journal func(*journal.Config)
	// background: the fake runs background mode, and the proxy asks for it
	// (--upstream-background).
	background bool
}

type envOption func(*envOptions)

func withLease(d time.Duration) envOption      { return func(o *envOptions) { o.lease = d } }
func withAttachWait(d time.Duration) envOption { return func(o *envOptions) { o.attachWait = d } }
func withNATSPort() envOption                  { return func(o *envOptions) { o.natsPort = -1 } }
func withMaxStore(n int64) envOption           { return func(o *envOptions) { o.maxStore = n } }
func withTokenDelay(d time.Duration) envOption { return func(o *envOptions) { o.tokenDelay = d } }
func withDemoModel() envOption                 { return func(o *envOptions) { o.demoModel = true } }
func withAbandon() envOption                   { return func(o *envOptions) { o.abandon = true } }
func withUpstream(h http.Handler) envOption    { return func(o *envOptions) { o.upstream = h } }

// withBackground runs the fake in background mode and the proxy with
// UpstreamBackground.
func withBackground() envOption { return func(o *envOptions) { o.background = true } }

// withConfig adjusts the proxy's config (e.g. set Policy, timeouts) before
// each start.
func withConfig(f func(*proxy.Config)) envOption { return func(o *envOptions) { o.configure = f } }

// withJournal adjusts the proxy's journal.Config.
func withJournal(f func(*journal.Config)) envOption { return func(o *envOptions) { o.journal = f } }

func testLogger() *slog.Logger {
	level := slog.LevelError
	if os.Getenv("REPRISE_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func newEnv(tb testing.TB, opts ...envOption) *env {
	tb.Helper()
	e := &env{tb: tb, dir: tb.TempDir(), opt: envOptions{lease: 2 * time.Second, tokenDelay: 2 * time.Millisecond}}
	for _, o := range opts {
		o(&e.opt)
	}
	llm := mockllm.Config{TokenDelay: e.opt.tokenDelay, Background: e.opt.background}
	if e.opt.demoModel {
		llm.Readable, llm.Tokens = true, 120
	}
	e.LLM = mockllm.New(llm)
	var up http.Handler = e.LLM
	if e.opt.upstream != nil {
		up = e.opt.upstream
	}
	e.llmSrv = httptest.NewServer(up)
	tb.Cleanup(e.llmSrv.Close)
	e.startNATS()
	e.startProxy()
	tb.Cleanup(e.close)
	return e
}

func (e *env) startNATS() {
	e.tb.Helper()
	emb, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: e.dir, Port: e.opt.natsPort, MaxStore: e.opt.maxStore})
	if err != nil {
		e.tb.Fatal(err)
	}
	nc, err := emb.Connect("reprise-test")
	if err != nil {
		e.tb.Fatal(err)
	}
	rc, err := emb.Connect("reprise-test-records")
	if err != nil {
		e.tb.Fatal(err)
	}
	e.emb, e.nc, e.rc = emb, nc, rc
}

// natsURL is the embedded server's client URL (withNATSPort only).
func (e *env) natsURL() string { return e.emb.Server.ClientURL() }

func (e *env) startProxy() {
	e.tb.Helper()
	up, _ := url.Parse(e.llmSrv.URL)
	e.reg = prometheus.NewRegistry()
	cfg := proxy.Config{
		NATS: e.nc, Owner: "test-" + resume.NewKey()[3:11], Lease: e.opt.lease, Upstream: up,
		Auth: auth.Config{Secret: testSecret}, Logger: testLogger(), Registerer: e.reg,
		HTTP: stream.Settings{AttachWait: e.opt.attachWait, Heartbeat: 500 * time.Millisecond},
	}
	cfg.UpstreamBackground = e.opt.background
	cfg.Journal.Records = e.rc
	if e.opt.journal != nil {
		e.opt.journal(&cfg.Journal)
	}
	if e.opt.configure != nil {
		e.opt.configure(&cfg)
	}
	e.p, e.addr, e.URL = serveProxy(e.tb, cfg)
}

// serveProxy builds a proxy from cfg and serves it on a loopback port.
func serveProxy(tb testing.TB, cfg proxy.Config) (p *proxy.Proxy, addr, url string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := proxy.New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = p.Serve(ln) }()
	return p, ln.Addr().String(), "http://" + ln.Addr().String()
}

// stopProxy shuts the proxy down gracefully (running generations finish);
// with abandon, what still runs after a short grace is failed, and given
// the time to record so.
func stopProxy(tb testing.TB, p *proxy.Proxy, grace time.Duration, abandon bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := p.Shutdown(ctx)
	if err == nil {
		return
	}
	if !abandon {
		tb.Errorf("shutdown: %v", err)
	}
	settle, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Shutdown(settle); err != nil {
		tb.Errorf("shutdown: generations cancelled at the end of the grace did not end within 15s: %v", err)
	}
}

func (e *env) stopProxy() {
	e.tb.Helper()
	grace := 10 * time.Second
	if e.opt.abandon {
		grace = 200 * time.Millisecond
	}
	stopProxy(e.tb, e.p, grace, e.opt.abandon)
}

// restart stops the proxy and JetStream and starts both again on the same
// data directory.
func (e *env) restart() {
	e.tb.Helper()
	e.stopProxy()
	e.nc.Close()
	e.rc.Close()
	e.emb.Shutdown()
	e.startNATS()
	e.startProxy()
}

func (e *env) close() {
	e.stopProxy()
	e.nc.Close()
	e.rc.Close()
	e.emb.Shutdown()
}
