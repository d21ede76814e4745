package stream

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Serving a key's generation, whichever route asked for it: a POST's
// answer (decide.go), a reader of its Location (get.go), a Responses
// object (responses.go). A stream is written as SSE or WebSocket frames
// (follow.go reads it, write.go writes it); a whole answer from the tail
// or the journal; one still running is waited for, bounded.

// answer serves what resume decided for a POST of tenant's key (of stream
// id id): the new generation t follows, the one in progress, or the
// completed one.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, tenant, key, id string, out resume.Outcome, t *engine.Tail, cur resume.Position) {
	rec := out.Record
	h := w.Header()
	h.Set("Idempotency-Key", key)
	h.Set("Location", s.location(tenant, key))
	switch {
	case out.Decision == resume.Start && cur.Gen >= rec.Generation:
		cur = resume.Position{} // a cursor into a key that had no such generation: start over
	case out.Decision != resume.Start && !streamed(rec) && cur.Gen > rec.Generation:
		fail(w, r, apierr.New(apierr.BadCursor))
		return
	case out.Decision != resume.Start && streamed(rec) && s.answeredCursor(w, r, id, rec, cur):
		return
	}
	if out.Decision == resume.Attach {
		// Idempotent-Replayed's sibling: this answer follows a generation
		// an earlier request started, still running when it came.
		h.Set("Reprise-Attached", "true")
	}
	if out.Decision != resume.Replay && !rec.Stream && respondAsync(r) {
		// Query instead of retry: nothing is held open and nothing need
		// be sent again; the status JSON says when the Location has the
		// result.
		h.Set("Preference-Applied", "respond-async")
		wroteAnswer(r.Context()) // the client polls the Location: it asks nothing again
		s.writeStatus(w, http.StatusAccepted, rec)
		return
	}
	switch out.Decision {
	case resume.Start:
		s.serveStart(w, r, tenant, id, rec, t, cur)
	case resume.Replay:
		h.Set("Reprise-Attempts", "0") // this answer cost no upstream request
		h.Set("Idempotent-Replayed", "true")
		if rec.Upstream != "" {
			h.Set("Reprise-Upstream", rec.Upstream)
		}
		if streamed(rec) {
			s.serveSSE(w, r, tenant, id, rec, cur)
		} else {
			s.serveResultLimited(w, r, tenant, id, rec, s.serveResult)
		}
	case resume.Attach:
		h.Set("Reprise-Attempts", "0")
		if t := s.engine.Tail(journal.Ref{ID: id, Gen: rec.Generation}); t != nil && t.Completed() {
			h.Set("Idempotent-Replayed", "true") // it completed a moment ago; its record is being written
		}
		if s.answersStream(r.Context(), id, rec) {
			s.serveSSE(w, r, tenant, id, rec, cur)
		} else {
			s.serveResultLimited(w, r, tenant, id, rec, s.awaitResultOf(tenant))
		}
	}
}

// answersStream reports whether rec's key answers with an event stream.
// That is what its upstream answered, which need not be what the request
// asked for (an upstream may ignore "stream"): every reader gets what the
// first client got — the JSON of an upstream that ignored "stream": true,
// not its stored chunks as events. A finished key's record tells
// (streamed); while the generation runs, its upstream's answer does, once
// it came (answered). Until then a streaming request's reader waits for
// it, up to AttachWait; any other takes what was asked (and awaitResult
// serves the stream it may end as).
func (s *Server) answersStream(ctx context.Context, id string, rec resume.Record) bool {
	if rec.State != resume.InProgress {
		return streamed(rec)
	}
	stream, whole := s.answered(ctx, journal.Ref{ID: id, Gen: rec.Generation}, rec.Stream)
	return stream || rec.Stream && !whole
}

// answered reports how the upstream answered ref's generation, as far as
// this instance can tell: with events (stream), or with one body (whole);
// neither while it has not answered, or when it answered with an error.
// The owner's tail knows; elsewhere the first journaled event tells (a
// body chunk is a whole answer; no upstream event is named as reprise's
// own). With wait, it waits up to AttachWait for the answer.
func (s *Server) answered(ctx context.Context, ref journal.Ref, wait bool) (stream, whole bool) {
	d := 5 * time.Second // one journal get
	if wait {
		d = s.cfg.AttachWait
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if t := s.engine.Tail(ref); t != nil {
		head, ok := t.Answered()
		if !ok && wait {
			var err error
			head, err = t.Head(ctx)
			ok = err == nil
		}
		return ok && head.Streaming, ok && !head.Streaming && head.Status < http.StatusMultipleChoices
	}
	first, err := s.journal.First(ctx, ref) // one get, the common case
	if wait && errors.Is(err, journal.ErrNotFound) {
		// The upstream has not answered yet: wait for the first event.
		rd, rerr := s.journal.Read(ctx, ref, 0, 0)
		if rerr != nil {
			return false, false
		}
		defer rd.Close()
		first, err = rd.Next(ctx)
	}
	if err != nil || first.IsEnd() || first.Type == engine.TypeError {
		return false, false
	}
	return first.Type != engine.TypeBody, first.Type == engine.TypeBody
}

// streamed reports whether a key's answer is an event stream: what the
// upstream answered once it completed (an upstream may ignore "stream"),
// what was asked while it runs.
func streamed(rec resume.Record) bool {
	if rec.State == resume.Completed {
		mt, _, _ := mime.ParseMediaType(rec.ContentType)
		return mt == "text/event-stream"
	}
	return rec.Stream
}

func streamURL(key string) string { return "/v1/streams/" + url.PathEscape(key) }

// location is the Location of tenant's key: its stream URL with a
// capability, so that a reader without the credential can read it.
func (s *Server) location(tenant, key string) string {
	return streamURL(key) + "?token=" + s.auth.Capability(tenant, key, time.Now().Add(s.auth.CapabilityTTL()))
}

// serveStart serves the first client of a generation that t follows.
func (s *Server) serveStart(w http.ResponseWriter, r *http.Request, tenant, id string, rec resume.Record, t *engine.Tail, cur resume.Position) {
	head, err := t.Head(r.Context())
	if err != nil {
		// The request was canceled before the upstream answered: usually
		// its client left, but not always (behind a balancer the client
		// may still read). An answer ended here would reach it as a
		// complete, empty one; aborting makes it a broken one, which
		// clients retry (and attach). The pump goes on without it.
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Reprise-Attempts", strconv.Itoa(head.Attempts))
	if head.Upstream != "" {
		w.Header().Set("Reprise-Upstream", head.Upstream)
	}
	if head.Progressive {
		release, ok := s.takeReader(tenant, id)
		if !ok {
			failFor(w, rec, apierr.New(apierr.TooManyReaders))
			return
		}
		defer release()
		s.serveMedia(w, r, rec, t, head, false)
		return
	}
	if !head.Streaming {
		if ra := seconds(head.RetryAfter); ra > 0 && head.Status >= 400 {
			w.Header().Set("Retry-After", strconv.Itoa(ra))
		}
		if head.Status >= 400 && head.Attempts > 1 || apierr.ShouldNotRetry(head.Status, head.Code) {
			// reprise already retried, or a retry cannot help (no upstream
			// is configured for it: no_upstream), or it would bill again
			// (the catalogue's NoRetry): an SDK retrying on top would
			// multiply the upstream's load for nothing (the OpenAI and
			// Anthropic SDKs honour this header).
			w.Header().Set("X-Should-Retry", "false")
		}
		wroteAnswer(r.Context())
		writeRaw(w, head.Status, head.ContentType, head.Body)
		return
	}
	s.serveSSE(w, r, tenant, id, rec, cur)
}

// seconds rounds a wait up to whole seconds for Retry-After.
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// writeRaw writes a whole answer: status, content type and body, with its
// length (a keyless answer is flushed before its handler ends, to be marked
// on its connection — received.go — and the length keeps it one piece,
// not chunks).
func writeRaw(w http.ResponseWriter, status int, ct string, body []byte) {
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	if status >= http.StatusOK && status != http.StatusNoContent && status != http.StatusNotModified {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	_, _ = w.Write(body) //nolint:gosec // an API answer (the upstream's, or one assembled from its events) under its own content type, never HTML reprise makes
}

// serveResultLimited serves a non-streamed result under the per-key reader limit.
func (s *Server) serveResultLimited(w http.ResponseWriter, r *http.Request, tenant, id string, rec resume.Record,
	serve func(http.ResponseWriter, *http.Request, string, resume.Record),
) {
	release, ok := s.takeReader(tenant, id)
	if !ok {
		failFor(w, rec, apierr.New(apierr.TooManyReaders))
		return
	}
	defer release()
	serve(w, r, id, rec)
}

// serveResult writes a finished non-streamed generation from the journal.
func (s *Server) serveResult(w http.ResponseWriter, r *http.Request, id string, rec resume.Record) {
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	if rec.State == resume.Cancelled || rec.State != resume.Completed && !s.ended(r.Context(), ref) {
		// Cancelled: no result, whatever its journal holds. Or no end
		// will be stored (its owner died before its answer — a
		// non-streamed generation is not sealed — or the journal failed
		// it): reading would wait for it. The record says how it ended.
		failFor(w, rec, recordError(rec))
		return
	}
	rd, err := s.journal.Read(r.Context(), ref, 0, 0)
	if err != nil {
		failFor(w, rec, apierr.New(apierr.Unavailable))
		return
	}
	defer rd.Close()
	var body, errBody []byte
	for {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		ev, err := rd.Next(ctx)
		cancel()
		if err != nil {
			failFor(w, rec, apierr.New(apierr.Unavailable))
			return
		}
		if ev.IsEnd() {
			break
		}
		switch ev.Type {
		case engine.TypeBody:
			body = append(body, ev.Data...)
		case engine.TypeError:
			errBody = ev.Data
		}
	}
	if rec.State == resume.Failed {
		status := rec.Status
		if status < 400 {
			status = http.StatusBadGateway
		}
		if apierr.ShouldNotRetry(status, rec.Error) {
			w.Header().Set("X-Should-Retry", "false")
		}
		wroteAnswer(r.Context())
		writeRaw(w, status, "application/json", errBody)
		return
	}
	if r.Method != http.MethodGet || rec.Status != http.StatusOK {
		wroteAnswer(r.Context())
		writeRaw(w, rec.Status, rec.ContentType, body)
		return
	}
	// GET of a stored result (e.g. <audio src=Location>): byte ranges.
	w.Header().Set("Accept-Ranges", "bytes")
	start, end, partial, err := parseRange(r.Header.Get("Range"), int64(len(body)))
	switch {
	case errors.Is(err, errRangeUnsatisfiable):
		w.Header().Set("Content-Range", "bytes */"+strconv.Itoa(len(body)))
		failFor(w, rec, apierr.New(apierr.Unsatisfiable))
	case err != nil:
		failFor(w, rec, apierr.New(apierr.BadRange))
	case partial:
		s.metrics.Resume(metrics.TransportRange)
		w.Header().Set("Content-Range", "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(end-1, 10)+"/"+strconv.Itoa(len(body)))
		writeRaw(w, http.StatusPartialContent, rec.ContentType, body[start:end])
	default:
		writeRaw(w, rec.Status, rec.ContentType, body)
	}
}

// ended reports whether the journal holds ref's end marker; true when the
// journal cannot tell (the read then meets its error).
func (s *Server) ended(ctx context.Context, ref journal.Ref) bool {
	last, err := s.journal.Last(ctx, ref)
	return err == nil && last.IsEnd() || err != nil && !errors.Is(err, journal.ErrNotFound)
}

// awaitResultOf is awaitResult for a reader of tenant.
func (s *Server) awaitResultOf(tenant string) func(http.ResponseWriter, *http.Request, string, resume.Record) {
	return func(w http.ResponseWriter, r *http.Request, id string, rec resume.Record) {
		s.awaitResult(w, r, tenant, id, rec)
	}
}

// awaitResult waits (bounded) for a non-streamed generation in progress.
func (s *Server) awaitResult(w http.ResponseWriter, r *http.Request, tenant, id string, rec resume.Record) {
	if t, head := s.progressiveHead(id, rec); head != nil {
		// Media journaled as it arrives: follow it, from the Range's
		// first byte for a GET.
		s.serveMedia(w, r, rec, t, head, r.Method == http.MethodGet)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.AttachWait)
	defer cancel()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for rec.State == resume.InProgress {
		select {
		case <-ctx.Done():
			if r.Context().Err() == nil {
				failFor(w, rec, apierr.New(apierr.InProgress))
			}
			return
		case <-poll.C:
		}
		if t, head := s.progressiveHead(id, rec); head != nil { // it answered meanwhile
			s.serveMedia(w, r, rec, t, head, r.Method == http.MethodGet)
			return
		}
		var err error
		if rec, err = s.resume.Get(r.Context(), id); err != nil {
			failFor(w, rec, apierr.New(apierr.Unavailable))
			return
		}
	}
	w.Header().Set("Idempotent-Replayed", "true")
	if streamed(rec) {
		// The upstream answered a request that asked for no stream with
		// one: its events, as its first client got them.
		s.serveSSE(w, r, tenant, id, rec, resume.Position{})
		return
	}
	s.serveResult(w, r, id, rec)
}

// serveSSE answers with an event stream of rec's generation after cur.
func (s *Server) serveSSE(w http.ResponseWriter, r *http.Request, tenant, id string, rec resume.Record, cur resume.Position) {
	release, ok := s.takeReader(tenant, id)
	if !ok {
		failFor(w, rec, apierr.New(apierr.TooManyReaders))
		return
	}
	// Readers of the Location (EventSource, resumes, watchers: the idle
	// connections) are detached; a POST's answer stays with net/http, which
	// keeps its connection alive for the client's next request. A reader
	// of the Location that cannot be detached (HTTP/2) is served once its
	// handler chain returned (serveLater).
	//
	// A detached response ends when its connection closes: a clean close
	// is a complete response to the client. So a reader this instance
	// cuts (it is closing) is told so with an error event, and one whose
	// write failed (it did not take an event within the write timeout),
	// which nothing more can reach, gets its connection reset.
	if r.Method == http.MethodGet {
		if c := s.detached.Take(w, r); c != nil {
			timed := s.timed(r)
			s.detached.Go(c, func(ctx context.Context, w http.ResponseWriter) {
				out, err := newSSEWriter(w, detachedRequest, s.cfg.WriteTimeout, s.cfg.SSERetry)
				if out == nil {
					return // a detached connection always streams
				}
				if err == nil {
					err = s.follow(ctx, timed(out), tenant, id, &rec, cur)
				}
				switch {
				case out.failed:
					c.Abort()
				case errors.Is(err, context.Canceled): // the client left, or the instance cut the reader
					tellCut(out, rec.Path)
				}
				if err != nil && ctx.Err() == nil {
					s.log.Debug("client stream ended", "err", err)
				}
			}, release)
			return
		}
		if serveLater(r, func() { s.serveSSEHere(w, r, tenant, id, &rec, cur, release) }) {
			return
		}
	}
	s.serveSSEHere(w, r, tenant, id, &rec, cur, release)
}

// serveSSEHere answers with an event stream on net/http's response w
// (HTTP/2, a POST's answer), then calls release. An idle HTTP/2 reader
// waits in it (serveLater): it keeps its frame small (the errors are
// written by functions of their own), so that with what waits under it
// the reader's stack stays under a quarter of 16 KiB and the runtime
// halves it.
func (s *Server) serveSSEHere(w http.ResponseWriter, r *http.Request, tenant, id string, rec *resume.Record, cur resume.Position, release func()) {
	defer release()
	bw := batched(w)
	defer bw.FlushError() //nolint:errcheck // gives the buffer back; a write error was seen already
	out, err := newSSEWriter(bw, r, s.cfg.WriteTimeout, s.cfg.SSERetry)
	if err != nil {
		noStreaming(w, rec.Path)
		return
	}
	streaming(r.Context())
	s.endSSE(r, out, rec.Path, s.follow(r.Context(), s.timed(r)(out), tenant, id, rec, cur))
}

// noStreaming answers that w cannot stream.
func noStreaming(w http.ResponseWriter, path string) {
	apierr.New(apierr.NoStreaming).WriteIn(w, engine.ShapeOf(path))
}

// endSSE ends an event stream served by net/http that follow ended with
// err.
func (s *Server) endSSE(r *http.Request, out *sseWriter, path string, err error) {
	if r.Context().Err() != nil || (err != nil && s.closing.Err() != nil) {
		// The request was canceled — usually its client is gone, but not
		// always (a balancer's connection to this instance can end while
		// the balancer's client still reads): a response ended cleanly here
		// would reach that client as a complete stream that lacks its end.
		// Aborting makes it a broken one, which clients resume. So is a
		// reader cut because this instance is closing (told so first) or
		// whose write failed (the write timeout: net/http cancels the
		// request then).
		if r.Context().Err() == nil && !out.failed && errors.Is(err, context.Canceled) {
			tellCut(out, path)
		}
		panic(http.ErrAbortHandler)
	}
	if err != nil {
		s.log.Debug("client stream ended", "err", err)
	}
}

// tellCut tells a reader that this instance cuts it (it is closing) with
// an error event: shutting_down, retryable, and without an id, so the
// client's cursor stays on the last event it got and a resume (on another
// instance) continues from there.
func tellCut(out *sseWriter, path string) {
	ev := journal.Event{Type: engine.TypeError, Data: apierr.New(apierr.ShuttingDown).BodyIn(engine.ShapeOf(path))}
	if out.send("", ev) == nil {
		_ = out.flush()
	}
}

// detachedRequest stands for the request go-sse's Upgrade reads on a
// detached connection (it only looks at Last-Event-ID, which the stream was
// already positioned by).
var detachedRequest = &http.Request{}

// upgrader lends its 16 KiB write buffers from a pool while a frame is
// written, so an idle WebSocket reader holds none; its read buffer is the
// smallest that holds a control frame's payload (125 bytes, gorilla's
// floor): a client sends nothing else a reader uses, and a larger message
// (ignored) is read through it directly. With a read buffer size and a
// write buffer pool set, gorilla keeps neither of net/http's hijacked
// bufio buffers.
var upgrader = websocket.Upgrader{ReadBufferSize: 128, WriteBufferSize: 16 << 10, WriteBufferPool: &sync.Pool{}}

// serveWS answers with one JSON text frame per event.
//
// Once the connection is upgraded the reader is served on a goroutine of
// its own that the server's detach group tracks, as a detached SSE reader
// is: the handler returns, and net/http frees what it held for the request
// (its buffers, the request, the handler's stack). The group's context
// cuts the reader when Close's own ends; a goroutine reading control
// frames, started when the client first sends anything, ends it when the
// client closes or errors.
func (s *Server) serveWS(w http.ResponseWriter, r *http.Request, tenant, id string, rec resume.Record, cur resume.Position) {
	release, ok := s.takeReader(tenant, id)
	if !ok {
		failFor(w, rec, apierr.New(apierr.TooManyReaders))
		return
	}
	conn, err := upgrader.Upgrade(w, r, w.Header())
	if err != nil {
		release()
		return // the upgrader answered the client
	}
	conn.SetReadLimit(s.cfg.MaxWSMessage)
	out := s.timed(r)(&wsWriter{conn: conn, timeout: s.cfg.WriteTimeout})
	serve := func(ctx context.Context) {
		defer release()
		s.followWS(ctx, conn, out, tenant, id, &rec, cur)
	}
	if !s.detached.Track(serve) {
		serve(r.Context()) // Close has begun: the handler serves it itself
	}
}

// followWS writes rec's generation after cur to out on conn, then a close
// frame, and closes conn; it returns once conn's reading goroutine has.
func (s *Server) followWS(ctx context.Context, conn *websocket.Conn, out eventWriter, tenant, id string, rec *resume.Record, cur resume.Position) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	left := make(chan struct{})
	// Read control frames once the client sends any (until then the detach
	// group's poller watches the socket, and no goroutine waits on it); a
	// close or an error ends the stream.
	stop := s.detached.WhenReadable(conn.NetConn(), func() {
		defer close(left)
		defer cancel()
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	})
	defer func() {
		if stop() { // nothing heard: no goroutine reads conn
			close(left)
		}
		_ = conn.Close()
		<-left
	}()
	err := s.follow(ctx, out, tenant, id, rec, cur)
	msg := websocket.FormatCloseMessage(websocket.CloseNormalClosure, "end of stream")
	if err != nil {
		msg = websocket.FormatCloseMessage(websocket.CloseGoingAway, "stream interrupted")
	}
	_ = conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
}
