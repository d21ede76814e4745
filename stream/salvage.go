package stream

import (
	"context"
	"errors"
	"net/http"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Salvage is the resume.Config.Salvage of a proxy journaling into j. An
// owner that dies after the upstream's terminal event is stored (before or
// after its end marker) but before it records the result leaves a complete
// generation: it is recorded completed — with its end marker appended if
// the owner did not get to it — and replayed, never generated again.
// Anything else (no terminal event, a non-streamed answer) is not salvaged.
func Salvage(j *journal.Journal) func(context.Context, string, resume.Record) (resume.Result, bool, error) {
	return func(ctx context.Context, id string, rec resume.Record) (resume.Result, bool, error) {
		if !rec.Stream {
			return resume.Result{}, false, nil
		}
		ref := journal.Ref{ID: id, Gen: rec.Generation}
		last, err := j.Last(ctx, ref)
		switch {
		case errors.Is(err, journal.ErrNotFound):
			return resume.Result{}, false, nil
		case err != nil:
			return resume.Result{}, false, err
		case !last.IsEnd() && isTerminal(last.Type, last.Data):
			if last, err = j.Seal(ctx, ref, journal.EndCompleted); err != nil {
				return resume.Result{}, false, err
			}
		}
		if last.End != journal.EndCompleted {
			return resume.Result{}, false, nil
		}
		// A non-streamed answer (stored body chunks) completes too, but its
		// status and content type are only in the record.
		if first, err := j.First(ctx, ref); err != nil || first.Type == typeBody {
			return resume.Result{}, false, err
		}
		return resume.Result{State: resume.Completed, Events: last.Offset - 1, Status: http.StatusOK, ContentType: "text/event-stream"}, true, nil
	}
}
