package stream

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream/apierr"
)

// recheckAfter is how long a cursor past what a replica had stored waits
// for one more look: a replica may apply a message a moment after the
// leader acknowledged it (and the owner sent it).
const recheckAfter = 250 * time.Millisecond

// cursorFit says where a reader's cursor stands in its key.
type cursorFit int

const (
	cursorInside cursorFit = iota // events follow it (or may, live)
	cursorAtEnd                   // a finished generation read to its end: nothing follows
	cursorPast                    // past anything stored: never issued (400)
)

// answeredCursor answers r, and reports so, when cur cannot read rec's
// key: 400 for a cursor past anything stored, 204 for one at the end of a
// finished generation (nothing more will come: EventSource stops).
func (s *Server) answeredCursor(w http.ResponseWriter, r *http.Request, id string, rec resume.Record, cur resume.Position) bool {
	switch s.fitCursor(r.Context(), id, rec, cur) {
	case cursorPast:
		failFor(w, rec, apierr.New(apierr.BadCursor).WithMessage("the cursor is past the end of the stream"))
		return true
	case cursorAtEnd:
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	return false
}

// fitCursor checks cur against what rec's key holds. Every reader's cursor
// is checked, on every path (POST attach and replay, GET on any instance):
// one past the end would otherwise wait for events that never come.
func (s *Server) fitCursor(ctx context.Context, id string, rec resume.Record, cur resume.Position) cursorFit {
	switch {
	case cur.Gen > rec.Generation:
		return cursorPast
	case cur.Gen < rec.Generation || cur.Offset == 0:
		return cursorInside // an older generation's reader gets a reset first
	case rec.State != resume.InProgress:
		switch final := s.finalEvents(ctx, id, rec); {
		case cur.Offset > final:
			return cursorPast
		case cur.Offset == final:
			return cursorAtEnd
		}
		return cursorInside
	}
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	if t := s.engine.Tail(ref); t != nil && cur.Offset <= t.Last() { // the owner's readers get only what is stored
		return cursorInside
	}
	// Not here, or past this instance's tail: the journal says. A tail
	// behind a cursor is an owner's that was taken over (another instance
	// continues the generation, reattach.go), or one a moment behind the
	// journal's acknowledgement.
	stored, ok := s.storedEvents(ctx, ref)
	if ok && cur.Offset > stored {
		select {
		case <-time.After(recheckAfter):
		case <-ctx.Done():
			return cursorInside
		}
		stored, ok = s.storedEvents(ctx, ref)
	}
	if ok && cur.Offset > stored {
		return cursorPast
	}
	return cursorInside
}

// storedEvents is the offset of ref's last stored event; ok false when the
// journal cannot say (the reader then meets the outage itself).
func (s *Server) storedEvents(ctx context.Context, ref journal.Ref) (uint64, bool) {
	last, err := s.journal.Last(ctx, ref)
	switch {
	case err == nil:
		return last.Offset, true
	case errors.Is(err, journal.ErrNotFound):
		return 0, true
	}
	return 0, false
}
