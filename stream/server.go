package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/cors"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/fair"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream/detach"
)

// Defaults for Settings.
const (
	DefaultMaxBody          = 32 << 20
	DefaultAttachWait       = 30 * time.Second
	DefaultHeartbeat        = 15 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
	DefaultMaxReadersPerKey = 32
	// DefaultMaxReadersPerTenant: idle readers cost a goroutine and a
	// connection each (no JetStream consumer); this keeps one tenant's from
	// taking what the others need.
	DefaultMaxReadersPerTenant = 2048
	DefaultMaxWSMessage        = 4 << 10
	// DefaultShedLag is how far behind the journal may be before new
	// generations are refused (Settings.ShedLag).
	DefaultShedLag = 500 * time.Millisecond
	// DefaultKeylessRetryWindow is how long after its client left a keyless
	// request's retry is recognised.
	DefaultKeylessRetryWindow = 10 * time.Minute
	// DefaultSSERetry: browsers wait 3 s by default before an EventSource
	// reconnects; a dropped stream resumes sooner.
	DefaultSSERetry = time.Second
)

// ErrInvalidOption wraps every configuration error.
var ErrInvalidOption = errors.New("stream: invalid option")

// Settings are the HTTP surface's limits and timings.
type Settings struct {
	// MaxBody is the request body limit. Default DefaultMaxBody (32 MiB).
	MaxBody int64
	// AttachWait bounds how long a non-streaming duplicate waits for the
	// generation in progress before 409. Default DefaultAttachWait (30 s).
	AttachWait time.Duration
	// Heartbeat is the interval of SSE keep-alive comments. Default DefaultHeartbeat (15 s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write and flush to a reader (an event, a
	// keep-alive, an error), not the time between them: a reader that does
	// not take one within it is cut, visibly. Default DefaultWriteTimeout (30 s).
	WriteTimeout time.Duration
	// MaxReadersPerKey caps concurrent readers of one key on this instance
	// (429 too_many_readers). Default DefaultMaxReadersPerKey (32).
	MaxReadersPerKey int
	// MaxReadersPerTenant caps one tenant's concurrent readers, of all its
	// keys, on this instance (429 too_many_readers). Default
	// DefaultMaxReadersPerTenant (2048).
	MaxReadersPerTenant int
	// MaxWSMessage caps a WebSocket message from a client. Default DefaultMaxWSMessage (4 KiB).
	MaxWSMessage int64
	// ReadingSignal is how often this instance tells every instance which
	// keys it has readers of (journal.Reading), for the owners' cancel of
	// unread generations (engine.Limits.CancelUnread). 0: never.
	ReadingSignal time.Duration
	// KeylessRetryWindow: a keyless request identical (tenant, path,
	// canonical body, client session) to one whose client left before its
	// result, within this window of its leaving, is that request's retry —
	// it attaches to or replays its generation (resume/keyless.go). 0 takes
	// the default, negative disables. Default DefaultKeylessRetryWindow
	// (10 min).
	KeylessRetryWindow time.Duration
	// ShedLag: while the journal is behind by more than this
	// (journal.Journal.Lag: the oldest event appended here and not yet
	// acknowledged), a request that would start a new generation is
	// refused with 429 overloaded and a Retry-After; attaches, replays,
	// resumes and readers are served as ever. An instance past saturation
	// so stops taking on work before its running generations suffer
	// (appends that time out, leases that lapse). 0 takes the default,
	// negative disables. Default DefaultShedLag (500 ms).
	ShedLag time.Duration
	// CORSOrigins are the origins whose pages may call the proxy from a
	// browser ("*" for any; scheme://host[:port], one "*" allowed in the
	// host). Default none: no CORS headers, preflights are not answered.
	CORSOrigins []string
	// SSERetry is the reconnection time sent (as "retry:") with the first
	// event of every event stream: EventSource and the client helpers wait
	// this long before they resume. Default DefaultSSERetry (1 s).
	SSERetry time.Duration
	// ReplayTurns is how many batches of stored events (readBatch, 64)
	// this instance's readers write at once; the others wait their turn,
	// given in rotation to the tenants that wait, then to each tenant's
	// readers (package fair): one tenant's bulk replays do not set
	// another's latency. A reader takes turns until it has caught up with
	// its generation; what it then follows live it writes as it comes.
	// 0 takes the default, negative disables. Default: GOMAXPROCS less
	// one, at least one (fair.Config.Turns).
	ReplayTurns int
}

func (s *Settings) fill() {
	setDefault(&s.MaxBody, DefaultMaxBody)
	setDefault(&s.AttachWait, DefaultAttachWait)
	setDefault(&s.Heartbeat, DefaultHeartbeat)
	setDefault(&s.WriteTimeout, DefaultWriteTimeout)
	setDefault(&s.MaxReadersPerKey, DefaultMaxReadersPerKey)
	setDefault(&s.MaxReadersPerTenant, DefaultMaxReadersPerTenant)
	setDefault(&s.MaxWSMessage, DefaultMaxWSMessage)
	setDefault(&s.SSERetry, DefaultSSERetry)
	if s.KeylessRetryWindow == 0 {
		s.KeylessRetryWindow = DefaultKeylessRetryWindow
	}
	if s.ShedLag == 0 {
		s.ShedLag = DefaultShedLag
	}
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Config configures a Server: the parts it serves from, and its settings.
type Config struct {
	// Journal is read to serve readers. Required.
	Journal *journal.Journal
	// Resume makes the start/attach/replay decisions. Required.
	Resume *resume.Manager
	// Engine runs the generations. Required.
	Engine *engine.Engine
	// Auth derives tenants and capabilities. Required.
	Auth *auth.Auth
	// Metrics takes the counts. Default: series on a private registry.
	Metrics *metrics.Metrics
	// Prices names the price table entry of a replayed generation's model
	// in reprise_cost_saved_total. Default nil: no cost is known.
	Prices *cost.Table
	// KeySpend is each proxy key's spend, fleet-wide: what a key's budget
	// is held to (429 budget_exceeded for its new generations over it) and
	// what GET /usage shows. Default nil: no budget is held.
	KeySpend *cost.KeySpend
	// Settings are the limits and timings; zero fields take their defaults.
	Settings Settings
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Server serves the HTTP contract.
type Server struct {
	cfg      Settings
	journal  *journal.Journal
	resume   *resume.Manager
	engine   *engine.Engine
	auth     *auth.Auth
	metrics  *metrics.Metrics
	prices   *cost.Table
	budgets  *cost.KeySpend
	log      *slog.Logger
	mux      *http.ServeMux
	handler  http.Handler  // mux, behind confine and CORS when configured
	detached *detach.Group // SSE readers on connections taken over from net/http
	// corsAllowed matches an Origin against Settings.CORSOrigins (nil:
	// none is allowed).
	corsAllowed *cors.Cors
	// closing ends when Close begins: readers of generations running
	// elsewhere stop then.
	closing      context.Context
	closeReaders context.CancelFunc

	turns         *fair.Scheduler // the replays' turns (nil: none taken)
	flights       flights         // keyless requests in flight, for their retries
	lost          lostChecks      // ownerLost's answers, shared by a generation's readers
	lag           lagGauge        // the journal's lag, measured at most every lagEvery
	mu            sync.Mutex
	readers       map[string]int // connected readers per key id
	tenantReaders map[string]int // connected readers per tenant
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Journal == nil || cfg.Resume == nil || cfg.Engine == nil || cfg.Auth == nil {
		return nil, fmt.Errorf("%w: journal, resume, engine and auth are required", ErrInvalidOption)
	}
	cfg.Settings.fill()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New(prometheus.NewRegistry(), cfg.Journal.Stats)
	}
	s := &Server{
		cfg: cfg.Settings, journal: cfg.Journal, resume: cfg.Resume, engine: cfg.Engine, auth: cfg.Auth,
		metrics: cfg.Metrics, prices: cfg.Prices, budgets: cfg.KeySpend, log: cfg.Logger, mux: http.NewServeMux(), detached: detach.NewGroup(),
		readers:       map[string]int{},
		tenantReaders: map[string]int{},
	}
	if s.cfg.ReplayTurns >= 0 {
		var err error
		if s.turns, err = fair.New(fair.Config{Turns: s.cfg.ReplayTurns}); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
	}
	s.corsAllowed = newCORSMatcher(cfg.Settings.CORSOrigins)
	s.closing, s.closeReaders = context.WithCancel(context.Background())
	s.lag.measure = cfg.Journal.Lag
	s.routes()
	var err error
	if s.handler, err = withCORS(s.cfg.CORSOrigins, confine(s.mux)); err != nil {
		return nil, err
	}
	if s.cfg.ReadingSignal > 0 {
		go s.signalReading()
	}
	return s, nil
}

// signalReading tells every instance, each ReadingSignal, which keys this
// one has readers of, until it closes.
func (s *Server) signalReading() {
	tick := time.NewTicker(s.cfg.ReadingSignal)
	defer tick.Stop()
	for {
		select {
		case <-s.closing.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		ids := make([]string, 0, len(s.readers))
		for id := range s.readers {
			ids = append(ids, id)
		}
		s.mu.Unlock()
		for _, id := range ids {
			// This instance's own generations hear of their readers here
			// at once; the others' owners over NATS.
			s.engine.Reading(id)
			if err := s.journal.Reading(id); err != nil {
				s.log.Debug("reading signal", "err", err)
				break
			}
		}
	}
}

func (s *Server) routes() {
	for _, p := range engine.Protocols() {
		s.mux.HandleFunc("POST "+p.Path(), s.create(p))
		s.mux.HandleFunc(p.Path(), methodNotAllowed("POST"))
	}
	s.mux.HandleFunc("GET /v1/responses/{id}", s.handleResponse)
	s.mux.HandleFunc("GET /v1/streams/{key}", s.handleStream)
	s.mux.HandleFunc("POST /v1/streams/{key}/cancel", s.handleCancel)
	s.mux.HandleFunc("GET /v1/streams/{key}/attempts", s.handleAttempts)
	s.mux.HandleFunc("/v1/streams/{key}", methodNotAllowed("GET"))
	s.mux.HandleFunc("/v1/streams/", func(w http.ResponseWriter, r *http.Request) { fail(w, r, apierr.New(apierr.NotFound)) }) // reprise's own
	s.mux.HandleFunc("/v1/", s.passThrough)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	})
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("GET /usage", s.handleUsage)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fail(w, r, apierr.New(apierr.NotFound)) })
}

// Handle mounts another handler (the demo page, metrics) on the server's mux.
func (s *Server) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.journal.Ready(ctx); err != nil {
		unavailable(err).Write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ready"}`))
}

// Close ends the readers. Readers of a generation running on another
// instance are cut at once — they resume elsewhere; an SSE answer served by
// net/http is aborted, so its client sees it broken. The others (readers of
// generations that ran here, replays) write the rest and leave on their
// own. Readers on connections taken over from net/http, which
// http.Server's Shutdown does not see, get until ctx ends, then are cut;
// Close returns once they are gone. Call it once no generation runs here
// any more. It is idempotent.
func (s *Server) Close(ctx context.Context) {
	s.closeReaders()
	s.detached.Close(ctx)
}

// takeReader reserves a reader place on key id of tenant, within both
// limits; release returns it.
func (s *Server) takeReader(tenant, id string) (release func(), ok bool) {
	s.mu.Lock()
	if s.readers[id] >= s.cfg.MaxReadersPerKey || s.tenantReaders[tenant] >= s.cfg.MaxReadersPerTenant {
		s.mu.Unlock()
		return nil, false
	}
	s.readers[id]++
	s.tenantReaders[tenant]++
	s.mu.Unlock()
	s.engine.Reading(id) // at once, not at the next reading signal
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.readers[id]--; s.readers[id] <= 0 {
				delete(s.readers, id)
			}
			if s.tenantReaders[tenant]--; s.tenantReaders[tenant] <= 0 {
				delete(s.tenantReaders, tenant)
			}
		})
	}, true
}

// methodNotAllowed answers 405 with the allowed methods.
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		fail(w, r, apierr.New(apierr.MethodNotAllowed).WithMessage("method not allowed; use "+allow))
	}
}
