package engine

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Sealer is what salvage needs of the journal. journal.Journal implements it.
type Sealer interface {
	Seal(ctx context.Context, ref journal.Ref, ending func(last journal.Event, found bool) []journal.Event) (end journal.Event, sealed bool, err error)
	First(ctx context.Context, ref journal.Ref) (journal.Event, error)
	Note(ctx context.Context, ref journal.Ref) (string, error)
}

// Salvage implements resume.Salvager for a proxy journaling into a Sealer:
// it settles, in the journal, how a streamed generation whose owner's lease
// ran out ended. An owner that died after the upstream's terminal event was
// stored (before or after its end marker) but before it recorded the result
// left a complete generation: it is recorded completed — with its end
// marker appended if the owner did not get to it — and replayed, never
// generated again; it is priced by the usage its owner stored with the
// terminal event (usageNote) — the record's, kept there by owners before
// notes — and billed once its record is stored (Salvaged). Anything else is sealed with an
// owner_lost error and a failed end marker, which fences the owner if it
// is in fact still running (a NATS outage kept it from renewing its lease,
// say): it can no longer store a terminal event its readers would take for
// a result the record denies. Non-streamed answers are neither salvaged nor
// sealed: their status and content type are only in the record, and nobody
// reads them before it. The record's path names the format that decides
// what is terminal.
func (e *Engine) Salvage(ctx context.Context, id string, rec resume.Record) (resume.Result, bool, error) {
	j, ok := e.cfg.Journal.(Sealer)
	if !ok || !rec.Stream {
		return resume.Result{}, false, nil
	}
	proto, _ := ProtocolOf(rec.Path) // nil: a format this build does not serve has nothing terminal
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	end, _, err := j.Seal(ctx, ref, func(last journal.Event, found bool) []journal.Event {
		if found && proto != nil && !reserved(last.Type) && proto.Inspect(last.Type, last.Data).Terminal {
			return []journal.Event{{End: journal.EndCompleted}}
		}
		return []journal.Event{{Type: TypeError, Data: apierr.New(apierr.OwnerLost).BodyIn(ShapeOf(rec.Path))}, {End: journal.EndFailed}}
	})
	if err != nil {
		return resume.Result{}, false, err
	}
	if end.End != journal.EndCompleted {
		return resume.Result{}, false, nil
	}
	// A non-streamed answer (stored body chunks) completes too, but its
	// status and content type are only in the record.
	if first, err := j.First(ctx, ref); err != nil || first.Type == TypeBody {
		return resume.Result{}, false, err
	}
	usage := rec.Usage
	if note, err := j.Note(ctx, ref); err != nil {
		return resume.Result{}, false, err
	} else if u, ok := noteUsage(note); ok {
		usage = &u
	}
	res := resume.Result{State: resume.Completed, Events: end.Offset - 1, Status: http.StatusOK, ContentType: "text/event-stream",
		Usage: usage, Model: rec.Model}
	e.price(&res)
	return res, true, nil
}

// Salvaged implements resume.Salvager: a generation Salvage completed is
// billed as its owner would have billed it (bill), the attached requests
// its record counted as saved included, and its attempt log's last record
// gets its usage and cost (attemptUsage).
func (e *Engine) Salvaged(ctx context.Context, id string, rec resume.Record, attached uint64) {
	e.salvaged(ctx, id, rec, rec.PendingBy(attached))
}

// salvaged is Salvaged with the requests saved split by kind.
func (e *Engine) salvaged(ctx context.Context, id string, rec resume.Record, saved cost.SavedBy) {
	res := resume.Result{State: rec.State, Usage: rec.Usage, Model: rec.Model}
	entry := e.price(&res) // as Salvage priced it
	e.bill(res, entry, rec.Key, rec.Tenant, saved)
	e.attemptUsageOf(ctx, id, rec.Generation, res)
}

// usageNote is the note a streamed generation's terminal event is stored
// with (journal.Writer.AppendNoted): the usage the upstream reported,
// which may be in no journaled event (chat's usage chunk a client did not
// ask for). It is stored if, and only if, the terminal event is: an
// instance that salvages the generation bills exactly that.
func usageNote(u cost.Usage) string {
	b, _ := json.Marshal(u) // a struct of integers: never fails
	return string(b)
}

// noteUsage reads a usageNote; false for none.
func noteUsage(note string) (cost.Usage, bool) {
	var u cost.Usage
	if note == "" || json.Unmarshal([]byte(note), &u) != nil {
		return cost.Usage{}, false
	}
	return u, true
}
