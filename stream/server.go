package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Defaults for Config.
const (
	DefaultMaxBody      = 32 << 20
	DefaultMaxEventSize = 512 << 10
	DefaultMaxResult    = 64 << 20
	DefaultAttachWait   = 30 * time.Second
	DefaultHeartbeat    = 15 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds connecting to the upstream.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultHeaderTimeout bounds the wait for a response head once the
	// request was sent (then the attempt is ambiguous).
	DefaultHeaderTimeout        = 60 * time.Second
	DefaultIdleTimeout          = 60 * time.Second
	DefaultMaxGeneration        = 30 * time.Minute
	DefaultMaxStreamEvents      = 200_000
	DefaultMaxStreamBytes       = 256 << 20
	DefaultMaxTenantGenerations = classify.DefaultMaxConcurrent
	DefaultMaxReadersPerKey     = 32
	DefaultMaxWSMessage         = 4 << 10
	DefaultCapabilityTTL        = 24 * time.Hour
	// DefaultSDKRetryWindow is how long a keyless request's SDK retries attach to it.
	DefaultSDKRetryWindow = 10 * time.Minute
)

// DefaultClient is an upstream client with connect and response-head
// timeouts and no overall timeout (streams are long).
func DefaultClient(connect, head time.Duration) *http.Client {
	return &http.Client{
		// The upstream is configuration: never follow it elsewhere.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   connect,
			ResponseHeaderTimeout: head,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ForceAttemptHTTP2:     true,
		}}
}

// ErrInvalidOption wraps every configuration error.
var ErrInvalidOption = errors.New("stream: invalid option")

// Config configures a Server.
type Config struct {
	// Journal stores events and records. Required.
	Journal *journal.Journal
	// Resume makes the start/attach/replay decisions. Required.
	Resume *resume.Manager
	// Upstream is the OpenAI-compatible base URL; request paths are joined to it. Required.
	Upstream *url.URL
	// Client calls the upstream. Default: DefaultClient(DefaultConnectTimeout, DefaultHeaderTimeout).
	Client *http.Client
	// Policy is the call policy toward the upstream (retries, budget,
	// breaker, concurrency limit). Default: classify's defaults over Client.
	Policy *classify.Policy
	// UpstreamIdempotency: the upstream honours Idempotency-Key, so each
	// generation's key is forwarded (and the policy may retry ambiguous
	// failures). Default false.
	UpstreamIdempotency bool
	// IdleTimeout fails a stream that sends no event for this long
	// (upstream_interrupted). Default DefaultIdleTimeout (60 s).
	IdleTimeout time.Duration
	// MaxGeneration caps one generation's total time. Default DefaultMaxGeneration (30 min).
	MaxGeneration time.Duration
	// SDKRetryWindow: a keyless SDK retry (X-Stainless-Retry-Count ≥ 1) of a
	// body sent within this window attaches to it. 0 takes the default,
	// negative disables. Default DefaultSDKRetryWindow (10 min).
	SDKRetryWindow time.Duration
	// Secret keys the tenant derivation from credentials. Required, ≥ 16 bytes.
	Secret []byte
	// MaxBody is the request body limit. Default DefaultMaxBody (32 MiB).
	MaxBody int64
	// MaxEventSize is the largest upstream SSE event. Default DefaultMaxEventSize (512 KiB).
	MaxEventSize int
	// MaxResult is the largest non-streamed upstream body. Default DefaultMaxResult (64 MiB).
	MaxResult int64
	// AttachWait bounds how long a non-streaming duplicate waits for the
	// generation in progress before 409. Default DefaultAttachWait (30 s).
	AttachWait time.Duration
	// Heartbeat is the interval of SSE keep-alive comments. Default DefaultHeartbeat (15 s).
	Heartbeat time.Duration
	// WriteTimeout disconnects a client that does not take an event within it. Default DefaultWriteTimeout (30 s).
	WriteTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Auth is the auth mode. Default AuthPassthrough.
	Auth AuthMode
	// TenantHeader, when set, names the header whose value is the caller's
	// credential instead of the bearer token. Default "" (Authorization).
	TenantHeader string
	// ProxyKeys are the keys callers must present in AuthStatic.
	ProxyKeys []string
	// UpstreamKey is sent to the upstream as a bearer token in AuthStatic
	// and AuthNone. It never reaches clients. Default none.
	UpstreamKey string
	// CapabilityTTL is how long a Location's capability token is valid.
	// Default 24 h (the journal's TTL in cmd/reprise).
	CapabilityTTL time.Duration
	// MaxStreamEvents and MaxStreamBytes cap one generation; past them it
	// fails with stream_too_large. Defaults DefaultMaxStreamEvents (200,000)
	// and DefaultMaxStreamBytes (256 MiB).
	MaxStreamEvents int
	MaxStreamBytes  int64
	// MaxTenantGenerations caps a tenant's concurrent generations on this
	// instance (429 too_many_generations). Default DefaultMaxTenantGenerations
	// (512, the upstream concurrency limit: one tenant may fill the instance).
	MaxTenantGenerations int
	// MaxReadersPerKey caps concurrent readers of one key on this instance
	// (429 too_many_readers). Default DefaultMaxReadersPerKey (32).
	MaxReadersPerKey int
	// MaxWSMessage caps a WebSocket message from a client. Default 4 KiB.
	MaxWSMessage int64
	// Registerer takes the Prometheus metrics. Default: a private registry
	// (nothing exported); cmd/reprise passes prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
}

func (c *Config) fill() error {
	if c.Journal == nil || c.Resume == nil || c.Upstream == nil {
		return fmt.Errorf("%w: journal, resume and upstream are required", ErrInvalidOption)
	}
	if len(c.Secret) < 16 {
		return fmt.Errorf("%w: secret must be at least 16 bytes", ErrInvalidOption)
	}
	if c.Client == nil {
		c.Client = DefaultClient(DefaultConnectTimeout, DefaultHeaderTimeout)
	}
	if c.Policy == nil {
		p, err := classify.New(classify.Config{RetryAmbiguous: c.UpstreamIdempotency}, c.Client)
		if err != nil {
			return err
		}
		c.Policy = p
	}
	if c.Policy.RetriesAmbiguous() && !c.UpstreamIdempotency {
		return fmt.Errorf("%w: retrying ambiguous failures without forwarding Idempotency-Key could bill twice", ErrInvalidOption)
	}
	setDefault(&c.IdleTimeout, DefaultIdleTimeout)
	setDefault(&c.MaxGeneration, DefaultMaxGeneration)
	setDefault(&c.MaxStreamEvents, DefaultMaxStreamEvents)
	setDefault(&c.MaxStreamBytes, DefaultMaxStreamBytes)
	setDefault(&c.MaxTenantGenerations, DefaultMaxTenantGenerations)
	setDefault(&c.MaxReadersPerKey, DefaultMaxReadersPerKey)
	setDefault(&c.MaxWSMessage, DefaultMaxWSMessage)
	setDefault(&c.CapabilityTTL, DefaultCapabilityTTL)
	switch c.Auth {
	case "":
		c.Auth = AuthPassthrough
	case AuthPassthrough, AuthNone:
	case AuthStatic:
		if len(c.ProxyKeys) == 0 {
			return fmt.Errorf("%w: auth static needs proxy keys", ErrInvalidOption)
		}
	default:
		return fmt.Errorf("%w: auth mode %q (passthrough, static or none)", ErrInvalidOption, c.Auth)
	}
	if c.SDKRetryWindow == 0 {
		c.SDKRetryWindow = DefaultSDKRetryWindow
	}
	setDefault(&c.MaxBody, DefaultMaxBody)
	setDefault(&c.MaxEventSize, DefaultMaxEventSize)
	setDefault(&c.MaxResult, DefaultMaxResult)
	setDefault(&c.AttachWait, DefaultAttachWait)
	setDefault(&c.Heartbeat, DefaultHeartbeat)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	return nil
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Server serves the HTTP contract.
type Server struct {
	cfg     Config
	metrics *metrics
	mux     *http.ServeMux
	live    registry
	pumps   sync.WaitGroup
	pumpCtx context.Context
	stop    context.CancelFunc

	proxyKeys map[string]bool // tenant ids of the static proxy keys

	detached *detached // SSE readers on connections taken over from net/http

	mu      sync.Mutex
	closing bool
	gens    map[string]int // running generations per tenant
	readers map[string]int // connected readers per key id
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, metrics: newMetrics(cfg.Registerer, cfg.Policy.BreakerOpen, cfg.Journal.Stats), mux: http.NewServeMux(),
		proxyKeys: map[string]bool{}, gens: map[string]int{}, readers: map[string]int{}, detached: newDetached()}
	for _, k := range cfg.ProxyKeys {
		s.proxyKeys[s.tenantOf(k)] = true
	}
	s.pumpCtx, s.stop = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	s.mux.HandleFunc("POST /v1/chat/completions", s.handleCreate)
	s.mux.HandleFunc("POST /v1/audio/speech", s.handleCreate)
	s.mux.HandleFunc("/v1/chat/completions", methodNotAllowed("POST"))
	s.mux.HandleFunc("/v1/audio/speech", methodNotAllowed("POST"))
	s.mux.HandleFunc("GET /v1/streams/{key}", s.handleStream)
	s.mux.HandleFunc("/v1/streams/{key}", methodNotAllowed("GET"))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { writeError(w, errNotFound) })
}

// Handle mounts another handler (the demo page, metrics) on the server's mux.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.cfg.Journal.Ready(ctx); err != nil {
		writeError(w, errUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ready"}`))
}

// Shutdown refuses new generations, waits until the running ones finished
// journaling or ctx ends, then fails what is left. It is idempotent.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	done := waited(&s.pumps)
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.stop() // pumps record their generations as failed (proxy_shutdown)
	select {
	case <-done:
	case <-time.After(15 * time.Second):
	}
	return ctx.Err()
}

// waited is closed once wg's count is zero.
func waited(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

// startPump registers a new generation and runs its pump; false when the
// server is shutting down.
func (s *Server) startPump(p *pump) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.live.add(p.ref, p.tail, p.lease)
	s.pumps.Add(1)
	s.metrics.running.Inc()
	go p.run(s.pumpCtx)
	return true
}

// takeGeneration reserves one of tenant's concurrent generations.
func (s *Server) takeGeneration(tenant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gens[tenant] >= s.cfg.MaxTenantGenerations {
		return false
	}
	s.gens[tenant]++
	return true
}

func (s *Server) releaseGeneration(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gens[tenant]--; s.gens[tenant] <= 0 {
		delete(s.gens, tenant)
	}
}

// takeReader reserves a reader place on key id; release returns it.
func (s *Server) takeReader(id string) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.readers[id] >= s.cfg.MaxReadersPerKey {
		return nil, false
	}
	s.readers[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.readers[id]--; s.readers[id] <= 0 {
				delete(s.readers, id)
			}
		})
	}, true
}
