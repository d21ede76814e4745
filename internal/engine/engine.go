package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Defaults for Limits and the upstream client.
const (
	DefaultMaxEventSize    = 512 << 10
	DefaultMaxResult       = 64 << 20
	DefaultIdleTimeout     = 60 * time.Second
	DefaultMaxGeneration   = 30 * time.Minute
	DefaultMaxStreamEvents = 200_000
	DefaultMaxStreamBytes  = 256 << 20
	// DefaultMaxTenantGenerations lets one tenant fill the upstream
	// concurrency limit.
	DefaultMaxTenantGenerations = classify.DefaultMaxConcurrent
	// DefaultConnectTimeout bounds connecting to the upstream.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultHeaderTimeout bounds the wait for a response head once the
	// request was sent (then the attempt is ambiguous).
	DefaultHeaderTimeout = 60 * time.Second
)

// ErrInvalidOption wraps every configuration error.
var ErrInvalidOption = errors.New("engine: invalid option")

// ErrShuttingDown is returned by Start once Shutdown has begun.
var ErrShuttingDown = errors.New("engine: shutting down")

// ErrCancelled is the cause a generation cancelled by Cancel ends with.
var ErrCancelled = errors.New("engine: generation cancelled")

// ErrTooManyGenerations is returned by Start when the tenant runs
// Limits.MaxTenantGenerations generations on this instance already.
var ErrTooManyGenerations = errors.New("engine: too many generations for this tenant")

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

// Journal is what the engine needs of the journal: a writer per generation.
// journal.Journal implements it.
type Journal interface {
	NewWriter(ref journal.Ref, sink func(journal.Event)) *journal.Writer
	// AppendTimeout bounds how long a writer tries to store a message.
	AppendTimeout() time.Duration
	// MaxEventSize is the largest event (type and data) it can store.
	MaxEventSize() int
	// TTL is how long events and records are kept.
	TTL() time.Duration
}

// Decorator sets what the upstream gets on behalf of a caller (its
// credential), and takes out of upstream answers what a caller must not
// see (a credential of the proxy's own that the upstream echoes). auth.Auth
// implements it.
type Decorator interface {
	// Decorate sets req's credential for the caller whose request headers
	// are caller, toward an API of error shape shape.
	Decorate(req *http.Request, caller http.Header, shape apierr.Shape)
	// Redact cleans an upstream body read whole (an error classify read).
	Redact(body []byte) []byte
	// RedactResponse cleans an upstream answer before it is read: its
	// headers, and its body as it streams.
	RedactResponse(resp *http.Response)
	// Seal returns what Decorate takes of caller, sealed for the key of
	// stream id id (nil when it takes nothing): kept in the key's record,
	// so that an instance taking its generation over calls the upstream
	// as its caller did (reattach.go). Open opens it.
	Seal(id string, caller http.Header) []byte
	Open(id string, sealed []byte) (http.Header, error)
}

// Namer remembers the upstream's own id of a generation (a Responses
// response id), so that clients can name the key by it. resume.Manager
// implements it.
type Namer interface {
	RememberName(ctx context.Context, tenant, name, key string) error
}

// Metrics is what the engine reports. metrics.Metrics implements it.
type Metrics interface {
	GenerationStarted()
	// GenerationEnded reports how a generation ended: one of Outcomes.
	GenerationEnded(outcome string)
	EventJournaled()
	UpstreamRequests(n int)
}

// CostMetrics is what the engine reports of what generations billed, when
// its Metrics has it. metrics.Metrics implements it.
type CostMetrics interface {
	// Billed counts one generation's usage (nil: unknown) of basis
	// (Reported or Estimated) and cost (priced by the table entry entry;
	// nil: no price known), and a call when call (resume.Result.Call).
	Billed(u *cost.Usage, basis cost.Basis, entry string, spent *float64, call bool)
	// Saved counts the requests, by kind, served without a generation
	// from one of usage u and cost (priced by entry; each nil: unknown),
	// a call each when that generation was one: what they did not cost.
	Saved(by cost.SavedBy, u *cost.Usage, entry string, spent *float64, call bool)
}

// Pricer gives the price of model and the price table entry that gives it
// (a label of bounded cardinality), or ok false when no price is known.
// cost.Table implements it.
type Pricer interface {
	Lookup(model string) (p cost.Price, entry string, ok bool)
}

// Spender is told what generations cost. cost.Guard implements it.
type Spender interface{ Spent(cost float64) }

// KeySpender is told what each tenant's generations cost, by the tenant's
// resume.TenantHash (what its records keep). cost.KeySpend implements it.
type KeySpender interface {
	KeySpent(tenantHash string, cost float64)
}

// Upstream is a model API and how it is called.
type Upstream struct {
	// Name names it in Reprise-Upstream and the key's status. Default: the
	// URL's host.
	Name string
	// URL is the base URL; request paths are joined to it. Required.
	URL *url.URL
	// Policy is the call policy (retries, budget, breaker, concurrency
	// limit): each upstream's own. Required.
	Policy *classify.Policy
	// Decorator sets the caller's credential. Required.
	Decorator Decorator
	// Idempotency: the upstream honours Idempotency-Key, so each
	// generation's key is forwarded. Required when the policy retries
	// ambiguous failures. Default false.
	Idempotency bool
	// Background: the upstream runs OpenAI's background mode. A streamed
	// generation of a Backgrounder format (Responses) is started with
	// "background": true, and one whose owner died is continued from the
	// upstream by the instance that takes it over, instead of being lost
	// (reattach.go). Non-streamed requests are sent as they came. Default
	// false.
	Background bool
	// Transport carries passed-through requests (Forward). Default
	// http.DefaultTransport; proxy sets the policy's client's.
	Transport http.RoundTripper
	// Paths and Models, when set, route to this upstream only the
	// requests whose path starts with one of Paths and whose model is one
	// of Models (a trailing * matches a prefix). Default: every request.
	Paths, Models []string
}

// serves reports whether u takes a request for path naming model (a
// request that names none may go to any upstream of its path).
func (u Upstream) serves(path, model string) bool {
	return matchAny(u.Paths, path, strings.HasPrefix) && (model == "" || matchAny(u.Models, model, func(m, p string) bool {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			return strings.HasPrefix(m, prefix)
		}
		return m == p
	}))
}

// ErrInvalidPath is returned by CleanPath, and by a call to the upstream,
// for a request path that could leave /v1/ or the upstream's base path: one
// not under /v1/, with a dot segment, or with an encoded slash or backslash.
var ErrInvalidPath = errors.New("engine: request path is not confined to /v1/")

// CleanPath returns the path, decoded, that a request whose path is escaped
// (as the client sent it: url.URL.EscapedPath) is routed and forwarded by.
// It refuses (ErrInvalidPath) a path that is not under /v1/, or has a
// segment that is a dot segment ("." or "..", plain or percent-encoded, in
// any case) or holds a slash, backslash or semicolon once decoded (%2F,
// %5C, %3B) — decoded
// once, or twice for an upstream that decodes again. What it accepts,
// joined to any base (upstreamURL), stays under the base's /v1/ however the
// upstream resolves it.
func CleanPath(escaped string) (string, error) {
	rest, ok := strings.CutPrefix(escaped, "/v1/")
	if !ok {
		return "", ErrInvalidPath
	}
	var b strings.Builder
	b.Grow(len(escaped))
	b.WriteString("/v1")
	for seg := range strings.SplitSeq(rest, "/") {
		dec, err := url.PathUnescape(seg)
		if err != nil || !plainSegment(dec) {
			return "", ErrInvalidPath
		}
		if strings.Contains(dec, "%") {
			if twice, err := url.PathUnescape(dec); err == nil && !plainSegment(twice) {
				return "", ErrInvalidPath
			}
		}
		b.WriteByte('/')
		b.WriteString(dec)
	}
	return b.String(), nil
}

// plainSegment reports whether a decoded path segment names itself: no dot
// segment, no separator a server might split on — a slash, a backslash, or
// a semicolon (servers in the Tomcat tradition take what follows it as a
// path parameter, so "..;" climbs there; no model API's path has one).
func plainSegment(s string) bool {
	return s != "." && s != ".." && !strings.ContainsAny(s, `/\;`)
}

// upstreamURL is the URL at base of a request for path (decoded, as
// net/http and CleanPath give it) and query (raw, the client's). base names
// the API's version root, as an SDK's base URL does: a client's /v1/X goes
// to base's path + /X (https://host/api/paas/v4 → /api/paas/v4/X), and a
// base without a path is the root /v1 (https://api.openai.com →
// /v1/X). The path is escaped by net/url, never resolved, so nothing is
// climbed; base's own query (fixed parameters such as Azure's api-version)
// comes first, then query. A path CleanPath would refuse is ErrInvalidPath:
// every route that forwards goes through here.
func upstreamURL(base *url.URL, path, query string) (*url.URL, error) {
	esc := (&url.URL{Path: path}).EscapedPath()
	if _, err := CleanPath(esc); err != nil {
		return nil, err
	}
	root, rawRoot := VersionRoot(base)
	u := *base
	u.Path = root + strings.TrimPrefix(path, "/v1")
	u.RawPath = rawRoot + strings.TrimPrefix(esc, "/v1")
	u.RawQuery = joinQuery(base.RawQuery, query)
	u.Fragment, u.RawFragment = "", ""
	return &u, nil
}

// VersionRoot returns the path (decoded and escaped) that stands for a
// client's /v1 at base: base's path without its trailing slash, or /v1
// when base has none.
func VersionRoot(base *url.URL) (path, escaped string) {
	path, escaped = strings.TrimSuffix(base.Path, "/"), strings.TrimSuffix(base.EscapedPath(), "/")
	if path == "" {
		return "/v1", "/v1"
	}
	return path, escaped
}

// joinQuery joins two raw queries.
func joinQuery(a, b string) string {
	if a == "" || b == "" {
		return a + b
	}
	return a + "&" + b
}

// matchAny reports whether v matches one of patterns (any v, without
// patterns).
func matchAny(patterns []string, v string, match func(v, pattern string) bool) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if match(v, p) {
			return true
		}
	}
	return false
}

// Limits bound what one generation may cost.
type Limits struct {
	// MaxEventSize is the largest upstream SSE event, as sent: all its
	// lines (event, id, data, comments) and their framing. It must fit one
	// journal message (Journal.MaxEventSize), or New refuses it. Default
	// DefaultMaxEventSize (512 KiB).
	MaxEventSize int
	// MaxStreamEvents and MaxStreamBytes cap one generation; past them it
	// fails with stream_too_large. The bytes are what the generation
	// stores and holds: each event's journal.Event.Size (its type, its data
	// and a fixed overhead), not its data alone. Defaults
	// DefaultMaxStreamEvents (200,000) and DefaultMaxStreamBytes (256 MiB).
	MaxStreamEvents int
	MaxStreamBytes  int64
	// MaxResult is the largest non-streamed upstream body. Default DefaultMaxResult (64 MiB).
	MaxResult int64
	// IdleTimeout fails a stream that sends no event for this long
	// (upstream_interrupted). Default DefaultIdleTimeout (60 s).
	IdleTimeout time.Duration
	// MaxGeneration caps one generation's total time. Default DefaultMaxGeneration (30 min).
	MaxGeneration time.Duration
	// MaxTenantGenerations caps a tenant's concurrent generations on this
	// instance. Default DefaultMaxTenantGenerations (512).
	MaxTenantGenerations int
	// CancelUnread cancels a streamed generation that nobody, on any
	// instance, read for this long (its owner hears every instance's
	// readers through Reading), counted from when the upstream answered.
	// 0, the default, never does: a generation runs to its end for the
	// clients that come back.
	CancelUnread time.Duration
}

func (l *Limits) fill() {
	setDefault(&l.MaxEventSize, DefaultMaxEventSize)
	setDefault(&l.MaxStreamEvents, DefaultMaxStreamEvents)
	setDefault(&l.MaxStreamBytes, DefaultMaxStreamBytes)
	setDefault(&l.MaxResult, DefaultMaxResult)
	setDefault(&l.IdleTimeout, DefaultIdleTimeout)
	setDefault(&l.MaxGeneration, DefaultMaxGeneration)
	setDefault(&l.MaxTenantGenerations, DefaultMaxTenantGenerations)
}

func setDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// Config configures an Engine.
type Config struct {
	// Journal stores the events. Required.
	Journal Journal
	// Upstream is the model API. Required.
	Upstream Upstream
	// Fallbacks are the upstreams, in order, that a generation moves to
	// when the one before refused it before its first byte (a retryable
	// failure once its policy gave up, its breaker open, its limit full);
	// never once an answer began. Default none.
	Fallbacks []Upstream
	// Limits bound each generation. Zero fields take their defaults.
	Limits Limits
	// ResultsCache is how many bytes of streamed results that completed on
	// this instance it keeps in memory (Finished), for their resumes and
	// replays here. Default DefaultResultsCache; negative: none.
	ResultsCache int64
	// Names remembers the upstream's ids of generations. Default: none are.
	Names Namer
	// Metrics takes the engine's counts (and usage and cost, when it is a
	// CostMetrics too). Default: none kept.
	Metrics Metrics
	// Prices prices each generation when it ends. Default: none is priced.
	Prices Pricer
	// Spend, when set, is told each priced generation's cost (the cost
	// guard, cost.Guard). Default: nobody.
	Spend Spender
	// KeySpend, when set, is told each priced generation's cost with its
	// tenant (the proxy keys' budgets). Default: nobody.
	KeySpend KeySpender
	// KeyName, when set, names the proxy key of a tenant by its
	// resume.TenantHash, for the attempt log of a generation taken over
	// from a dead owner (one started here has Generation.KeyName).
	// Default: none.
	KeyName func(tenantHash string) string
	// Tracer follows each generation (OpenTelemetry traces and GenAI
	// metrics, telemetry.Telemetry). Default: none.
	Tracer Tracer
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Engine runs generations: one pump per generation, detached from any
// client, that calls the upstream and journals its answer.
type Engine struct {
	cfg  Config
	live registry
	ups  atomic.Pointer[[]Upstream] // Upstream then Fallbacks, as in force (SetUpstreams)

	pumps   sync.WaitGroup
	pumpCtx context.Context
	stop    context.CancelFunc

	mu      sync.Mutex
	closing bool
	gens    map[string]int // running generations per tenant

	unread  *unread  // nil unless Limits.CancelUnread is set
	results *results // nil when Config.ResultsCache is negative
}

// New returns an Engine.
func New(cfg Config) (*Engine, error) {
	if cfg.Journal == nil {
		return nil, fmt.Errorf("%w: journal is required", ErrInvalidOption)
	}
	ups, err := prepare(append([]Upstream{cfg.Upstream}, cfg.Fallbacks...))
	if err != nil {
		return nil, err
	}
	cfg.Upstream, cfg.Fallbacks = ups[0], ups[1:]
	cfg.Limits.fill()
	if limit := cfg.Journal.MaxEventSize(); cfg.Limits.MaxEventSize > limit {
		// An event the parser accepts but NATS refuses would fail its
		// generation as journal_failure after it began, every time.
		return nil, fmt.Errorf("%w: max event size %d bytes is more than one journal message holds (%d bytes: the NATS server's max_payload less the message's framing); lower it or raise max_payload",
			ErrInvalidOption, cfg.Limits.MaxEventSize, limit)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = noMetrics{}
	}
	if cfg.Tracer == nil {
		cfg.Tracer = noTracer{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ResultsCache == 0 {
		cfg.ResultsCache = DefaultResultsCache
	}
	e := &Engine{cfg: cfg, gens: map[string]int{}, results: newResults(cfg.ResultsCache, cfg.Journal.TTL()/2)}
	e.ups.Store(&ups)
	e.pumpCtx, e.stop = context.WithCancel(context.Background())
	if cfg.Limits.CancelUnread > 0 {
		e.unread = &unread{after: cfg.Limits.CancelUnread, last: map[journal.Ref]time.Time{}}
		go e.cancelUnread()
	}
	return e, nil
}

// Generation is a generation to run: resume decided it starts, and its
// caller holds the lease.
type Generation struct {
	Tenant string
	// KeyName names the proxy key that asked for it (auth.Caller.Name) in
	// the attempt log and its lines; "" for none.
	KeyName  string
	Key      string
	Ref      journal.Ref
	Lease    *resume.Lease
	Protocol Protocol
	// Model is the model the request names ("" if none): upstreams may be
	// routed by it.
	Model string
	// Stream: the request asks for an event stream (Protocol.Streams); an
	// answer that is neither one nor the format's whole answer is none.
	Stream bool
	// Path, Query (raw, "" for none), Body and Header are the client's
	// request, sent upstream.
	Path   string
	Query  string
	Body   []byte
	Header http.Header
	// Reachable, when set, is asked once the generation's lease ran out by
	// its owner's clock at since (resume.Lease.Lapse; held.go), and again
	// when it is renewed: false cancels the generation instead of holding
	// it, as nobody can be waiting for it (a keyless request's client that
	// left while its retry could not find it). nil: the generation is held
	// and reads on once renewed — a request with its key finds it, and a
	// takeover ends it.
	Reachable func(since time.Time) bool
}

// Start runs g in a pump of its own and returns its tail. It refuses
// (ErrTooManyGenerations, ErrShuttingDown) by ending the generation as
// failed, so its readers end and the key may start afresh.
func (e *Engine) Start(g Generation) (*Tail, error) {
	t := newTail()
	p := &pump{e: e, g: g, tail: t, log: e.cfg.Logger.With("key_id", g.Ref.ID), tenant: resume.TenantHash(g.Tenant)}
	if a, ok := g.Protocol.(UsageAsker); ok && g.Stream {
		p.g.Body, p.hideUsage = a.AskUsage(g.Body)
	}
	if err := e.startPump(p); err != nil {
		code := apierr.TooManyGenerations
		if errors.Is(err, ErrShuttingDown) {
			code = apierr.ShuttingDown
		}
		e.abandon(g, apierr.New(code))
		return nil, err
	}
	return t, nil
}

func (e *Engine) startPump(p *pump) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closing:
		return ErrShuttingDown
	case e.gens[p.g.Tenant] >= e.cfg.Limits.MaxTenantGenerations:
		return ErrTooManyGenerations
	}
	e.gens[p.g.Tenant]++
	ctx, cancel := context.WithCancelCause(e.pumpCtx)
	shown := p.tail
	if p.adopted {
		shown = nil // it holds only what it appends: readers follow the journal
	}
	e.live.add(p.g.Ref, shown, p.g.Lease, cancel)
	if e.unread != nil && p.g.Stream {
		e.unread.add(p.g.Ref, p.adopted)
	}
	e.pumps.Add(1)
	e.cfg.Metrics.GenerationStarted()
	go func() {
		defer cancel(nil)
		p.run(ctx)
	}()
	return nil
}

// done unregisters a pump's generation; a streamed one that completed
// stays readable here from memory (results). An adopted pump's tail holds
// only what it appended itself.
func (e *Engine) done(p *pump, outcome string) {
	if h, ok := p.tail.Answered(); ok && h.Streaming && !h.Progressive && outcome == OutcomeCompleted && !p.adopted {
		e.results.add(p.g.Ref, p.g.Lease.Record(), p.tail)
	}
	e.live.remove(p.g.Ref)
	if e.unread != nil {
		e.unread.remove(p.g.Ref)
	}
	e.cfg.Metrics.GenerationEnded(outcome)
	e.release(p)
	e.pumps.Done()
}

// release gives p's place among its tenant's generations back, once: when
// its upstream work is over, before its result is recorded — a client that
// saw the key finished may start the next at once.
func (e *Engine) release(p *pump) {
	p.released.Do(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.gens[p.g.Tenant]--; e.gens[p.g.Tenant] <= 0 {
			delete(e.gens, p.g.Tenant)
		}
	})
}

// abandon ends a generation that never started: its journal holds the
// error and an end marker, like any failed generation (so its readers end),
// and the key is failed, so the next request with it starts afresh.
func (e *Engine) abandon(g Generation, why apierr.Error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := e.cfg.Journal.NewWriter(g.Ref, func(journal.Event) {})
	err := w.Append(ctx, TypeError, why.BodyIn(g.Protocol.Shape()))
	if err == nil {
		err = w.End(ctx, journal.EndFailed)
	} else {
		w.Abort()
	}
	if ferr := g.Lease.Finish(ctx, resume.Result{State: resume.Failed, Events: 1, Status: why.Status, Error: why.Code}); err == nil {
		err = ferr
	}
	if err != nil {
		e.cfg.Logger.Warn("abandoning a generation", "err", err)
	}
}

// Cancel stops ref's generation if it runs here: its upstream request is
// cancelled at once, it ends as cancelled (no result; readers get an error
// event cancelled), and the key may generate afresh. It reports whether
// the generation ran here.
func (e *Engine) Cancel(ref journal.Ref) bool { return e.live.cancel(ref, ErrCancelled) }

// prepare checks ups and fills their defaults (a copy).
func prepare(ups []Upstream) ([]Upstream, error) {
	if len(ups) == 0 {
		return nil, fmt.Errorf("%w: no upstream", ErrInvalidOption)
	}
	ups = slices.Clone(ups)
	for i := range ups {
		up := &ups[i]
		if up.URL == nil || up.Policy == nil || up.Decorator == nil {
			return nil, fmt.Errorf("%w: every upstream needs its URL, policy and decorator", ErrInvalidOption)
		}
		if up.Policy.RetriesAmbiguous() && !up.Idempotency {
			return nil, fmt.Errorf("%w: retrying ambiguous failures without forwarding Idempotency-Key could bill twice", ErrInvalidOption)
		}
		if up.Transport == nil {
			up.Transport = http.DefaultTransport
		}
		if up.Name == "" {
			up.Name = up.URL.Host
		}
	}
	return ups, nil
}

// SetUpstreams replaces the upstreams (Config.Upstream, then
// Config.Fallbacks) new generations and forwarded requests go to; running
// generations go on with the ones they began with. An invalid list is
// refused (as New refuses it) and the upstreams in force stay.
func (e *Engine) SetUpstreams(ups []Upstream) error {
	ups, err := prepare(ups)
	if err != nil {
		return err
	}
	e.ups.Store(&ups)
	return nil
}

// CheckUpstreams reports whether SetUpstreams would take ups.
func (e *Engine) CheckUpstreams(ups []Upstream) error {
	_, err := prepare(ups)
	return err
}

// Upstreams returns the upstreams in force, in order.
func (e *Engine) Upstreams() []Upstream { return slices.Clone(*e.ups.Load()) }

// upstreams are the upstreams that serve path and model, in the order a
// generation tries them.
func (e *Engine) upstreams(path, model string) []Upstream {
	var out []Upstream
	for _, u := range *e.ups.Load() {
		if u.serves(path, model) {
			out = append(out, u)
		}
	}
	return out
}

// Serves reports whether an upstream is configured for path and model: a
// request none serves is answered no_upstream before anything is decided
// or recorded for its key.
func (e *Engine) Serves(path, model string) bool {
	for _, u := range *e.ups.Load() {
		if u.serves(path, model) {
			return true
		}
	}
	return false
}

// Closing reports whether Shutdown has begun.
func (e *Engine) Closing() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.closing
}

// Tail returns the tail of ref's generation while it runs here.
func (e *Engine) Tail(ref journal.Ref) *Tail { return e.live.get(ref) }

// Owned returns the record of id as this instance, its owner, last wrote
// it, while the key's generation runs here and its lease holds.
func (e *Engine) Owned(id string) (resume.Record, bool) { return e.live.owned(id) }

// Shutdown refuses new generations and waits until the running ones have
// finished journaling or ctx ends. Then it cancels what is left — those
// generations fail (proxy_shutdown) and record so on their own, bounded by
// the journal's timeouts — and returns ctx's error; a later Shutdown waits
// for them again. It is idempotent.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.pumps.Wait(); close(done) }()
	select {
	case <-done:
		e.stop() // nothing runs any more: the watchers end
		return nil
	case <-ctx.Done():
		e.stop()
		return ctx.Err()
	}
}

type noMetrics struct{}

func (noMetrics) GenerationStarted()     {}
func (noMetrics) GenerationEnded(string) {}
func (noMetrics) EventJournaled()        {}
func (noMetrics) UpstreamRequests(int)   {}
