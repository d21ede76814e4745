package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// keeper is what kept needs of the journal. journal.Journal implements it.
type keeper interface {
	First(ctx context.Context, ref journal.Ref) (journal.Event, error)
	// TTL is how long events and records are kept.
	TTL() time.Duration
}

// kept is the resume.Config.Kept of a proxy journaling into j: it reports
// whether a finished generation still starts at its first event. The
// journal removes events a TTL after they were stored, the records a TTL
// after they were last written (at the generation's end, or later): near
// its TTL a completed key's record outlives its first events, and a reader
// would meet a gap where the answer began. Such a key is gone. A key younger
// than half the TTL (its events were all stored after it was made; half,
// for clocks that disagree) is kept without asking the journal. A failed
// generation the record counts no event of may have stored nothing (the
// journal failed it, its owner died before a non-streamed answer): it is
// kept, and answered as it ended.
func kept(j keeper) func(context.Context, string, resume.Record) (bool, error) {
	return func(ctx context.Context, id string, rec resume.Record) (bool, error) {
		if time.Since(rec.CreatedAt) < j.TTL()/2 {
			return true, nil
		}
		first, err := j.First(ctx, journal.Ref{ID: id, Gen: rec.Generation})
		switch {
		case errors.Is(err, journal.ErrNotFound):
			return rec.State != resume.Completed && rec.Events == 0, nil
		case err != nil:
			return true, err
		}
		return first.Offset == 1, nil
	}
}
