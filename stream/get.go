package stream

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// handleStream serves GET /v1/streams/{key}: SSE, JSON status or WebSocket.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request) {
	key, err := resume.ParseKey(r.PathValue("key"))
	if err != nil {
		fail(w, r, apierr.New(apierr.BadKey))
		return
	}
	noteKey(r, key)
	if _, _, _, err := parseRange(r.Header.Get("Range"), math.MaxInt64); errors.Is(err, errRangeSyntax) {
		fail(w, r, apierr.New(apierr.BadRange))
		return
	}
	status := wantsJSON(r.Header.Get("Accept")) && !websocket.IsWebSocketUpgrade(r)
	get := s.record
	if status {
		get = s.statusRecord
	}
	tenant, id, rec, ok := s.readerRecord(w, r, key, get)
	if !ok {
		return
	}
	if status {
		s.writeStatus(w, http.StatusOK, s.live(r.Context(), id, rec))
		return
	}
	raw := r.Header.Get("Last-Event-ID") // EventSource's reconnect: newer than the URL's query
	if raw == "" {
		raw = r.URL.Query().Get("last_event_id")
	}
	cur, err := resume.ParsePosition(raw)
	if err != nil {
		failFor(w, rec, apierr.New(apierr.BadCursor))
		return
	}
	if s.answeredCursor(w, r, id, rec, cur) {
		return
	}
	w.Header().Set("Idempotency-Key", key)
	noteDecision(r, "resume")
	if !s.answersStream(r.Context(), id, rec) { // a non-streamed answer: its Location serves the stored result
		if rec.State == resume.InProgress {
			s.serveResultLimited(w, r, tenant, id, rec, s.awaitResultOf(tenant))
		} else {
			s.serveResultLimited(w, r, tenant, id, rec, s.serveResult)
		}
		return
	}
	if raw != "" { // a client continuing after a drop (saved.go), counted once it got its first event
		thenFlushed(r, func() { s.savedLater(id, rec, metrics.HowResume) })
	}
	if websocket.IsWebSocketUpgrade(r) {
		s.metrics.Resume(metrics.TransportWebSocket)
		s.serveWS(w, r, tenant, id, rec, cur)
		return
	}
	s.metrics.Resume(metrics.TransportSSE)
	s.serveSSE(w, r, tenant, id, rec, cur)
}

// readerRecord is the tenant, id and record of key for a reader of r — in the tenant its
// capability names or its own — as get reads it; ok false once it answered
// r (404 exactly as for a key that does not exist, or 503).
func (s *Server) readerRecord(w http.ResponseWriter, r *http.Request, key string,
	get func(context.Context, string) (resume.Record, error),
) (tenant, id string, rec resume.Record, ok bool) {
	tenant, ok = s.readerTenant(r, key)
	if !ok {
		fail(w, r, apierr.New(apierr.KeyNotFound))
		return "", "", resume.Record{}, false
	}
	id = resume.StreamID(tenant, key)
	rec, err := get(r.Context(), id)
	switch {
	case errors.Is(err, resume.ErrNotFound):
		fail(w, r, apierr.New(apierr.KeyNotFound))
		return "", "", rec, false
	case err != nil:
		fail(w, r, unavailable(err))
		return "", "", rec, false
	}
	return tenant, id, rec, true
}

// record is a key's record for its readers: the owner's own copy while
// this instance runs the key's generation, or the one it finished a result
// kept here with (engine.Finished), which holds all a reader takes of it —
// either way a resume here takes no journal round trip —, else the stored
// one. It is one frame above the store's read, as statusRecord: a deeper
// chain to the JSON decoding touches one more page of an HTTP/2 reader's
// stack (+4 KB of RSS each, measured).
func (s *Server) record(ctx context.Context, id string) (resume.Record, error) {
	if rec, ok := s.engine.Owned(id); ok {
		return rec, nil
	}
	if rec, _ := s.engine.Finished(id); rec != nil {
		return *rec, nil
	}
	return s.resume.Get(ctx, id)
}

// statusRecord is record for a key's status: the owner's own copy only
// while its generation runs; a finished one's counts move on in the store
// (billed, saved), as the result kept here and the owner's last copy do not.
func (s *Server) statusRecord(ctx context.Context, id string) (resume.Record, error) {
	if rec, ok := s.engine.Owned(id); ok && rec.State == resume.InProgress {
		return rec, nil
	}
	return s.resume.Get(ctx, id)
}

// live is rec with its events and updated_at as journaled now, for a
// generation in progress: the record itself only moves at the lease's
// heartbeats. The owner reads its tail; any other instance asks the journal
// for the generation's last message. If the journal does not answer, the
// record is as good as it gets.
func (s *Server) live(ctx context.Context, id string, rec resume.Record) resume.Record {
	if rec.State != resume.InProgress {
		return rec
	}
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	var events uint64
	var at time.Time
	if t := s.engine.Tail(ref); t != nil {
		events, at = t.Progress()
	} else if p, err := s.journal.Progress(ctx, ref); err == nil {
		events, at = p.Events, p.At
	} else {
		s.log.Debug("status: journal progress", "err", err)
	}
	rec.Events = max(rec.Events, events)
	if at.After(rec.UpdatedAt) {
		rec.UpdatedAt = at.In(rec.UpdatedAt.Location())
	}
	return rec
}

// finalEvents is how many events a finished generation's readers can get,
// and the Seq of the last of them when the journal was read for it (0
// otherwise). A generation whose owner died has only the count of its last
// heartbeat in its record: the journal knows better. Its end marker
// (Salvage seals it with the owner_lost error, in one message) comes right
// after the last event; a generation's journal without one (not sealed)
// gets the owner_lost error after its last event.
func (s *Server) finalEvents(ctx context.Context, id string, rec resume.Record) (final, seq uint64) {
	if rec.Error != resume.OwnerLost {
		return rec.Events, 0
	}
	last, err := s.journal.Last(ctx, journal.Ref{ID: id, Gen: rec.Generation})
	switch {
	case err != nil:
		return 1, 0 // nothing stored: only the error
	case last.IsEnd():
		return last.Offset - 1, last.Seq
	}
	return last.Offset + 1, 0
}

// readerTenant is the tenant a GET may read key in: the one its capability
// token names, or the caller's own. A bad or expired token grants nothing.
func (s *Server) readerTenant(r *http.Request, key string) (string, bool) {
	if tok := r.URL.Query().Get("token"); tok != "" {
		return s.auth.Verify(tok, key, time.Now())
	}
	who, err := s.caller(r)
	return who.Tenant, err == nil
}

// wantsJSON reports whether Accept prefers JSON over an event stream.
func wantsJSON(accept string) bool {
	for part := range strings.SplitSeq(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case "text/event-stream":
			return false
		case "application/json":
			return true
		}
	}
	return false
}

type status struct {
	Key        string       `json:"key"`
	State      resume.State `json:"state"`
	Generation uint64       `json:"generation"`
	Events     uint64       `json:"events"`
	Stream     bool         `json:"stream"`
	Status     int          `json:"status,omitempty"`
	Error      string       `json:"error,omitempty"`
	Usage      *cost.Usage  `json:"usage,omitempty"`
	// UsageBasis says where Usage comes from: reported, estimated (a
	// generation that failed or was cancelled before the upstream reported
	// it) or unknown (resume.Record.Basis); absent while a generation runs.
	UsageBasis cost.Basis `json:"usage_basis,omitempty"`
	// Cost is the last generation's; Billed all generations'; Saved what
	// the requests served without a generation did not cost, by kind
	// (resume.Record).
	Cost     *float64     `json:"cost,omitempty"`
	Billed   *cost.Billed `json:"billed,omitempty"`
	Saved    *cost.Saved  `json:"saved,omitempty"`
	Upstream string       `json:"upstream,omitempty"`
	// KeyName names the proxy key whose generations these are (never the
	// key); absent outside static auth.
	KeyName   string    `json:"key_name,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func (s *Server) writeStatus(w http.ResponseWriter, code int, rec resume.Record) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(status{
		Key: rec.Key, State: rec.State, Generation: rec.Generation, Events: rec.Events, Stream: rec.Stream,
		Status: rec.Status, Error: rec.Error, Usage: rec.Usage, UsageBasis: rec.Basis(), Cost: rec.Cost, Billed: rec.Billed, Saved: rec.Saved, Upstream: rec.Upstream, KeyName: s.auth.NameOf(rec.Tenant), CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt,
	})
}
