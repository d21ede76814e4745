package stream

import (
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// The package's error answers. Every code and body comes from the one
// catalogue (package apierr); these pick the code for a failure and the
// shape to write it in.

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
	if errors.Is(err, auth.ErrPathNotAllowed) {
		return apierr.New(apierr.PathNotAllowed)
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

// unavailable is the error for a request the journal failed (err): its
// store full, or not available.
func unavailable(err error) apierr.Error {
	if errors.Is(err, journal.ErrStoreFull) {
		return apierr.New(apierr.JournalFull)
	}
	return apierr.New(apierr.Unavailable)
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

// budgetExceeded is the answer to a new generation of a proxy key over its
// budget until until, the end of the budget's window: Retry-After says it.
func budgetExceeded(until time.Time) apierr.Error {
	e := apierr.New(apierr.BudgetExceeded)
	e.RetryAfter = max(1, int(math.Ceil(time.Until(until).Seconds())))
	return e
}
