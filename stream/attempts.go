package stream

import (
	"encoding/json"
	"net/http"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/resume"
)

// handleAttempts serves GET /v1/streams/{key}/attempts: the key's attempt
// log, one record per upstream request made for any of its generations
// (engine.Attempt), oldest first. Access is the status JSON's: the
// creator's credential or the Location's capability; 404 otherwise.
func (s *Server) handleAttempts(w http.ResponseWriter, r *http.Request) {
	key, err := resume.ParseKey(r.PathValue("key"))
	if err != nil {
		fail(w, r, apierr.New(apierr.BadKey))
		return
	}
	_, id, rec, ok := s.readerRecord(w, r, key, s.record)
	if !ok {
		return
	}
	records, err := s.journal.Attempts(r.Context(), id)
	if err != nil {
		s.log.Warn("attempt log unavailable", "err", err)
		failFor(w, rec, apierr.New(apierr.Unavailable))
		return
	}
	attempts := engine.MergeAttempts(records)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(struct {
		Key      string            `json:"key"`
		Attempts []json.RawMessage `json:"attempts"`
	}{key, attempts})
}
