package stream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// bodyChunk is the journal event type of a stored non-streamed body.
const (
	typeBody  = "reprise.body"
	typeError = "error"
	chunkSize = 256 << 10
)

// headers passed to the upstream; everything else stays at the proxy (the
// credential is set by the auth mode).
var forwardHeaders = []string{"Content-Type", "Accept", "OpenAI-Beta", "User-Agent"}

// pump runs one generation, detached from any client: it calls the upstream,
// journals every event, and records how the generation ended.
type pump struct {
	s      *Server
	tenant string
	ref    journal.Ref
	lease  *resume.Lease
	tail   *tail
	path   string
	body   []byte
	header http.Header
	log    *slog.Logger
}

func (p *pump) run(ctx context.Context) {
	defer p.s.pumps.Done()
	defer p.s.releaseGeneration(p.tenant)
	defer p.s.metrics.running.Dec()
	defer p.s.live.remove(p.ref)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-p.lease.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()

	w := p.s.cfg.Journal.NewWriter(p.ref, func(ev journal.Event) {
		p.tail.append(ev)
		if !ev.IsEnd() {
			p.lease.SetEvents(ev.Offset)
			p.s.metrics.events.Inc()
		}
	})
	res := p.generate(ctx, w)
	if ctx.Err() != nil && res.State == resume.Failed && res.Error == "" {
		res.Error = errProxyShutdown.Code
	}
	select {
	case <-p.lease.Lost():
		w.Abort()
		last := p.tail.last()
		p.tail.append(journal.Event{Offset: last + 1, Type: typeError, Data: errOwnerLost.body()})
		p.tail.append(journal.Event{Offset: last + 2, End: journal.EndFailed})
		p.log.Warn("generation lost its lease", "gen", p.ref.Gen)
		return
	default:
	}

	// The end marker may meet a NATS failover: the writer keeps trying for
	// the journal's AppendTimeout.
	endCtx, endCancel := context.WithTimeout(context.WithoutCancel(ctx), p.s.cfg.Journal.AppendTimeout()+10*time.Second)
	defer endCancel()
	end := journal.EndCompleted
	if res.State != resume.Completed {
		end = journal.EndFailed
	}
	if err := w.End(endCtx, end); err != nil {
		e := errJournalFailure
		if errors.Is(err, journal.ErrFenced) {
			// Another instance found the lease run out (renewals were
			// lost) and sealed the generation with owner_lost right after
			// the last event stored: readers here end the same way.
			e = errOwnerLost
			p.log.Warn("generation sealed by another instance", "gen", p.ref.Gen)
		} else {
			p.log.Error("journal append failed", "gen", p.ref.Gen, "err", err)
		}
		res = resume.Result{State: resume.Failed, Error: e.Code}
		// Readers here get the reason, though this writer could not store it.
		last := p.tail.last()
		p.tail.append(journal.Event{Offset: last + 1, Type: typeError, Data: e.body()})
		p.tail.append(journal.Event{Offset: last + 2, End: journal.EndFailed})
	}
	res.Events = countEvents(w.Appended())
	if res.Error == errJournalFailure.Code {
		res.Events = min(res.Events, w.Stored()) // only what a reader can get
	}
	p.s.metrics.generations.WithLabelValues(string(res.State)).Inc()
	if err := p.lease.Finish(endCtx, res); err != nil && res.Error != errOwnerLost.Code {
		p.log.Error("finishing generation", "gen", p.ref.Gen, "err", err)
	}
	p.log.Debug("generation ended", "gen", p.ref.Gen, "state", res.State, "events", res.Events, "code", res.Error)
}

// countEvents is the number of data events given the number of appends
// including the end marker.
func countEvents(appended uint64) uint64 {
	if appended == 0 {
		return 0
	}
	return appended - 1
}

// generate calls the upstream through the call policy and journals its
// answer. It returns the result to record; the end marker is appended by
// the caller.
func (p *pump) generate(ctx context.Context, w *journal.Writer) resume.Result {
	release, err := p.s.cfg.Policy.Acquire(ctx)
	if err != nil {
		return p.refuse(ctx, w, err, 0)
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, p.s.cfg.MaxGeneration)
	defer cancel()
	// The stream is read under its own context, so the idle watchdog can
	// cut a stalled upstream.
	streamCtx, stall := context.WithCancelCause(ctx)
	defer stall(nil)
	resp, attempts, err := p.s.cfg.Policy.Do(streamCtx, p.newRequest)
	p.s.metrics.attempts.Add(float64(attempts))
	if err != nil {
		return p.refuse(ctx, w, err, attempts)
	}
	defer resp.Body.Close()

	ct := resp.Header.Get("Content-Type")
	if mt, _, _ := mime.ParseMediaType(ct); mt == "text/event-stream" {
		p.tail.answer(&upstreamResponse{status: resp.StatusCode, contentType: ct, streaming: true, attempts: attempts})
		return p.events(ctx, streamCtx, w, resp.Body, stall)
	}
	return p.result(ctx, w, resp, ct, attempts)
}

// errStalled cuts an upstream stream that sent nothing for the idle timeout.
var errStalled = errors.New("stream: upstream sent no event within the idle timeout")

// refuse records a call that produced no answer to journal: the initiating
// client gets the upstream's status and body (or the proxy's error), every
// other reader the error event.
func (p *pump) refuse(ctx context.Context, w *journal.Writer, err error, attempts int) resume.Result {
	var ce *classify.Error
	if errors.As(err, &ce) {
		ce.Body = p.s.redact(ce.Body)
	} else {
		ce = &classify.Error{Kind: classify.ErrUnavailable, Status: errProxyShutdown.Status, Code: errProxyShutdown.Code, Err: err}
		if ctx.Err() == nil {
			ce.Kind, ce.Status, ce.Code = classify.ErrRetryable, http.StatusBadGateway, errUnreachable.Code
		}
	}
	p.log.Warn("upstream call failed", "attempts", attempts, "status", ce.Status, "code", ce.Code, "err", err)
	e := upstreamError(ce)
	body, ct := ce.Body, ce.ContentType
	if len(body) == 0 {
		body, ct = e.body(), "application/json"
	}
	_ = w.Append(context.WithoutCancel(ctx), typeError, e.body())
	p.tail.answer(&upstreamResponse{status: ce.Status, contentType: ct, body: body, attempts: attempts, retryAfter: ce.RetryAfter})
	return resume.Result{State: resume.Failed, Status: ce.Status, ContentType: ct, Error: e.Code}
}

func (p *pump) newRequest(ctx context.Context) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.s.cfg.Upstream.JoinPath(p.path).String(), bytes.NewReader(p.body))
	if err != nil {
		return nil, err
	}
	for _, h := range forwardHeaders {
		if v := p.header.Values(h); len(v) > 0 {
			req.Header[h] = v
		}
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	p.s.upstreamAuth(req, p.header)
	if p.s.cfg.UpstreamIdempotency {
		// The upstream deduplicates by key: a retried ambiguous attempt
		// cannot bill twice. One key per generation.
		req.Header.Set("Idempotency-Key", p.ref.ID+"-"+strconv.FormatUint(p.ref.Gen, 10))
	}
	return req, nil
}

// events journals an upstream SSE stream. Only a stream that reached its
// terminal event counts as completed; one that breaks, stalls for the idle
// timeout or runs past the generation cap is interrupted, never retried.
func (p *pump) events(ctx, streamCtx context.Context, w *journal.Writer, body io.Reader, stall context.CancelCauseFunc) resume.Result {
	idle := time.AfterFunc(p.s.cfg.IdleTimeout, func() { stall(errStalled) })
	defer idle.Stop()
	lim := upstreamLimits{maxEvent: p.s.cfg.MaxEventSize, maxEvents: p.s.cfg.MaxStreamEvents, maxBytes: p.s.cfg.MaxStreamBytes}
	n, err := readUpstream(body, lim, func(typ string, data []byte) error {
		// The upstream is idle only while it is read: time spent journaling
		// (a first append through a NATS failover) is not its silence.
		idle.Stop()
		defer idle.Reset(p.s.cfg.IdleTimeout)
		return w.Append(ctx, typ, data)
	})
	if err == nil {
		return resume.Result{State: resume.Completed, Status: http.StatusOK, ContentType: "text/event-stream"}
	}
	e := upstreamError(classify.Interrupted(err))
	switch {
	case errors.Is(w.Err(), journal.ErrFenced):
		e = errOwnerLost // sealed by another instance: see run
	case w.Err() != nil:
		e = errJournalFailure
	case errors.Is(err, errOverLimit), errors.Is(err, bufio.ErrTooLong):
		e = errStreamTooLarge
	case errors.Is(err, errNotUTF8):
		e = errInvalidEvent
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		e = errProxyShutdown
	case errors.Is(context.Cause(streamCtx), errStalled):
		e.Message = "the upstream sent no event for " + p.s.cfg.IdleTimeout.String() + "; no result was stored"
	}
	p.log.Warn("upstream stream ended without its terminal event", "events", n, "err", err, "code", e.Code)
	_ = w.Append(context.WithoutCancel(ctx), typeError, e.body())
	return resume.Result{State: resume.Failed, Status: http.StatusOK, ContentType: "text/event-stream", Error: e.Code}
}

// isTerminal recognises the upstream's last event: [DONE] for chat, and
// speech.audio.done (or *.done with type) for speech.
func isTerminal(typ string, data []byte) bool {
	if string(data) == "[DONE]" {
		return true
	}
	if typ == "speech.audio.done" {
		return true
	}
	if len(data) == 0 || data[0] != '{' || !bytes.Contains(data, []byte(`speech.audio.done`)) {
		return false
	}
	var v struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(data, &v) == nil && v.Type == "speech.audio.done"
}

// result journals a non-streamed upstream body in chunks.
func (p *pump) result(ctx context.Context, w *journal.Writer, resp *http.Response, ct string, attempts int) resume.Result {
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.s.cfg.MaxResult+1))
	if err != nil || int64(len(body)) > p.s.cfg.MaxResult {
		e := errUpstreamBody
		_ = w.Append(context.WithoutCancel(ctx), typeError, e.body())
		p.tail.answer(&upstreamResponse{status: e.Status, contentType: "application/json", body: e.body(), attempts: attempts})
		return resume.Result{State: resume.Failed, Status: e.Status, Error: e.Code}
	}
	for off := 0; off < len(body) || off == 0; off += chunkSize {
		chunk := body[off:min(off+chunkSize, len(body))]
		if err := w.Append(ctx, typeBody, chunk); err != nil {
			break
		}
		if len(body) == 0 {
			break
		}
	}
	p.tail.answer(&upstreamResponse{status: resp.StatusCode, contentType: ct, body: body, attempts: attempts})
	return resume.Result{State: resume.Completed, Status: resp.StatusCode, ContentType: ct}
}

// upstreamError is the OpenAI-shaped error for a classified failure: the
// upstream's own error when it answered with one, else the proxy's.
func upstreamError(ce *classify.Error) *apiError {
	if ce.Code != "" {
		return &apiError{Status: ce.Status, Code: ce.Code, Type: errorType(ce.Status), Message: proxyMessages[ce.Code], RetryAfter: seconds(ce.RetryAfter)}
	}
	var v struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(ce.Body, &v) == nil && v.Error != nil && v.Error.Message != "" {
		v.Error.Status = ce.Status
		if v.Error.Code == "" {
			v.Error.Code = "upstream_error"
		}
		if v.Error.Type == "" {
			v.Error.Type = errorType(ce.Status)
		}
		v.Error.RetryAfter = seconds(ce.RetryAfter)
		return v.Error
	}
	e := newError(ce.Status, "upstream_error", "upstream answered "+http.StatusText(ce.Status))
	e.RetryAfter = seconds(ce.RetryAfter)
	return e
}

// proxyMessages explain the failures the proxy names itself.
var proxyMessages = map[string]string{
	"upstream_unreachable": "the upstream could not be reached",
	"upstream_timeout":     "the upstream did not answer in time after the request was sent",
	"upstream_no_response": "the connection to the upstream broke after the request was sent",
	"upstream_tls":         "the upstream's TLS certificate is not trusted",
	"upstream_unavailable": "the upstream is failing; the circuit breaker is open",
	"upstream_saturated":   "too many generations are running toward the upstream",
	"upstream_interrupted": "the upstream stream broke before it completed; no result was stored",
	"proxy_shutdown":       "the proxy shut down before the generation completed",
	"journal_failure":      "the journal could not store the stream",
}

// seconds rounds a wait up to whole seconds for Retry-After.
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}
