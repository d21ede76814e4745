package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// bodyChunk is the journal event type of a stored non-streamed body.
const (
	typeBody  = "reprise.body"
	typeError = "error"
	chunkSize = 256 << 10
)

// headers passed to the upstream; everything else stays at the proxy.
var forwardHeaders = []string{"Authorization", "Content-Type", "Accept", "OpenAI-Organization", "OpenAI-Project", "OpenAI-Beta", "User-Agent"}

// pump runs one generation, detached from any client: it calls the upstream,
// journals every event, and records how the generation ended.
type pump struct {
	s      *Server
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
		p.tail.append(journal.Event{Offset: w.Appended() + 1, End: journal.EndFailed})
		p.log.Warn("generation lost its lease", "gen", p.ref.Gen)
		return
	default:
	}

	endCtx, endCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer endCancel()
	end := journal.EndCompleted
	if res.State != resume.Completed {
		end = journal.EndFailed
	}
	if err := w.End(endCtx, end); err != nil {
		p.log.Error("journal append failed", "gen", p.ref.Gen, "err", err)
		res = resume.Result{State: resume.Failed, Error: errJournalFailure.Code}
		p.tail.append(journal.Event{Offset: w.Appended() + 1, End: journal.EndFailed})
	}
	res.Events = countEvents(w.Appended())
	p.s.metrics.generations.WithLabelValues(string(res.State)).Inc()
	if err := p.lease.Finish(endCtx, res); err != nil {
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

// generate calls the upstream and journals its answer. It returns the result
// to record; the end marker is appended by the caller.
func (p *pump) generate(ctx context.Context, w *journal.Writer) resume.Result {
	resp, err := p.call(ctx)
	if err != nil {
		e := errUnreachable
		if ctx.Err() != nil {
			e = errProxyShutdown
		}
		p.log.Warn("upstream call failed", "err", err)
		p.fail(ctx, w, e.Status, "application/json", e.body(), e)
		return resume.Result{State: resume.Failed, Status: e.Status, Error: e.Code}
	}
	defer resp.Body.Close()

	ct := resp.Header.Get("Content-Type")
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		e := upstreamError(resp.StatusCode, body)
		p.fail(ctx, w, resp.StatusCode, ct, body, e)
		return resume.Result{State: resume.Failed, Status: resp.StatusCode, ContentType: ct, Error: e.Code}
	}
	if mt, _, _ := mime.ParseMediaType(ct); mt == "text/event-stream" {
		p.tail.answer(&upstreamResponse{status: resp.StatusCode, contentType: ct, streaming: true})
		return p.events(ctx, w, resp.Body)
	}
	return p.result(ctx, w, resp, ct)
}

func (p *pump) call(ctx context.Context) (*http.Response, error) {
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
	return p.s.cfg.Client.Do(req)
}

// events journals an upstream SSE stream. Only a stream that reached its
// terminal event counts as completed.
func (p *pump) events(ctx context.Context, w *journal.Writer, body io.Reader) resume.Result {
	var n uint64
	terminal := false
	var readErr error
	for ev, err := range sse.Read(body, &sse.ReadConfig{MaxEventSize: p.s.cfg.MaxEventSize}) {
		if err != nil {
			readErr = err
			break
		}
		if terminal {
			continue // nothing after the terminal event counts
		}
		data := []byte(ev.Data)
		if err := w.Append(ctx, ev.Type, data); err != nil {
			readErr = err
			break
		}
		n++
		terminal = isTerminal(ev.Type, data)
	}
	if terminal && readErr == nil || terminal && errors.Is(readErr, io.ErrUnexpectedEOF) {
		return resume.Result{State: resume.Completed, Status: http.StatusOK, ContentType: "text/event-stream"}
	}
	e := errInterrupted
	if err := w.Err(); err != nil {
		e = errJournalFailure
	} else if ctx.Err() != nil {
		e = errProxyShutdown
	}
	p.log.Warn("upstream stream ended without its terminal event", "events", n, "err", readErr)
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
func (p *pump) result(ctx context.Context, w *journal.Writer, resp *http.Response, ct string) resume.Result {
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.s.cfg.MaxResult+1))
	if err != nil || int64(len(body)) > p.s.cfg.MaxResult {
		e := errUpstreamBody
		p.fail(ctx, w, e.Status, "application/json", e.body(), e)
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
	p.tail.answer(&upstreamResponse{status: resp.StatusCode, contentType: ct, body: body})
	return resume.Result{State: resume.Completed, Status: resp.StatusCode, ContentType: ct}
}

// fail records an answer that is not a result: the initiating client gets
// the upstream's status and body, every other reader the error event.
func (p *pump) fail(ctx context.Context, w *journal.Writer, status int, ct string, body []byte, e *apiError) {
	_ = w.Append(context.WithoutCancel(ctx), typeError, e.body())
	p.tail.answer(&upstreamResponse{status: status, contentType: ct, body: body})
}

// upstreamError keeps an upstream's OpenAI-shaped error, or wraps another body.
func upstreamError(status int, body []byte) *apiError {
	var v struct {
		Error *apiError `json:"error"`
	}
	if json.Unmarshal(body, &v) == nil && v.Error != nil && v.Error.Message != "" {
		v.Error.Status = status
		if v.Error.Code == "" {
			v.Error.Code = "upstream_error"
		}
		if v.Error.Type == "" {
			v.Error.Type = errorType(status)
		}
		return v.Error
	}
	return newError(status, "upstream_error", "upstream answered "+http.StatusText(status))
}
