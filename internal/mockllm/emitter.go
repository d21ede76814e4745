package mockllm

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// emitter writes a 200 response unit by unit ("events": SSE events or audio
// chunks), flushing after each, booking progress, and applying the
// abort_after and hang_after directives.
type emitter struct {
	ctx     context.Context
	w       http.ResponseWriter
	rc      *http.ResponseController
	rec     *recorder
	d       Directives
	written int
	// fault is the format's error event, written by error_after.
	fault []byte
}

// errFault ends a stream after the error event error_after asked for.
var errFault = errors.New("mockllm: error event injected")

func newEmitter(w http.ResponseWriter, r *http.Request, rec *recorder, d Directives) *emitter {
	return &emitter{ctx: r.Context(), w: w, rc: http.NewResponseController(w), rec: rec, d: d}
}

// start writes the 200 headers and flushes them.
func (e *emitter) start(contentType string) error {
	h := e.w.Header()
	h.Set("Content-Type", contentType)
	if contentType == "text/event-stream" {
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
	}
	e.w.WriteHeader(http.StatusOK)
	if err := e.flush(); err != nil {
		return err
	}
	return e.checkpoint()
}

// sse writes one "data: <payload>\n\n" event.
func (e *emitter) sse(payload []byte, tokens int, content []byte) error {
	frame := make([]byte, 0, len(payload)+8)
	frame = append(frame, "data: "...)
	frame = append(frame, payload...)
	frame = append(frame, "\n\n"...)
	return e.raw(frame, tokens, content)
}

// raw writes one unit of body bytes.
func (e *emitter) raw(frame []byte, tokens int, content []byte) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	if _, err := e.w.Write(frame); err != nil {
		return err
	}
	if err := e.flush(); err != nil {
		return err
	}
	e.written++
	e.rec.progress(1, tokens, content)
	return e.checkpoint()
}

// body writes bytes that are not an event (a non-streamed response body).
func (e *emitter) body(b []byte) error {
	if err := e.ctx.Err(); err != nil {
		return err
	}
	if _, err := e.w.Write(b); err != nil {
		return err
	}
	return e.flush()
}

func (e *emitter) flush() error {
	if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// checkpoint applies abort_after / hang_after / error_after once e.written
// reaches them; errFault ends the stream after the error event.
func (e *emitter) checkpoint() error {
	if e.d.AbortAfter == e.written {
		abortConnection(e.rec)
	}
	if e.d.HangAfter == e.written {
		<-e.ctx.Done()
		abortConnection(e.rec)
	}
	if e.d.ErrorAfter == e.written && e.fault != nil {
		if _, err := e.w.Write(e.fault); err != nil {
			return err
		}
		if err := e.flush(); err != nil {
			return err
		}
		return errFault
	}
	return nil
}

// event writes one named SSE event ("event: <name>" then "data: <payload>").
func (e *emitter) event(name string, payload []byte, tokens int, content []byte) error {
	frame := make([]byte, 0, len(name)+len(payload)+16)
	frame = append(frame, "event: "...)
	frame = append(frame, name...)
	frame = append(frame, "\ndata: "...)
	frame = append(frame, payload...)
	frame = append(frame, "\n\n"...)
	return e.raw(frame, tokens, content)
}

// abortConnection books the generation as aborted and kills the connection
// without a clean end of body: net/http recovers http.ErrAbortHandler by
// closing the connection (HTTP/1) or resetting the stream (HTTP/2).
func abortConnection(rec *recorder) {
	rec.abort()
	panic(http.ErrAbortHandler)
}

// hang blocks until ctx is done, then kills the connection without ever
// having written headers.
func hang(ctx context.Context, rec *recorder) {
	<-ctx.Done()
	abortConnection(rec)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
