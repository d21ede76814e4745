// Package proxy assembles one reprise instance from one Config — journal →
// resume → classify → engine → HTTP surface — serves it, and stops it with
// one Shutdown. The binary, the benchmark, the chaos tool and the test
// environments all build their proxies here.
//
// It owns the wiring and the order of stopping, nothing else: every
// behaviour lives in the package it assembles. It neither starts nor closes
// the NATS connection it is given.
package proxy

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream"
)

// Defaults for Config.
const (
	// DefaultMaxHeaderBytes bounds a request's headers (431 above).
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultOpenTimeout bounds New's wait for JetStream (a new cluster
	// may still be electing its leader).
	DefaultOpenTimeout = time.Minute
	// MinTTL is the shortest Journal.TTL New accepts; Config.MinTTL says
	// how much longer the rest of the configuration needs.
	MinTTL = time.Minute
)

// ErrInvalidOption wraps every configuration error.
var ErrInvalidOption = errors.New("proxy: invalid option")

// ErrShortTTL is wrapped by New's error for a Journal.TTL under MinTTL:
// events would expire from the journal while their generation runs, and
// readers, resumes and replays would find a stream with its start gone.
var ErrShortTTL = errors.New("proxy: a generation's first events would expire while it may still run (TTL under MinTTL, or under the longest generation plus its lease)")

// Config is everything one instance is built from. Zero fields take the
// defaults of the package they configure.
type Config struct {
	// NATS is the connection to JetStream. Required. The proxy does not
	// close it.
	NATS *nats.Conn
	// Journal configures the JetStream assets (TTL, replicas, append
	// timeout). Defaults: journal's. TTL must be at least MinTTL.
	Journal journal.Config
	// Owner names this instance in key records. Default
	// <hostname>-<pid>-<random>.
	Owner string
	// Lease is the owner lease of a running generation. Default
	// resume.DefaultLease (10 s).
	Lease time.Duration
	// Upstream is the model API's base URL; request paths are joined to
	// it. Required.
	Upstream *url.URL
	// Fallbacks are further upstreams of the same formats, tried in order
	// when the one before refused a generation before its first byte; each
	// gets a policy of its own (its own breaker and budget) from Policy.
	// Default none.
	Fallbacks []*url.URL
	// Routes, when set, replace Upstream and Fallbacks: named upstreams,
	// each with the paths and models it serves and its own key and
	// breaker. A request goes to the routes that serve it, in order (the
	// next ones on failover). Default none.
	Routes []Route
	// Client calls the upstream. Default engine.DefaultClient with
	// engine.DefaultConnectTimeout and engine.DefaultHeaderTimeout.
	Client *http.Client
	// Policy is the call policy toward the upstream (retries, budget,
	// breaker, concurrency limit). Defaults: classify's.
	Policy classify.Config
	// UpstreamIdempotency: the upstream honours Idempotency-Key, so each
	// generation's key is forwarded and ambiguous failures may be retried
	// (Policy.RetryAmbiguous is set with it). Default false.
	UpstreamIdempotency bool
	// UpstreamBackground: the upstreams run OpenAI's background mode
	// (engine.Upstream.Background): streamed Responses generations are
	// started in the background, and one whose owner died is continued by
	// the instance that takes it over instead of being lost. Default false.
	UpstreamBackground bool
	// Limits bound each generation. Defaults: engine's; MaxTenantGenerations
	// defaults to Policy.MaxConcurrent.
	Limits engine.Limits
	// ResultsCache is how many bytes of streamed results that completed on
	// this instance it keeps in memory for their resumes and replays here
	// (engine.Config.ResultsCache). Default engine.DefaultResultsCache;
	// negative: none.
	ResultsCache int64
	// HTTP are the HTTP surface's limits and timings. Defaults: stream's.
	HTTP stream.Settings
	// Auth is the auth mode, the server secret (required) and the keys.
	Auth auth.Config
	// MaxHeaderBytes bounds a request's headers. Default DefaultMaxHeaderBytes (64 KiB).
	MaxHeaderBytes int
	// TLS, when set, makes Serve serve HTTPS with it. Default nil (HTTP).
	TLS *tls.Config
	// Prices prices each generation (the status JSON's cost, billed and
	// saved; reprise_cost_total). Default nil: no cost is known.
	Prices *cost.Table
	// CostGuard narrows every upstream's retries to connect failures while
	// the fleet's spend (by Prices; every instance on the JetStream shares
	// its own, journal.Spend) rises too fast or passes a daily budget.
	// Default: off.
	CostGuard cost.GuardConfig
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Tracer follows each generation: OpenTelemetry traces and GenAI
	// metrics (telemetry.Telemetry, which the caller shuts down after the
	// proxy). Default: none.
	Tracer engine.Tracer
	// Registerer takes the Prometheus metrics; when it is also a
	// prometheus.Gatherer, GET /metrics serves them. Default: a private
	// registry, served on /metrics.
	Registerer prometheus.Registerer
}

// Route is a named upstream and what it serves.
type Route struct {
	// Name names it in Reprise-Upstream and the status. Default: its host.
	Name string
	// URL is its base URL. Required.
	URL *url.URL
	// Key is its API key in static and none auth. Default Auth.UpstreamKey.
	Key string
	// KeyHeader is the header Key is sent in (auth.Config.UpstreamHeader:
	// auth.HeaderBearer, HeaderXAPIKey or HeaderAPIKey). Default
	// Auth.UpstreamHeader.
	KeyHeader string
	// Paths (prefixes) and Models (a trailing * matches a prefix) it
	// serves. Default: every request.
	Paths, Models []string
}

// Proxy is one assembled instance.
type Proxy struct {
	cfg      Config // as New completed it
	auth     *auth.Auth
	metrics  *metrics.Metrics
	keySpend *cost.KeySpend // nil without a price table

	reload   sync.Mutex                  // one Reload at a time
	policies map[string]*classify.Policy // each upstream's call policy, by name: kept across reloads

	stopKeySpend func() // stops the per-key spend's exchange with the fleet

	journal *journal.Journal
	engine  *engine.Engine
	srv     *stream.Server
	hs      *http.Server
	log     *slog.Logger

	stopCancels func() // stops listening for cancels asked elsewhere
	stopShare   func() // stops the cost guard's exchange with the fleet
	sweeper     *resume.Sweeper

	serving  sync.WaitGroup
	stopOnce sync.Once
	stopped  chan struct{} // closed once the HTTP server stops taking requests
}

// New opens the journal on cfg.NATS (waiting up to DefaultOpenTimeout or
// until ctx ends) and assembles the instance. It does not serve yet.
func New(ctx context.Context, cfg Config) (*Proxy, error) {
	if cfg.NATS == nil || (cfg.Upstream == nil && len(cfg.Routes) == 0) {
		return nil, fmt.Errorf("%w: NATS and an upstream (or routes) are required", ErrInvalidOption)
	}
	if ttl, least := cmp.Or(cfg.Journal.TTL, journal.DefaultTTL), cfg.MinTTL(); ttl < least {
		return nil, fmt.Errorf("%w: journal TTL %s is shorter than %s: %w", ErrInvalidOption, ttl, least, ErrShortTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a, err := auth.New(cfg.Auth)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, DefaultOpenTimeout)
	defer cancel()
	reg := cfg.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var j *journal.Journal
	m := metrics.New(reg, func() journal.Stats { return j.Stats() })
	jcfg := cfg.Journal
	jcfg.OnAppend = m.JournalAppend
	if user := cfg.Journal.OnAppend; user != nil {
		jcfg.OnAppend = func(d time.Duration) { m.JournalAppend(d); user(d) }
	}
	if jcfg.OnOpenRetry == nil {
		jcfg.OnOpenRetry = func(attempt int, err error) {
			if attempt == 1 || attempt%10 == 0 { // about every 20 s once the backoff is at its longest
				cfg.Logger.Warn("journal: JetStream cannot take the journal yet; trying again", "attempt", attempt, "within", DefaultOpenTimeout, "err", err)
			}
		}
	}
	cfg.Logger.Info("journal: creating or updating its stream and bucket", "stream", cmp.Or(jcfg.Stream, journal.DefaultStream),
		"bucket", cmp.Or(jcfg.Bucket, journal.DefaultBucket), "replicas", cmp.Or(jcfg.Replicas, journal.DefaultReplicas), "memory", jcfg.Memory)
	j, err = journal.Open(octx, cfg.NATS, jcfg)
	if err != nil {
		return nil, err
	}
	cfg.Logger.Info("journal: ready")
	m.WatchLag(j.Lag)
	name := owner(cfg.Owner)
	if cfg.Client == nil {
		cfg.Client = engine.DefaultClient(engine.DefaultConnectTimeout, engine.DefaultHeaderTimeout)
	}
	cfg.Policy.RetryAmbiguous = cfg.Policy.RetryAmbiguous || cfg.UpstreamIdempotency
	guard, err := costGuard(cfg, m.GuardSwitched)
	if err != nil {
		return nil, err
	}
	if guard != nil {
		cfg.Policy.Narrowed = guard.Narrowed
	}
	routes := cfg.Routes
	if len(routes) == 0 {
		for _, u := range append([]*url.URL{cfg.Upstream}, cfg.Fallbacks...) {
			routes = append(routes, Route{URL: u})
		}
	}
	p := &Proxy{cfg: cfg, auth: a, metrics: m, policies: map[string]*classify.Policy{}}
	ups, err := p.upstreams(routes)
	if err != nil {
		return nil, err
	}
	if cfg.Limits.MaxTenantGenerations == 0 {
		cfg.Limits.MaxTenantGenerations = cfg.Policy.MaxConcurrent // 0: the engine's default, classify's
	}
	ecfg := engine.Config{
		Journal:  j,
		Upstream: ups[0], Fallbacks: ups[1:],
		Limits: cfg.Limits, ResultsCache: cfg.ResultsCache, Names: resume.NewNames(j), Metrics: m, Logger: cfg.Logger, Tracer: cfg.Tracer,
	}
	if cfg.Prices != nil { // a nil *cost.Table in the interface would not be nil
		ecfg.Prices = cfg.Prices
	}
	if guard != nil {
		ecfg.Spend = guard
	}
	if cfg.Prices != nil && a.SharesKey() {
		// Each proxy key's spend, fleet-wide: its budget, GET /usage, and
		// the reprise_key_* series. Static auth only: its keys are a set
		// the configuration bounds, unlike passthrough's callers.
		p.keySpend = cost.NewKeySpend(nil, p.keyGauges)
		ecfg.KeySpend = keySpender{p}
	}
	ecfg.KeyName = a.NameOf
	eng, err := engine.New(ecfg)
	if err != nil {
		return nil, err
	}
	m.WatchResults(eng.ResultsHeld)
	rm, err := resume.New(resume.Config{Store: j, Owner: name, Lease: cfg.Lease, Kept: kept(j),
		Adopter:  eng,         // a generation whose owner died is continued here when its upstream still runs it
		Salvager: eng,         // else completed when its journal holds its result, and billed here
		Gone:     j.OwnerGone, // an owner whose NATS connection closed died: its generations' readers need not wait for its lease
		Lost:     func(state resume.State) { m.GenerationLost(string(state)) },
	})
	if err != nil {
		return nil, err
	}
	if cfg.Limits.CancelUnread > 0 {
		cfg.HTTP.ReadingSignal = cfg.Limits.CancelUnread / 4
	}
	srv, err := stream.New(stream.Config{Journal: j, Resume: rm, Engine: eng, Auth: a, Metrics: m, Prices: cfg.Prices, KeySpend: p.keySpend,
		Settings: cfg.HTTP, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	stopCancels, err := j.OnCancel(func(ref journal.Ref) { eng.Cancel(ref) }) // asked on another instance
	if err != nil {
		return nil, err
	}
	// This instance answers for its name while it may run a generation:
	// readers elsewhere find it gone as soon as its connection closes.
	stopAnswer, err := j.AnswerOwner(name)
	if err != nil {
		stopCancels()
		return nil, err
	}
	stopListening := stopCancels
	stopCancels = func() { stopListening(); stopAnswer() }
	if cfg.Limits.CancelUnread > 0 {
		stopReading, err := j.OnReading(eng.Reading) // readers here and on every other instance
		if err != nil {
			stopCancels()
			return nil, err
		}
		stopSignals := stopCancels
		stopCancels = func() { stopSignals(); stopReading() }
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		srv.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	p.journal, p.engine, p.srv, p.log, p.stopped, p.stopCancels, p.stopShare = j, eng, srv, cfg.Logger, make(chan struct{}), stopCancels, func() {}
	p.stopKeySpend = func() {}
	p.keyGauges()
	if p.keySpend != nil {
		// Every instance on this JetStream publishes its per-key spend and
		// follows the others': a key's budget holds fleet-wide.
		fleet, err := j.KeySpend(octx, name)
		if err != nil {
			stopCancels()
			return nil, err
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.keySpend.Share(ctx, fleet, keySpendEvery, func(err error) { cfg.Logger.Warn("proxy keys: the fleet's spend was not exchanged", "err", err) })
		}()
		p.stopKeySpend = func() { stop(); <-done }
	}
	if guard != nil {
		// The guard counts the fleet's spend: every instance on this
		// JetStream publishes its own and reads the others'.
		spend, err := j.Spend(octx, name)
		if err != nil {
			stopCancels()
			p.stopKeySpend()
			return nil, err
		}
		ctx, stop := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			guard.Share(ctx, spend, func(err error) { cfg.Logger.Warn("cost guard: the fleet's spend was not exchanged", "err", err) })
		}()
		stopKeySpend := p.stopKeySpend
		p.stopShare = func() { stop(); <-done; stopKeySpend() }
	} else {
		p.stopShare = p.stopKeySpend
	}
	// Keys whose owner died are settled though nobody reads them: their
	// status and the cost view are right within a lease and a sweep.
	logger := cfg.Logger
	p.sweeper, err = rm.Sweep(context.Background(), resume.SweepConfig{
		Records: j,
		Settled: func(id string, rec resume.Record) {
			if rec.State != resume.InProgress { // adopted: the engine tells of it
				logger.Info("a generation whose owner was lost was settled", "key_id", id, "gen", rec.Generation, "state", rec.State)
			}
		},
		Failed: func(id string, err error) {
			if id == "" {
				logger.Warn("the records watch could not be opened: keys whose owner died are settled only when read", "err", err)
				return
			}
			logger.Debug("a key whose owner's lease ran out could not be settled yet", "key_id", id, "err", err)
		},
	})
	if err != nil {
		stopCancels()
		p.stopShare()
		return nil, err
	}
	p.hs = &http.Server{
		Handler: srv, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		MaxHeaderBytes: cfg.MaxHeaderBytes, TLSConfig: cfg.TLS,
		ErrorLog:    slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
		ConnContext: stream.ConnContext,
	}
	return p, nil
}

// keySpendEvery is the least time between two publications of this
// instance's per-key spend (a burst of generations is one write), and how
// long a failed exchange waits before it is tried again.
const keySpendEvery = 250 * time.Millisecond

// MinTTL is the shortest Journal.TTL c works with: MinTTL, and no less
// than a generation may run (Limits.MaxGeneration) plus the lease its dead
// owner holds (Lease) — the journal drops a message TTL after it was
// written (the stream's MaxAge), so a shorter TTL loses a long
// generation's first events while it still runs or before it is settled.
func (c Config) MinTTL() time.Duration {
	gen, lease := c.Limits.MaxGeneration, c.Lease
	if gen <= 0 {
		gen = engine.DefaultMaxGeneration
	}
	if lease <= 0 {
		lease = resume.DefaultLease
	}
	return max(MinTTL, gen+lease)
}

// owner is name, or one made of the host, the process and a random part.
func owner(name string) string {
	if name != "" {
		return name
	}
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Handle mounts another handler (the demo page) on the proxy's routes.
func (p *Proxy) Handle(pattern string, h http.Handler) { p.srv.Handle(pattern, h) }

// ServeHTTP serves the proxy's routes: for a caller that runs its own
// http.Server (Serve and Shutdown then do not know its connections).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.srv.ServeHTTP(w, r) }

// Journal is the proxy's journal (for tests that look inside it).
func (p *Proxy) Journal() *journal.Journal { return p.journal }

// Serve serves HTTP (or HTTPS, with Config.TLS) on ln until Shutdown; it
// returns nil then, or the error that stopped it.
func (p *Proxy) Serve(ln net.Listener) error {
	p.serving.Add(1)
	defer p.serving.Done()
	var err error
	if p.hs.TLSConfig != nil {
		err = p.hs.ServeTLS(ln, "", "")
	} else {
		err = p.hs.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the instance within ctx. It stops sweeping for keys whose
// owner died (other instances sweep on; a key nobody else sweeps is settled
// by its next reader), stops taking connections, refuses new generations
// (503 shutting_down) and lets the running ones finish journaling; then
// readers end on their own as their generations end. When ctx ends first, what is left is cut: generations still running
// are cancelled (they end failed, proxy_shutdown, and record so in the
// background, bounded by the journal's timeouts: a later Shutdown waits for
// them), connections are closed, and ctx's error is returned. It is
// idempotent.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.sweeper.Stop() // nothing is adopted or settled here any more
	p.stopOnce.Do(func() {
		go func() {
			// Stop accepting and close idle connections; active ones end
			// as their answers do.
			_ = p.hs.Shutdown(context.WithoutCancel(ctx))
			close(p.stopped)
		}()
	})
	err := p.engine.Shutdown(ctx)
	if err == nil {
		p.stopCancels() // nothing runs here any more
		p.stopShare()
	}
	// Readers still attached follow generations that are now complete in
	// the journal, or run elsewhere; they can resume anywhere else.
	p.srv.Close(ctx)
	select {
	case <-p.stopped:
	case <-ctx.Done():
		_ = p.hs.Close()
		<-p.stopped
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// costGuard returns the cost guard cfg asks for (nil: none), which logs
// each switch and tells switched.
func costGuard(cfg Config, switched func(narrowed bool)) (*cost.Guard, error) {
	gc := cfg.CostGuard
	if gc.Ratio == 0 && gc.DailyBudget == 0 {
		return nil, nil
	}
	if cfg.Prices == nil {
		return nil, fmt.Errorf("%w: the cost guard needs a price table", ErrInvalidOption)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	next := gc.OnSwitch
	gc.OnSwitch = func(narrowed bool, why string) {
		if narrowed {
			log.Warn("cost guard: upstream retries narrowed to connect failures", "why", why)
		} else {
			log.Info("cost guard: spend calmed down; upstream retries widened again")
		}
		switched(narrowed)
		if next != nil {
			next(narrowed, why)
		}
	}
	return cost.NewGuard(gc)
}
