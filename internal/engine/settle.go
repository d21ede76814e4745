package engine

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/nats-io/nats.go"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// A writer that gave up — JetStream did not answer within the append
// timeout, through a NATS stall as long as it — does not know what it
// stored: the message it was sending may be stored when the server answers
// again, and it may hold the rest of the generation, the terminal event
// and the end marker included. Recording the generation failed then would
// leave a journal whose readers get a result the record denies, and whose
// key generates (and bills) again. So the generation is settled in the
// journal first: sealed right after whatever is stored by then (Seal: an
// append that expects that event to be the last, so a message still on its
// way can no longer be stored after it). What the journal then holds is
// the outcome: a stored terminal event is a result — the generation
// completed — and anything else failed with journal_failure. Should the
// seal not get through either, the owner records nothing and lets its
// lease run out: whoever finds it lapsed settles it the same way
// (Salvage).

// sealTry bounds one seal attempt; a message sent to a stream leader that
// died is never answered.
const sealTry = 3 * time.Second

// settled is how a generation whose writer gave up ended, as the journal
// settled it.
type settled struct {
	res resume.Result
	// known: the journal was settled; false when the seal did not get
	// through either (the lease is then abandoned).
	known bool
}

// settle seals p's generation after whatever its writer w stored, and
// returns the outcome the journal holds; res is what the generation
// produced, had it all been stored. The tail's readers get the events
// stored late and the end, as stored.
func (p *pump) settle(ctx context.Context, w *journal.Writer, res resume.Result) settled {
	failed := resume.Result{State: resume.Failed, Status: res.Status, ContentType: res.ContentType, Error: apierr.JournalFailure, Usage: res.Usage, Basis: res.Basis}
	j, ok := p.e.cfg.Journal.(Sealer)
	if !ok {
		return settled{res: failed, known: true}
	}
	reason := apierr.New(apierr.JournalFailure).BodyIn(p.shape())
	proto := p.g.Protocol
	var end journal.Event
	var sealed bool // a seal stored the end: not the writer
	rp := retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool {
			// A closed connection (this instance is going) will not answer
			// again: the lease is left to run out at once.
			return journal.Unanswered(err) && !errors.Is(err, nats.ErrConnectionClosed)
		}).
		WithBackoff(100*time.Millisecond, 2*time.Second).
		WithMaxAttempts(-1).
		WithMaxDuration(p.e.cfg.Journal.AppendTimeout()).
		Build()
	err := failsafe.With(rp).WithContext(ctx).Run(func() error {
		tctx, cancel := context.WithTimeout(ctx, sealTry)
		defer cancel()
		var err error
		end, sealed, err = j.Seal(tctx, p.g.Ref, func(last journal.Event, found bool) []journal.Event {
			if found && proto != nil && !reserved(last.Type) && proto.Inspect(last.Type, last.Data).Terminal {
				return []journal.Event{{End: journal.EndCompleted}}
			}
			return []journal.Event{{Type: TypeError, Data: reason}, {End: journal.EndFailed}}
		})
		return err
	})
	if err != nil && !journal.Unanswered(err) {
		// JetStream answers, and refuses the seal (its reason does not fit,
		// say): what it holds now is final, and no terminal event is
		// stored after what this writer saw stored.
		p.log.Error("sealing a generation whose writer gave up was refused", "gen", p.g.Ref.Gen, "err", err)
		p.tail.fail(reason)
		failed.Events = min(countEvents(w.Appended()), w.Stored())
		return settled{res: failed, known: true}
	}
	if err != nil {
		p.log.Error("settling the journal of a generation whose writer gave up failed; its lease is left to run out", "gen", p.g.Ref.Gen, "err", err)
		// Its outcome is unknown until the journal answers: readers here
		// are told so, as readers of a journal that does not answer are.
		p.tail.unsettled(apierr.New(apierr.Unavailable).BodyIn(p.shape()))
		return settled{res: failed}
	}
	// The events stored late are the writer's unacknowledged ones up to
	// the seal's end marker: all of them when it is the writer's own — not
	// when the seal appended one at the same offset (its reason, then its
	// end, right after the writer's events stored before those it never
	// sent: a completed generation's [DONE] among them).
	pending := w.Unstored()
	if n := len(pending); !sealed && n > 0 && pending[n-1].IsEnd() && pending[n-1].Offset == end.Offset {
		for _, ev := range pending {
			p.tail.store(ev)
		}
		res.Events = end.Offset - 1
		if end.End == journal.EndCompleted {
			res.State, res.Error = resume.Completed, ""
		}
		p.log.Warn("a generation whose writer gave up was stored whole", "gen", p.g.Ref.Gen, "state", res.State)
		return settled{res: res, known: true}
	}
	if end.End == journal.EndCompleted { // its terminal event stored late; the seal ended it
		for _, ev := range pending {
			if ev.Offset < end.Offset {
				p.tail.store(ev)
			}
		}
		p.tail.store(end)
		res.State, res.Error, res.Events = resume.Completed, "", end.Offset-1
		p.log.Warn("a generation whose writer gave up had its terminal event stored: recorded completed", "gen", p.g.Ref.Gen)
		return settled{res: res, known: true}
	}
	for _, ev := range pending { // before the seal's reason and end marker
		if ev.Offset < end.Offset-1 {
			p.tail.store(ev)
		}
	}
	p.tail.fail(reason) // after what was stored; a reader resuming from it gets the stored reason
	failed.Events = end.Offset - 1
	return settled{res: failed, known: true}
}
