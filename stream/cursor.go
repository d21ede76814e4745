package stream

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// recheckAfter is how long a cursor past what a replica had stored waits
// for one more look: a replica may apply a message a moment after the
// leader acknowledged it (and the owner sent it).
const recheckAfter = 250 * time.Millisecond

// previewAhead is how far past what is stored the owner of a running
// generation may have shown events (the Tail's preview): its writer's
// window, and the one event shown before Append waits for room.
const previewAhead = journal.DefaultWindow + 1

// cursorFit says where a reader's cursor stands in its key.
type cursorFit int

const (
	cursorInside cursorFit = iota // events follow it (or may, live)
	cursorAtEnd                   // a finished generation read to its end: nothing follows
	cursorPast                    // past anything stored: never issued (400)
	// cursorUnsure: past what this instance knows of the key, and the
	// journal cannot say whether it was issued (503: try again). Its
	// view may lag — a record read from a replica behind, an owner woken
	// from a pause that was taken over —, and a 4xx is final for
	// EventSource, the SDKs and the helpers.
	cursorUnsure
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
	case cursorUnsure:
		failFor(w, rec, apierr.New(apierr.Unavailable).WithMessage("this instance cannot confirm the cursor now (the journal does not answer); retry"))
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
		// A generation the record does not know (yet: this view of it may
		// lag): past only if the journal holds none of it either.
		stored, ok := s.storedEventsAgain(ctx, journal.Ref{ID: id, Gen: cur.Gen}, func(n uint64) bool { return n == 0 })
		switch {
		case !ok:
			return cursorUnsure
		case stored == 0:
			return cursorPast
		}
		return cursorUnsure // stored elsewhere: this instance's view is behind
	case cur.Gen < rec.Generation || cur.Offset == 0:
		return cursorInside // an older generation's reader gets a reset first
	case rec.State != resume.InProgress:
		switch final, seq := s.finalEvents(ctx, id, rec); {
		case cur.Offset == final && rec.State == resume.Failed && seq != 0 && cur.Seq != seq:
			// Not the stored failure at that offset: an event its owner
			// showed before it died, in the failure's place (the Tail's
			// preview). The reader gets the failure.
			return cursorInside
		case cur.Offset > final && rec.State == resume.Failed && cur.Seq == 0:
			// The error event an instance made for its reader when the
			// journal could not store it (no stored event has Seq 0): it
			// was told.
			return cursorAtEnd
		case cur.Offset > final && rec.State == resume.Failed:
			// An event its owner showed before the journal lost it (the
			// Tail's preview): the reader gets the reason it failed.
			return cursorInside
		case cur.Offset > final:
			return cursorPast
		case cur.Offset == final:
			return cursorAtEnd
		}
		return cursorInside
	}
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	if t := s.engine.Tail(ref); t != nil { // what the owner showed
		if cur.Offset <= t.Last() {
			return cursorInside
		}
		// Past it: past the end — unless the journal holds more than the
		// owner showed, which was taken over (another instance continues
		// the generation, reattach.go, and shows what it appends before it
		// is stored): the journal says, and when it cannot, nobody here
		// knows.
		stored, ok := s.storedEvents(ctx, ref)
		switch {
		case !ok:
			return cursorUnsure
		case stored <= t.Last():
			return cursorPast
		case cur.Offset > stored+previewAhead:
			return cursorPast
		}
		return cursorInside
	}
	// The owner shows an event to its readers before JetStream stored it,
	// at most a writer's window ahead (the Tail's preview): such a cursor
	// is waited for.
	stored, ok := s.storedEventsAgain(ctx, ref, func(n uint64) bool { return cur.Offset > n+previewAhead })
	if ok && cur.Offset > stored+previewAhead {
		return cursorPast
	}
	return cursorInside
}

// storedEventsAgain is storedEvents, looked at once more after
// recheckAfter when the first answer is short (a replica may apply a
// message a moment after the leader acknowledged it).
func (s *Server) storedEventsAgain(ctx context.Context, ref journal.Ref, short func(uint64) bool) (uint64, bool) {
	stored, ok := s.storedEvents(ctx, ref)
	if !ok || !short(stored) {
		return stored, ok
	}
	select {
	case <-time.After(recheckAfter):
	case <-ctx.Done():
		return stored, false
	}
	return s.storedEvents(ctx, ref)
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
