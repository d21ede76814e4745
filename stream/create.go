package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// createRequest is what reprise reads of a POST body; the rest is forwarded
// untouched.
type createRequest struct {
	Stream       bool   `json:"stream"`
	StreamFormat string `json:"stream_format"`
}

// handleCreate serves POST /v1/chat/completions and /v1/audio/speech.
func (s *Server) handleCreate(w http.ResponseWriter, r *http.Request) {
	tenant, apiErr := s.authenticate(r)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	body, stream, apiErr := s.readCreate(w, r)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	var key string
	if v := r.Header.Get("Idempotency-Key"); v != "" {
		var err error
		if key, err = resume.ParseKey(v); err != nil {
			writeError(w, errBadKey)
			return
		}
	}
	cur, err := resume.ParsePosition(r.Header.Get("Last-Event-ID"))
	if err != nil {
		writeError(w, errBadCursor)
		return
	}
	if s.isClosing() {
		writeError(w, errShuttingDown)
		return
	}
	fp := resume.Fingerprint(r.URL.Path, body)
	if key == "" {
		key = s.keyless(r, tenant, fp)
	}
	id := resume.StreamID(tenant, key)
	// The decision is not the client's to cut short: a record created for a
	// client that left meanwhile would otherwise name a generation nobody
	// runs (owner_lost once its lease ran out).
	bctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), decisionTimeout)
	out, err := s.cfg.Resume.Begin(bctx, resume.Request{
		ID: id, Key: key, Path: r.URL.Path, Fingerprint: fp, Stream: stream,
	})
	cancel()
	// Only a new generation takes one of the tenant's places; attaching
	// and replaying cost the upstream nothing.
	if err == nil && out.Decision == resume.Start && !s.takeGeneration(tenant) {
		s.abandon(id, out.Lease, errTooManyGens)
		writeError(w, errTooManyGens)
		return
	}
	switch {
	case errors.Is(err, resume.ErrMismatch):
		s.metrics.decisions.WithLabelValues("mismatch").Inc()
		writeError(w, errMismatch)
		return
	case err != nil:
		s.cfg.Logger.Error("resume decision failed", "err", err)
		writeError(w, errUnavailable)
		return
	}
	s.metrics.decisions.WithLabelValues(out.Decision.String()).Inc()
	h := w.Header()
	h.Set("Idempotency-Key", key)
	h.Set("Location", streamURL(key)+"?token="+s.capability(tenant, key, time.Now().Add(s.cfg.CapabilityTTL)))
	rec := out.Record
	switch {
	case out.Decision == resume.Start && cur.Gen >= rec.Generation:
		cur = resume.Position{} // a cursor into a key that had no such generation: start over
	case out.Decision != resume.Start && cur.Gen > rec.Generation:
		writeError(w, errBadCursor)
		return
	}
	switch out.Decision {
	case resume.Start:
		s.start(w, r, tenant, id, out, body, cur)
	case resume.Replay:
		h.Set("Reprise-Attempts", "0") // this answer cost no upstream request
		h.Set("Idempotent-Replayed", "true")
		if streamed(rec) {
			s.serveSSE(w, r, id, rec, cur)
		} else {
			s.serveResultLimited(w, r, id, rec, s.serveResult)
		}
	case resume.Attach:
		h.Set("Reprise-Attempts", "0")
		if streamed(rec) {
			s.serveSSE(w, r, id, rec, cur)
		} else {
			s.serveResultLimited(w, r, id, rec, s.awaitResult)
		}
	}
}

// keyless picks the key of a request that came without one. An SDK retry
// (X-Stainless-Retry-Count ≥ 1) of a body the same tenant sent within the
// window gets that request's key, so it attaches or replays instead of
// generating again; any other request gets a fresh key, remembered for its
// own retries. Fresh requests are never deduplicated by content.
func (s *Server) keyless(r *http.Request, tenant, fp string) string {
	cid := resume.ContentID(tenant, fp)
	if n, err := strconv.Atoi(r.Header.Get("X-Stainless-Retry-Count")); err == nil && n >= 1 && s.cfg.SDKRetryWindow > 0 {
		key, ok, err := s.cfg.Resume.LookupContent(r.Context(), cid, s.cfg.SDKRetryWindow)
		if err == nil && ok {
			s.metrics.decisions.WithLabelValues("sdk_retry").Inc()
			return key
		}
	}
	key := resume.NewKey()
	if err := s.cfg.Resume.RememberContent(r.Context(), cid, key); err != nil {
		s.cfg.Logger.Warn("remembering a keyless request failed; its SDK retries will generate again", "err", err)
	}
	return key
}

// readCreate validates a POST and returns its body and whether it asks for a stream.
func (s *Server) readCreate(w http.ResponseWriter, r *http.Request) ([]byte, bool, *apiError) {
	// application/json is required, not assumed: a cross-site form or an
	// untyped fetch (no CORS preflight) must not start a billable generation.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, false, errMediaType
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, false, errTooLarge
	case err != nil:
		return nil, false, newError(http.StatusBadRequest, "invalid_body", "request body could not be read")
	case !json.Valid(body):
		return nil, false, errInvalidJSON
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, false, errNotObject
	}
	var req createRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, false, newError(http.StatusBadRequest, "invalid_request", "request fields have the wrong type: "+err.Error())
	}
	if r.URL.Path == "/v1/audio/speech" {
		return body, req.StreamFormat == "sse", nil
	}
	return body, req.Stream, nil
}

// streamed reports whether a key's answer is an event stream: what the
// upstream answered once it completed (an upstream may ignore "stream"),
// what was asked while it runs.
// decisionTimeout bounds Begin, which outlives the client's request.
const decisionTimeout = 30 * time.Second

func streamed(rec resume.Record) bool {
	if rec.State == resume.Completed {
		mt, _, _ := mime.ParseMediaType(rec.ContentType)
		return mt == "text/event-stream"
	}
	return rec.Stream
}

func streamURL(key string) string { return "/v1/streams/" + url.PathEscape(key) }

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// start runs a new generation and serves its first client.
func (s *Server) start(w http.ResponseWriter, r *http.Request, tenant, id string, out resume.Outcome, body []byte, cur resume.Position) {
	rec := out.Record
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	p := &pump{
		s: s, tenant: tenant, ref: ref, lease: out.Lease, tail: newTail(), path: r.URL.Path, body: body,
		header: r.Header.Clone(), log: s.cfg.Logger.With("key_id", id),
	}
	if !s.startPump(p) {
		s.releaseGeneration(tenant)
		s.abandon(id, out.Lease, errShuttingDown)
		writeError(w, errShuttingDown)
		return
	}
	select {
	case <-p.tail.head:
	case <-r.Context().Done():
		return // the pump goes on without this client
	}
	resp := p.tail.headResp
	w.Header().Set("Reprise-Attempts", strconv.Itoa(resp.attempts))
	if !resp.streaming {
		if ra := seconds(resp.retryAfter); ra > 0 && resp.status >= 400 {
			w.Header().Set("Retry-After", strconv.Itoa(ra))
		}
		if resp.status >= 400 && resp.attempts > 1 {
			// reprise already retried: an SDK retrying on top would
			// multiply the upstream's load (openai-go honours this header).
			w.Header().Set("X-Should-Retry", "false")
		}
		writeRaw(w, resp.status, resp.contentType, resp.body)
		return
	}
	s.serveSSE(w, r, id, rec, cur)
}

// abandon ends a generation that never started: its journal holds the
// error and an end marker, like any failed generation (so its readers end),
// and the key is failed, so the next request with it starts afresh.
func (s *Server) abandon(id string, l *resume.Lease, why *apiError) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w := s.cfg.Journal.NewWriter(journal.Ref{ID: id, Gen: l.Record().Generation}, func(journal.Event) {})
	err := w.Append(ctx, typeError, why.body())
	if err == nil {
		err = w.End(ctx, journal.EndFailed)
	} else {
		w.Abort()
	}
	if ferr := l.Finish(ctx, resume.Result{State: resume.Failed, Events: 1, Status: why.Status, Error: why.Code}); err == nil {
		err = ferr
	}
	if err != nil {
		s.cfg.Logger.Warn("abandoning a generation", "err", err)
	}
}

func writeRaw(w http.ResponseWriter, status int, ct string, body []byte) {
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// serveResultLimited serves a non-streamed result under the per-key reader limit.
func (s *Server) serveResultLimited(w http.ResponseWriter, r *http.Request, id string, rec resume.Record,
	serve func(http.ResponseWriter, *http.Request, string, resume.Record),
) {
	release, ok := s.takeReader(id)
	if !ok {
		writeError(w, errTooManyReaders)
		return
	}
	defer release()
	serve(w, r, id, rec)
}

// serveResult writes a finished non-streamed generation from the journal.
func (s *Server) serveResult(w http.ResponseWriter, r *http.Request, id string, rec resume.Record) {
	rd, err := s.cfg.Journal.Read(r.Context(), journal.Ref{ID: id, Gen: rec.Generation}, 0, 0)
	if err != nil {
		writeError(w, errUnavailable)
		return
	}
	defer rd.Close()
	var body, errBody []byte
	for {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		ev, err := rd.Next(ctx)
		cancel()
		if err != nil {
			writeError(w, errUnavailable)
			return
		}
		if ev.IsEnd() {
			break
		}
		switch ev.Type {
		case typeBody:
			body = append(body, ev.Data...)
		case typeError:
			errBody = ev.Data
		}
	}
	if rec.State == resume.Failed {
		status := rec.Status
		if status < 400 {
			status = http.StatusBadGateway
		}
		writeRaw(w, status, "application/json", errBody)
		return
	}
	if r.Method != http.MethodGet || rec.Status != http.StatusOK {
		writeRaw(w, rec.Status, rec.ContentType, body)
		return
	}
	// GET of a stored result (e.g. <audio src=Location>): byte ranges.
	w.Header().Set("Accept-Ranges", "bytes")
	start, end, partial, err := parseRange(r.Header.Get("Range"), int64(len(body)))
	switch {
	case errors.Is(err, errRangeUnsatisfiable):
		w.Header().Set("Content-Range", "bytes */"+strconv.Itoa(len(body)))
		writeError(w, errUnsatisfiable)
	case err != nil:
		writeError(w, errBadRange)
	case partial:
		w.Header().Set("Content-Range", "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(end-1, 10)+"/"+strconv.Itoa(len(body)))
		writeRaw(w, http.StatusPartialContent, rec.ContentType, body[start:end])
	default:
		writeRaw(w, rec.Status, rec.ContentType, body)
	}
}

// awaitResult waits (bounded) for a non-streamed generation in progress.
func (s *Server) awaitResult(w http.ResponseWriter, r *http.Request, id string, rec resume.Record) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.AttachWait)
	defer cancel()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for rec.State == resume.InProgress {
		select {
		case <-ctx.Done():
			if r.Context().Err() == nil {
				writeError(w, errInProgress)
			}
			return
		case <-poll.C:
		}
		var err error
		if rec, err = s.cfg.Resume.Get(r.Context(), id); err != nil {
			writeError(w, errUnavailable)
			return
		}
	}
	w.Header().Set("Idempotent-Replayed", "true")
	s.serveResult(w, r, id, rec)
}
