package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Journal event types the engine writes besides the upstream's own.
const (
	// TypeBody is the type of a stored non-streamed body's chunks.
	TypeBody = "reprise.body"
	// TypeError is the type of the error event that ends a generation
	// without a result.
	TypeError = "error"
	// TypeReset is the type of the event that tells a reader of an older
	// generation that a new one follows.
	TypeReset = "reset"
	chunkSize = 256 << 10
)

// headers passed to the upstream; everything else stays at the proxy (the
// credential is set by the decorator).
// The client's W3C trace context goes on as it came (a Tracer, when set,
// makes its own span the upstream request's parent).
var forwardHeaders = []string{"Content-Type", "Accept", "OpenAI-Beta", "Anthropic-Version", "Anthropic-Beta", "User-Agent", "Traceparent", "Tracestate"}

// pump runs one generation, detached from any client: it calls the upstream,
// journals every event, and records how the generation ended.
type pump struct {
	released sync.Once // its tenant's place (Engine.release)
	e        *Engine
	g        Generation
	tail     *Tail
	log      *slog.Logger
	// tenant is what logs and the attempt log show of the generation's
	// tenant (resume.TenantHash): of Generation.Tenant, or for an adopted
	// generation, whose caller may not be known, the record's.
	tenant string
	up     Upstream // the upstream being called, then the one that answered
	// hideUsage: the client did not ask for the usage the upstream was
	// asked for (UsageAsker); its UsageOnly events are not journaled.
	hideUsage bool
	// streamed: the upstream answered with an event stream (a failure
	// then interrupts a generation that had begun).
	streamed bool
	// adopted: the generation was taken over from an owner that died, to
	// be continued from the upstream where it left off (reattach.go).
	adopted bool
	// response is the upstream's id of the generation, once named.
	response string
	// attempts counts the upstream requests made, over every upstream
	// tried (observe); before, those of the key's earlier generations,
	// read from the attempt log at the first of them.
	attempts, before int
	// trace follows the generation (Config.Tracer); last is the attempt
	// log's record of the latest upstream request (observe).
	trace Trace
	last  *Attempt
}

func (p *pump) run(ctx context.Context) {
	p.trace = p.e.cfg.Tracer.Begin(p.g)
	res := resume.Result{State: resume.Failed}
	defer func() {
		outcome := p.outcome(res)
		p.trace.End(outcome, res)
		p.e.done(p, outcome)
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lease := p.g.Lease
	go func() {
		select {
		case <-lease.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()

	sink := func(ev journal.Event) {
		p.tail.store(ev)
		if !ev.IsEnd() {
			lease.SetEvents(ev.Offset)
			p.e.cfg.Metrics.EventJournaled()
		}
	}
	var w *journal.Writer
	if p.adopted {
		if w, res = p.reattach(ctx, sink); w == nil {
			return // settled as its owner left it
		}
	} else {
		w = p.e.cfg.Journal.NewWriter(p.g.Ref, sink)
		res = p.generate(ctx, w)
	}
	if ctx.Err() != nil && res.State == resume.Failed && res.Error == "" {
		res.Error = p.stopCode(ctx)
	}
	if res.Error == apierr.Cancelled {
		res.State = resume.Cancelled
	}
	select {
	case <-lease.Lost():
		w.Abort()
		p.tail.fail(apierr.New(apierr.OwnerLost).BodyIn(p.shape()))
		res = resume.Result{State: resume.Failed, Error: apierr.OwnerLost}
		p.log.Warn("generation lost its lease", "gen", p.g.Ref.Gen)
		return
	default:
	}
	if res.State != resume.Completed && res.Error != apierr.OwnerLost {
		p.cancelBackground(ctx) // reattach.go: in background mode the upstream generates on
	}
	p.e.release(p) // the upstream work is over
	res = p.end(ctx, w, res)
}

// end appends the end marker and records the result. The end marker may
// meet a NATS outage of any length: the writer stores what it holds, the
// end marker last, once JetStream answers again, and only then is the
// result recorded — until then the key stays in progress, its readers
// wait (or get "unavailable" from the journal elsewhere), and nobody can
// take it over, for nobody sees the store answer. The wait ends early
// only when the lease is lost (another instance sealed the generation),
// or the journal's AppendTimeout after the engine gave up on its
// generations (Shutdown): what the journal holds is then settled, by this
// instance or, should it be gone, by whoever finds its lease lapsed.
func (p *pump) end(ctx context.Context, w *journal.Writer, res resume.Result) resume.Result {
	waitCtx, waitCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer waitCancel()
	go p.bound(waitCtx, waitCancel)
	end := journal.EndCompleted
	if res.State != resume.Completed {
		end = journal.EndFailed
	}
	err := w.End(waitCtx, end)
	res.Events = countEvents(w.Appended())
	endCtx, endCancel := context.WithTimeout(context.WithoutCancel(ctx), p.e.cfg.Journal.AppendTimeout()+10*time.Second)
	defer endCancel()
	switch {
	case errors.Is(err, journal.ErrFenced), err != nil && lost(p.g.Lease):
		// Another instance found the lease run out (renewals were lost)
		// and sealed the generation with owner_lost right after the last
		// event stored: readers here end the same way.
		p.log.Warn("generation sealed by another instance", "gen", p.g.Ref.Gen)
		res = resume.Result{State: resume.Failed, Error: apierr.OwnerLost, Events: res.Events, Usage: res.Usage, Basis: res.Basis}
		p.tail.fail(apierr.New(apierr.OwnerLost).BodyIn(p.shape()))
	case err != nil && !journal.Unanswered(err):
		// JetStream refused the message: nothing more of it is stored.
		p.log.Error("journal append failed", "gen", p.g.Ref.Gen, "err", err)
		code := apierr.JournalFailure
		if errors.Is(err, journal.ErrStoreFull) {
			code = apierr.JournalFull
		}
		res = resume.Result{State: resume.Failed, Error: code, Usage: res.Usage, Basis: res.Basis,
			Events: min(res.Events, w.Stored())} // only what a reader can get
		// Readers here get the reason, though this writer could not store it.
		p.tail.fail(apierr.New(code).BodyIn(p.shape()))
	case err != nil:
		// The writer gave up, not knowing what it stored: the journal
		// settles it (settle.go).
		p.log.Error("journal append got no answer", "gen", p.g.Ref.Gen, "err", err)
		st := p.settle(endCtx, w, res)
		res = st.res
		if !st.known {
			p.g.Lease.Abandon()
			return res
		}
	}
	entry := p.price(&res)
	err = p.g.Lease.Finish(endCtx, res)
	if err != nil && res.Error != apierr.OwnerLost {
		p.log.Error("finishing generation", "gen", p.g.Ref.Gen, "err", err)
	}
	p.bill(res, entry, err == nil)
	p.attemptUsage(res)
	p.log.Debug("generation ended", "gen", p.g.Ref.Gen, "state", res.State, "events", res.Events, "code", res.Error)
	return res
}

// bound cancels the end marker's wait (cancel) once p's lease is lost, or
// the journal's AppendTimeout after the engine stopped its generations; it
// returns when ctx ends.
func (p *pump) bound(ctx context.Context, cancel context.CancelFunc) {
	select {
	case <-p.g.Lease.Lost():
		cancel()
	case <-p.e.pumpCtx.Done():
		t := time.NewTimer(p.e.cfg.Journal.AppendTimeout())
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
}

// lost reports whether l is lost.
func lost(l *resume.Lease) bool {
	select {
	case <-l.Lost():
		return true
	default:
		return false
	}
}

// Outcomes of a generation, as Metrics.GenerationEnded reports them.
const (
	// OutcomeCompleted: the generation has its result.
	OutcomeCompleted = "completed"
	// OutcomeFailed: no answer came (the upstream refused, or could not
	// be called).
	OutcomeFailed = "failed"
	// OutcomeInterrupted: a generation that had begun was cut (its
	// stream broke, the proxy shut down, its lease was lost).
	OutcomeInterrupted = "interrupted"
	// OutcomeCancelled: a client cancelled it.
	OutcomeCancelled = "cancelled"
)

// Outcomes lists every outcome Metrics.GenerationEnded reports.
func Outcomes() []string {
	return []string{OutcomeCompleted, OutcomeFailed, OutcomeInterrupted, OutcomeCancelled}
}

// outcome names how a generation that recorded res ended.
func (p *pump) outcome(res resume.Result) string {
	switch {
	case res.State == resume.Completed:
		return OutcomeCompleted
	case res.State == resume.Cancelled:
		return OutcomeCancelled
	case p.streamed || res.Error == apierr.OwnerLost || res.Error == apierr.ProxyShutdown:
		return OutcomeInterrupted
	}
	return OutcomeFailed
}

// countEvents is the number of data events given the number of appends
// including the end marker.
func countEvents(appended uint64) uint64 {
	if appended == 0 {
		return 0
	}
	return appended - 1
}

// generate calls the upstreams in turn, each through its own call policy,
// and journals the first answer. It returns the result to record; the end
// marker is appended by the caller.
func (p *pump) generate(ctx context.Context, w *journal.Writer) resume.Result {
	ctx, cancel := context.WithTimeout(ctx, p.e.cfg.Limits.MaxGeneration)
	defer cancel()
	// The stream is read under its own context, so the idle watchdog can
	// cut a stalled upstream.
	streamCtx, stall := context.WithCancelCause(ctx)
	defer stall(nil)
	ups, attempts := p.e.upstreams(p.g.Path, p.g.Model), 0
	if len(ups) == 0 {
		p.up = Upstream{Decorator: (*p.e.ups.Load())[0].Decorator} // unnamed: none was called (its decorator redacts)
		return p.refuse(ctx, w, &classify.Error{Kind: classify.ErrFatal, Status: apierr.New(apierr.NoUpstream).Status, Code: apierr.NoUpstream}, 0)
	}
	for i, up := range ups {
		p.up = up
		resp, release, n, err := p.call(streamCtx, up, p.newRequest)
		attempts += n
		if err != nil {
			if i+1 < len(ups) && failover(err) && ctx.Err() == nil {
				p.log.Warn("upstream refused the generation before its first byte; trying the next", "upstream", up.Name, "next", ups[i+1].Name, "err", err)
				continue
			}
			return p.refuse(ctx, w, err, attempts)
		}
		defer release()
		defer resp.Body.Close()
		ct := resp.Header.Get("Content-Type")
		if mt, _, _ := mime.ParseMediaType(ct); mt == "text/event-stream" && !bodiless(resp.StatusCode) {
			p.streamed = true
			p.answer(&Head{Status: resp.StatusCode, ContentType: ct, Streaming: true, Attempts: attempts, Upstream: up.Name})
			res := p.events(ctx, streamCtx, w, resp.Body, stall)
			res.Upstream = up.Name
			return res
		}
		var res resume.Result
		if progressive(p.g.Stream, resp.StatusCode, ct) {
			res = p.media(ctx, w, resp, ct, attempts)
		} else {
			res = p.result(ctx, w, resp, ct, attempts)
		}
		res.Upstream = up.Name
		return res
	}
	panic("engine: no upstream") // New requires one
}

// call sends the request build makes to up under up's policy: its
// concurrency limit (release returns the place, once the answer is read),
// retries, budget and breaker.
func (p *pump) call(ctx context.Context, up Upstream, build func(context.Context) (*http.Request, error)) (resp *http.Response, release func(), attempts int, err error) {
	release, err = up.Policy.Acquire(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	resp, attempts, err = up.Policy.Do(classify.WithObserver(ctx, p.observe(ctx, up)), build)
	p.e.cfg.Metrics.UpstreamRequests(attempts)
	if err != nil {
		release()
		return nil, nil, attempts, err
	}
	up.Decorator.RedactResponse(resp) // before anything is journaled, events and results alike
	return resp, release, attempts, nil
}

// failover reports whether a call that failed with err may move to the
// next upstream: nothing was generated (a retryable failure its policy gave
// up on, or the upstream refused to be called at all).
func failover(err error) bool {
	return errors.Is(err, classify.ErrRetryable) || errors.Is(err, classify.ErrUnavailable)
}

// refuse records a call that produced no answer to journal: the initiating
// client gets the upstream's status and body (or the proxy's error), every
// other reader the error event.
func (p *pump) refuse(ctx context.Context, w *journal.Writer, err error, attempts int) resume.Result {
	var ce *classify.Error
	if errors.As(err, &ce) {
		ce.Body = p.up.Decorator.Redact(ce.Body)
	} else {
		code := p.stopCode(ctx)
		ce = &classify.Error{Kind: classify.ErrUnavailable, Status: apierr.New(code).Status, Code: code, Err: err}
		if ctx.Err() == nil {
			ce.Kind, ce.Status, ce.Code = classify.ErrRetryable, http.StatusBadGateway, classify.CodeUnreachable
		}
	}
	p.log.Warn("upstream call failed", "attempts", attempts, "status", ce.Status, "code", ce.Code, "err", err)
	e := upstreamError(ce)
	body, ct := ce.Body, ce.ContentType
	if len(body) == 0 {
		body, ct = e.BodyIn(p.shape()), "application/json"
	}
	_ = w.AppendFinal(context.WithoutCancel(ctx), TypeError, e.BodyIn(p.shape()))
	p.answer(&Head{Status: ce.Status, ContentType: ct, Body: body, Attempts: attempts, RetryAfter: ce.RetryAfter, Upstream: p.up.Name, Code: ce.Code})
	return resume.Result{State: resume.Failed, Status: ce.Status, ContentType: ct, Error: e.Code}
}

// name remembers the upstream's own id of the generation before the event
// that names it is journaled: a client that has seen it can use it at once.
// A failure costs only that name (the key still serves).
func (p *pump) name(ctx context.Context, name string) {
	if p.e.cfg.Names == nil {
		return
	}
	if err := p.e.cfg.Names.RememberName(ctx, p.g.Tenant, name, p.g.Key); err != nil {
		p.log.Warn("remembering the upstream's name of a generation failed", "err", err)
	}
}

// stopCode is why a generation whose context ended stopped: a client
// cancelled it, or the proxy is shutting down.
func (p *pump) stopCode(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), ErrCancelled) {
		return apierr.Cancelled
	}
	return apierr.ProxyShutdown
}

// shape is the error shape of the generation's callers.
func (p *pump) shape() apierr.Shape { return p.g.Protocol.Shape() }

func (p *pump) newRequest(ctx context.Context) (*http.Request, error) {
	up := p.up
	u, err := upstreamURL(up.URL, p.g.Path, p.g.Query)
	if err != nil {
		return nil, err
	}
	body := p.g.Body
	if bg, ok := p.g.Protocol.(Backgrounder); ok && up.Background && p.g.Stream {
		body, _ = bg.Background(body) // reattach.go
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for _, h := range forwardHeaders {
		if v := p.g.Header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	up.Decorator.Decorate(req, p.g.Header, p.shape())
	if up.Idempotency {
		// The upstream deduplicates by key: a retried ambiguous attempt
		// cannot bill twice. One key per generation.
		req.Header.Set("Idempotency-Key", p.g.Ref.ID+"-"+strconv.FormatUint(p.g.Ref.Gen, 10))
	}
	p.trace.Request(req, up.Name)
	return req, nil
}

// errStalled cuts an upstream stream that sent nothing for the idle timeout.
var errStalled = errors.New("engine: upstream sent no event within the idle timeout")

// events journals an upstream SSE stream. Only a stream that reached its
// format's terminal event counts as completed; one that breaks, stalls for
// the idle timeout, reports an error or runs past the generation cap is no
// result, never retried.
func (p *pump) events(ctx, streamCtx context.Context, w *journal.Writer, body io.Reader, stall context.CancelCauseFunc) resume.Result {
	idleTimeout := p.e.cfg.Limits.IdleTimeout
	idle := time.AfterFunc(idleTimeout, func() { stall(errStalled) })
	defer idle.Stop()
	lim := upstreamLimits{maxEvent: p.e.cfg.Limits.MaxEventSize, maxEvents: p.e.cfg.Limits.MaxStreamEvents, maxBytes: p.e.cfg.Limits.MaxStreamBytes}
	named, first := false, true
	namer, modelTries := p.g.Protocol.(ModelNamer)
	tries := 0
	if modelTries {
		tries = modelEvents
	}
	var content int64 // events that carried content (Inspection.Content)
	n, usage, err := readUpstream(body, p.g.Protocol, lim, func(typ string, data []byte, in Inspection, usage *cost.Usage) error {
		// The upstream is idle only while it is read: time spent journaling
		// (a first append through a NATS failover) is not its silence.
		idle.Stop()
		defer idle.Reset(idleTimeout)
		if err := p.held(ctx); err != nil { // held.go: the lease ran out
			return err
		}
		if in.Content {
			content++
		}
		if modelTries && (tries > 0 || in.Terminal) {
			tries--
			if m, ok := namer.ResponseModel(typ, data); ok {
				modelTries = false
				p.trace.ResponseModel(m)
			}
		}
		if first {
			first = false
			p.trace.FirstChunk()
		}
		if in.Name != "" && !named {
			named = true
			p.response = in.Name
			p.name(ctx, in.Name)
		}
		if in.UsageOnly && p.hideUsage {
			return nil // the record keeps it; no client asked
		}
		if !in.Terminal && !p.resumable() {
			// Shown to this instance's readers before it is stored, the
			// first one too; the terminal event only once stored (Tail),
			// and every event of a generation another instance may
			// continue (reattach.go).
			return w.AppendShown(ctx, typ, data, p.preview)
		}
		if in.Terminal && usage != nil {
			// Stored with it, for an instance that salvages the generation
			// should this one die before it records the result (Salvage).
			return w.AppendNoted(ctx, typ, data, usageNote(*usage))
		}
		return w.Append(ctx, typ, data)
	})
	if err == nil {
		return resume.Result{State: resume.Completed, Status: http.StatusOK, ContentType: "text/event-stream", Usage: usage}
	}
	e := p.streamError(ctx, streamCtx, w, err)
	p.log.Warn("upstream stream ended without its terminal event", "events", n, "err", err, "code", e.Code)
	_ = w.AppendFinal(context.WithoutCancel(ctx), TypeError, e.BodyIn(p.shape()))
	res := resume.Result{State: resume.Failed, Status: http.StatusOK, ContentType: "text/event-stream", Error: e.Code, Usage: usage}
	if est, ok := p.g.Protocol.(Estimator); ok {
		// The upstream bills what it generated before the stream broke,
		// though it reported none or part of it: never shown as 0.
		res.Usage, res.Basis = estimated(est, p.g.Body, usage, content)
	}
	return res
}

// modelEvents is how many of a stream's first events are asked for the
// model that answered (ModelNamer), besides its terminal event.
const modelEvents = 3

// answer gives the generation's clients how the upstream answered. Nobody
// could read the generation before: its initiating client was waiting for
// this (Limits.CancelUnread counts from here).
func (p *pump) answer(h *Head) {
	p.tail.answer(h)
	if p.e.unread != nil {
		p.e.unread.answered(p.g.Ref)
	}
}

// preview shows an event handed to the journal to this instance's readers.
func (p *pump) preview(ev journal.Event) { p.tail.preview(ev) }

// streamError is the error a stream that ended without a result ends with.
func (p *pump) streamError(ctx, streamCtx context.Context, w *journal.Writer, err error) apierr.Error {
	var failed *failure
	var named *reservedEvent
	if e, ok := heldError(err); ok {
		return e
	}
	switch {
	case errors.Is(w.Err(), journal.ErrFenced):
		return apierr.New(apierr.OwnerLost) // sealed by another instance: see end
	case w.Err() != nil, errors.Is(err, journal.ErrStalled):
		// The journal refused the stream, or stopped answering for its
		// append timeout: the upstream call is cut (it cannot be stored),
		// and the generation is stored as failed once JetStream answers.
		return apierr.New(apierr.JournalFailure)
	case errors.As(err, &failed):
		return failed.e
	case errors.Is(err, errOverLimit), errors.Is(err, errTooLong):
		return apierr.New(apierr.StreamTooLarge)
	case errors.Is(err, errNotUTF8):
		return apierr.New(apierr.InvalidEvent)
	case errors.As(err, &named):
		return apierr.New(classify.CodeBadResponse).WithMessage("the upstream sent an event named " + strconv.Quote(named.typ) +
			", as reprise names its own (error, reset, reprise.*), that is no error of its format; no result was stored")
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return apierr.New(p.stopCode(ctx))
	case errors.Is(context.Cause(streamCtx), errStalled):
		return apierr.New(classify.CodeInterrupted).WithMessage("the upstream sent no event for " + p.e.cfg.Limits.IdleTimeout.String() + "; no result was stored")
	}
	return upstreamError(classify.Interrupted(err))
}

// result journals a non-streamed upstream body in chunks.
func (p *pump) result(ctx context.Context, w *journal.Writer, resp *http.Response, ct string, attempts int) resume.Result {
	maxResult := p.e.cfg.Limits.MaxResult
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResult+1))
	if err != nil || int64(len(body)) > maxResult {
		e := apierr.New(apierr.UpstreamBody)
		if ctx.Err() != nil {
			e = apierr.New(p.stopCode(ctx))
		}
		return p.reject(ctx, w, e, attempts)
	}
	if p.g.Stream && (bodiless(resp.StatusCode) || !p.g.Protocol.Whole(ct, body)) {
		// Not the event stream asked for, nor the format's whole answer
		// (an HTML page, an empty body, a 204): stored, it would be
		// replayed as the result for the whole TTL.
		p.log.Warn("upstream answered a streaming request with no stream", "status", resp.StatusCode, "content_type", ct, "bytes", len(body))
		return p.reject(ctx, w, apierr.New(classify.CodeBadResponse).WithMessage(notAStream(resp.StatusCode, ct, len(body))), attempts)
	}
	size := max(min(chunkSize, p.e.cfg.Journal.MaxEventSize()-len(TypeBody)), 1) // each chunk one message
	for off := 0; off < len(body) || off == 0; off += size {
		chunk := body[off:min(off+size, len(body))]
		// The whole answer is in memory: it is stored whole, through an
		// outage too, once JetStream answers (the record waits for it).
		if err := w.AppendFinal(ctx, TypeBody, chunk); err != nil && !errors.Is(err, journal.ErrStalled) {
			break
		}
		if len(body) == 0 {
			break
		}
	}
	p.answer(&Head{Status: resp.StatusCode, ContentType: ct, Body: body, Attempts: attempts, Upstream: p.up.Name})
	res := resume.Result{State: resume.Completed, Status: resp.StatusCode, ContentType: ct}
	if u, ok := p.g.Protocol.Result(ct, body); ok {
		res.Usage = &u
	}
	if namer, ok := p.g.Protocol.(ModelNamer); ok {
		if m, ok := namer.ResponseModel("", body); ok {
			p.trace.ResponseModel(m)
		}
	}
	return res
}

// reject ends a generation whose upstream answer is no result with e: its
// initiating client gets e as its answer, every other reader the error
// event.
func (p *pump) reject(ctx context.Context, w *journal.Writer, e apierr.Error, attempts int) resume.Result {
	body := e.BodyIn(p.shape())
	_ = w.AppendFinal(context.WithoutCancel(ctx), TypeError, body)
	p.answer(&Head{Status: e.Status, ContentType: "application/json", Body: body, Attempts: attempts, Upstream: p.up.Name})
	return resume.Result{State: resume.Failed, Status: e.Status, ContentType: "application/json", Error: e.Code}
}

// bodiless reports whether an answer of status has no body by definition.
func bodiless(status int) bool {
	return status == http.StatusNoContent || status == http.StatusResetContent
}

// notAStream says what the upstream answered a streaming request with
// instead of an event stream.
func notAStream(status int, contentType string, n int) string {
	what := "no Content-Type"
	if contentType != "" {
		what = "an unreadable Content-Type"
		if mt, _, err := mime.ParseMediaType(contentType); err == nil {
			what = mt[:min(len(mt), 100)] // a token: ASCII
		}
	}
	return "the upstream answered a streaming request with " + strconv.Itoa(status) + " " + http.StatusText(status) +
		", " + what + " and " + strconv.Itoa(n) + " bytes, not an event stream; no result was stored"
}
