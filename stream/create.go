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
	"strings"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// create serves POST of format proto: the body is forwarded untouched,
// reprise reads only whether it asks for a stream.
func (s *Server) create(proto engine.Protocol) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tenant, err := s.auth.Tenant(r)
		if err != nil {
			fail(w, r, authError(err))
			return
		}
		body, stream, apiErr := s.readCreate(w, r, proto)
		if apiErr != nil {
			fail(w, r, *apiErr)
			return
		}
		s.begin(w, r, tenant, proto, body, stream)
	}
}

// begin decides what a valid POST may do and does it.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, tenant string, proto engine.Protocol, body []byte, stream bool) {
	key, err := requestKey(r)
	if err != nil {
		fail(w, r, apierr.New(apierr.BadKey))
		return
	}
	cur, err := resume.ParsePosition(r.Header.Get("Last-Event-ID"))
	if err != nil {
		fail(w, r, apierr.New(apierr.BadCursor))
		return
	}
	if s.engine.Closing() {
		fail(w, r, apierr.New(apierr.ShuttingDown))
		return
	}
	model := modelOf(body)
	if !s.engine.Serves(r.URL.Path, model) {
		// Configuration, not a generation: no record for the key (a
		// duplicate gets the same answer), nothing for a retry to attach to.
		fail(w, r, apierr.New(apierr.NoUpstream))
		return
	}
	fp, bfp := resume.Fingerprint(requestPath(r), body), resume.BytesFingerprint(requestPath(r), body)
	var kl *keyless
	if key == "" {
		_, assembles := proto.(assembler)
		if kl = s.keyless(r, tenant, fp, resume.StreamlessFingerprint(requestPath(r), body), stream, assembles); kl != nil {
			key = kl.key
		} else {
			key = resume.NewKey()
		}
	}
	// A keyless request new to the shedding has a fresh key; whether it is a
	// retry is asked only when shedding would refuse it.
	if s.shed(w, r, func() (string, bool) {
		if kl != nil {
			if kl.settle(); !kl.fallback { // a fallback is decided on its fresh key first
				key = kl.key
			}
		}
		return resume.StreamID(tenant, key), kl != nil && !kl.retry || kl == nil && r.Header.Get("Idempotency-Key") == ""
	}) {
		return
	}
	var out resume.Outcome
	var rc *receipt
	var t *engine.Tail
	var fl *flight
	returned := false
	if kl != nil {
		r, rc = withReceipt(r)
		fl = s.flights.add(kl, r, rc) // its retry, should it come now, waits for its decision
		defer func() {
			s.finishKeyless(w, r, fl, kl.fallback || out.Decision != 0 && (out.Decision != resume.Start || t != nil), returned)
		}()
	}
	out, err = s.decide(r, tenant, key, fp, bfp, stream, model, kl)
	if kl != nil {
		key = kl.key
	}
	noteKey(r, key)
	id := resume.StreamID(tenant, key)
	switch {
	case errors.Is(err, resume.ErrMismatch):
		s.metrics.Decision("mismatch")
		noteDecision(r, "reject")
		fail(w, r, apierr.New(apierr.Mismatch))
		return
	case err != nil:
		s.metrics.Decision("unavailable")
		s.log.Error("resume decision failed", "err", err)
		fail(w, r, unavailable(err))
		return
	}
	if kl != nil && kl.fallback {
		if s.serveFallback(w, r, tenant, kl, proto.(assembler), body) {
			s.withdraw(out)
			returned = true
			return
		}
		kl.renew() // the stream it fell back from has no result: a new request
		key, id = kl.key, resume.StreamID(tenant, kl.key)
		noteKey(r, key)
	}
	rec := out.Record
	if kl != nil && out.Decision == resume.Start && (r.Context().Err() != nil || clientClosed(r)) {
		// A keyless request whose client left while it was decided: nobody
		// waits for its generation, and nobody can reach it but a retry,
		// which starts the one it needs. (A client with a key may come back
		// for it: its generation runs.)
		s.withdraw(out)
		return
	}
	if out.Decision == resume.Start {
		// Only a new generation takes one of the tenant's places; attaching
		// and replaying cost the upstream nothing.
		g := engine.Generation{
			Tenant: tenant, Key: key, Ref: journal.Ref{ID: id, Gen: rec.Generation}, Lease: out.Lease, Protocol: proto, Model: model,
			Stream: stream, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body, Header: r.Header.Clone(),
		}
		if fl != nil {
			g.Reachable = fl.reachable // a keyless generation's retry finds it only through the index
		}
		t, err = s.engine.Start(g)
		if err != nil {
			fail(w, r, startError(err))
			return
		}
	}
	if kl != nil {
		// Decided: a retry may claim it before its handler ends; its
		// client gone, it is left behind at once.
		s.flights.run(fl, func() { s.leaveBehind(kl) })
	}
	s.metrics.Decision(out.Decision.String())
	if kl != nil && kl.retry {
		s.metrics.Decision("retry")
	}
	if how := duplicateHow(out.Decision, kl != nil && kl.retry); how != "" {
		s.metrics.Duplicate(how)
	}
	if out.Decision == resume.Start {
		startedHere(r)
	}
	if out.Decision != resume.Start && r.Header.Get("Last-Event-ID") != "" {
		noteDecision(r, "resume")
	} else {
		noteDecision(r, out.Decision.String())
	}
	if how := savedHow(out.Decision, kl != nil && kl.retry, rec, cur); how != "" {
		s.saved(id, rec, how) // saved.go: attach, replay, retry, or a resume (Last-Event-ID)
	}
	s.answer(w, r, tenant, key, out, t, cur)
	returned = true
}

// decide asks resume what a POST may do with key. A keyless request (kl
// not nil) is decided on its fresh key while its retry is looked up; if it
// turns out to be a retry, the fresh key is withdrawn and the request is
// decided again on the key it claimed.
func (s *Server) decide(r *http.Request, tenant, key, fp, bfp string, stream bool, model string, kl *keyless) (resume.Outcome, error) {
	// The decision is not the client's to cut short: a record created for a
	// client that left meanwhile would otherwise name a generation nobody
	// runs (owner_lost once its lease ran out).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), decisionTimeout)
	defer cancel()
	req := resume.Request{
		ID: resume.StreamID(tenant, key), Key: key, Path: r.URL.Path, Fingerprint: fp, BytesFingerprint: bfp,
		Stream: stream, Model: model, Tenant: tenant,
	}
	req.Caller = s.engine.SealCaller(req.ID, req.Path, r.Header)
	if kl != nil {
		req.Content = kl.cid
	}
	out, err := s.resume.Begin(ctx, req)
	if kl == nil || !kl.settle() || kl.fallback {
		// A fallback keeps its fresh key's decision: it is served from the
		// stream it claimed, or, if that left no result, as a new request.
		return out, err
	}
	if err == nil {
		s.withdraw(out)
	}
	req.Key, req.ID = kl.key, resume.StreamID(tenant, kl.key)
	out, err = s.resume.Begin(ctx, req)
	if err != nil {
		s.leaveBehind(kl) // the claim is not lost with this request: its client's next try claims it
	}
	return out, err
}

// duplicateHow names how a request decided d was a suppressed duplicate
// (a keyless retry recognised as its first request's, whatever it then
// did), "" when it was none.
func duplicateHow(d resume.Decision, retry bool) string {
	switch {
	case d == resume.Start:
		return ""
	case retry:
		return metrics.HowRetry
	case d == resume.Attach:
		return metrics.HowAttach
	case d == resume.Replay:
		return metrics.HowReplay
	}
	return ""
}

// requestPath is what of r's URL the upstream gets and a key's fingerprint
// covers: its path, and its query when it has one (a pass-through's
// ?limit=, a gateway's ?api-version=), so that the same key with another
// query is another request.
func requestPath(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return r.URL.Path
	}
	return r.URL.Path + "?" + r.URL.RawQuery
}

// requestKey is r's Idempotency-Key, "" when it sent none (or an empty
// one). Two are refused like a malformed key (resume.ErrInvalidKey): which
// one the caller meant is unknowable, and a gateway on the way may have
// added the second.
func requestKey(r *http.Request) (string, error) {
	switch vs := r.Header.Values("Idempotency-Key"); {
	case len(vs) > 1:
		return "", resume.ErrInvalidKey
	case len(vs) == 0 || vs[0] == "":
		return "", nil
	default:
		return resume.ParseKey(vs[0])
	}
}

// answer serves what resume decided for a POST: the new generation t
// follows, the one in progress, or the completed one.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, tenant, key string, out resume.Outcome, t *engine.Tail, cur resume.Position) {
	rec, id := out.Record, resume.StreamID(tenant, key)
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
		writeStatus(w, http.StatusAccepted, rec)
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

// modelOf is the model a request body names, "" when it names none.
func modelOf(body []byte) string {
	var v struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &v) // a body that is no JSON object names none
	return v.Model
}

// respondAsync reports whether the request asks, RFC 7240's way, not to
// wait for the answer.
func respondAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for p := range strings.SplitSeq(v, ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(p), ";"); strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

// readCreate validates a POST of format proto and returns its body and
// whether it asks for a stream.
func (s *Server) readCreate(w http.ResponseWriter, r *http.Request, proto engine.Protocol) ([]byte, bool, *apierr.Error) {
	fail := func(code string) ([]byte, bool, *apierr.Error) {
		e := apierr.New(code)
		return nil, false, &e
	}
	// application/json is required, not assumed: a cross-site form or an
	// untyped fetch (no CORS preflight) must not start a billable generation.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return fail(apierr.MediaType)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return fail(apierr.TooLarge)
	case err != nil:
		return fail(apierr.InvalidBody)
	case !json.Valid(body):
		return fail(apierr.InvalidJSON)
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return fail(apierr.InvalidRequest)
	}
	stream, err := proto.Streams(body)
	if err != nil {
		e := apierr.New(apierr.InvalidRequest).WithMessage("request fields have the wrong type: " + err.Error())
		return nil, false, &e
	}
	return body, stream, nil
}

// decisionTimeout bounds Begin, which outlives the client's request.
const decisionTimeout = 30 * time.Second

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

// fail answers r with e in its caller's error shape (the format its path
// names; OpenAI's elsewhere).
func fail(w http.ResponseWriter, r *http.Request, e apierr.Error) {
	e.WriteIn(w, engine.ShapeOf(r.URL.Path))
}

// failFor answers a reader of rec's key with e in the shape of the key's
// format.
func failFor(w http.ResponseWriter, rec resume.Record, e apierr.Error) {
	e.WriteIn(w, engine.ShapeOf(rec.Path))
}

// authError is the answer to a caller auth refused.
func authError(err error) apierr.Error {
	if errors.Is(err, auth.ErrBadKey) {
		return apierr.New(apierr.BadProxyKey)
	}
	return apierr.New(apierr.NoKey)
}

// startError is the answer to a generation the engine refused to start.
func startError(err error) apierr.Error {
	if errors.Is(err, engine.ErrTooManyGenerations) {
		return apierr.New(apierr.TooManyGenerations)
	}
	return apierr.New(apierr.ShuttingDown)
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

// recordError is the error a generation that ended without a result ended
// with, as its record names it: owner_lost for a code the catalogue does
// not know (the upstream's own codes come with their stored error event).
func recordError(rec resume.Record) apierr.Error {
	if rec.State == resume.Cancelled {
		return apierr.New(apierr.Cancelled)
	}
	if apierr.Known(rec.Error) {
		return apierr.New(rec.Error)
	}
	return apierr.New(apierr.OwnerLost)
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
