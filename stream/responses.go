package stream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// handleResponse serves GET /v1/responses/{id}, OpenAI's own retrieve and
// resume of a response, from the journal of the key whose generation the
// upstream named id — whatever the upstream supports: with stream=true the
// events after sequence_number starting_after (all without it), then live;
// without, the response object (completed, or as it began while it runs).
// An id reprise never journaled is the upstream's to answer (a response
// made elsewhere), except where callers share the proxy's own key.
func (s *Server) handleResponse(w http.ResponseWriter, r *http.Request) {
	who, err := s.caller(r)
	tenant := who.Tenant
	if err != nil {
		fail(w, r, authError(err))
		return
	}
	key, ok, err := s.resume.LookupName(r.Context(), tenant, r.PathValue("id"))
	switch {
	case err != nil:
		fail(w, r, apierr.New(apierr.Unavailable))
		return
	case !ok && s.auth.SharesKey():
		// The upstream would answer with the key every proxy key shares:
		// another tenant's response, made through reprise or not.
		fail(w, r, apierr.New(apierr.KeyNotFound).WithMessage("no response with this id was made through this proxy key"))
		return
	case !ok:
		s.passThrough(w, r) // made elsewhere: the upstream's, with the caller's own credential
		return
	}
	id := resume.StreamID(tenant, key)
	rec, err := s.record(r.Context(), id)
	if err != nil {
		fail(w, r, apierr.New(apierr.Unavailable))
		return
	}
	w.Header().Set("Idempotency-Key", key)
	q := r.URL.Query()
	if !wantsStream(r) {
		s.serveResponseObject(w, r, tenant, id, rec)
		return
	}
	cur := resume.Position{Gen: rec.Generation}
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.ParseUint(v, 10, 63)
		if err != nil {
			fail(w, r, apierr.New(apierr.InvalidRequest).WithMessage("starting_after must be a sequence_number"))
			return
		}
		// A Responses stream numbers its events from 0, one by one: the
		// event numbered n is the journal's (n+1)-th.
		cur.Offset = n + 1
	}
	if s.answeredCursor(w, r, id, rec, cur) {
		return
	}
	if q.Get("starting_after") != "" {
		s.savedLater(id, rec, metrics.HowResume) // a client continuing after a drop (saved.go)
	}
	s.metrics.Resume(metrics.TransportSSE)
	s.serveSSE(w, r, tenant, id, rec, cur)
}

// serveResponseObject answers with the response object of id's generation:
// the non-streamed answer as stored; of a stream, the "response" its
// terminal event carries, or its first event's while it runs.
func (s *Server) serveResponseObject(w http.ResponseWriter, r *http.Request, tenant, id string, rec resume.Record) {
	if !streamed(rec) {
		s.serveResultLimited(w, r, tenant, id, rec, s.serveResult)
		return
	}
	after := uint64(0)
	if rec.State != resume.InProgress && rec.Events > 0 {
		after = rec.Events - 1 // the terminal event, or the error event
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	rd, err := s.journal.Read(ctx, journal.Ref{ID: id, Gen: rec.Generation}, after, 0)
	if err != nil {
		failFor(w, rec, apierr.New(apierr.Unavailable))
		return
	}
	defer rd.Close()
	ev, err := rd.Next(ctx)
	var v struct {
		Response json.RawMessage `json:"response"`
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil, err == nil && ev.IsEnd():
		failFor(w, rec, apierr.New(apierr.KeyNotFound).WithMessage("the response has no events yet"))
		return
	case err != nil:
		failFor(w, rec, apierr.New(apierr.Unavailable))
		return
	case json.Unmarshal(ev.Data, &v) != nil || len(v.Response) == 0:
		// A failed generation ends with an error event, not a response.
		writeRaw(w, http.StatusBadGateway, "application/json", ev.Data)
		return
	}
	writeRaw(w, http.StatusOK, "application/json", v.Response)
}

// wantsStream reports whether a GET asks for the events: stream=true in
// the query (OpenAI's documented form), an Accept of text/event-stream, or
// {"stream": true} in a body (what openai-go's GetStreaming sends).
func wantsStream(r *http.Request) bool {
	if r.URL.Query().Get("stream") == "true" {
		return true
	}
	if accept := r.Header.Get("Accept"); accept != "" && !wantsJSON(accept) && strings.Contains(accept, "text/event-stream") {
		return true
	}
	var body struct {
		Stream bool `json:"stream"`
	}
	b, _ := io.ReadAll(io.LimitReader(r.Body, 4<<10))
	return json.Unmarshal(b, &body) == nil && body.Stream
}
