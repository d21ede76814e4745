package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// A Reader reads the stored part of a generation by batched direct gets
// (any replica answers them; they cost the server no state) and follows
// the live part through its instance's shared topic (live.go): a reader
// holds no JetStream consumer, so readers are bounded by memory, not by a
// server's consumer limit.
const (
	// getBatch and getBytes bound one batched get: a long replay takes a
	// round trip per getBatch messages or getBytes bytes. A reader's first
	// get asks for one message: a resume's first event comes at once,
	// before the bulk.
	getBatch = 256
	getBytes = 4 << 20
	// getTimeout bounds one batched get.
	getTimeout = 5 * time.Second
)

// readRetry bounds how long a Reader keeps asking through a NATS failover
// (the node it reads from gone, a stream leader election) before Next
// returns the error.
const readRetry = 30 * time.Second

// errNoAnswer is a batched get that got nothing at all: not even the
// stream's "no messages" (its request lost, or no replica answering).
var errNoAnswer = errors.New("journal: read: no answer")

// Reader reads one generation from a position on, then follows live.
// A Reader is used by one goroutine.
type Reader struct {
	j       *Journal
	ref     Ref
	subject string
	after   uint64    // offset of the last event returned
	hint    uint64    // the caller's hint, until it is verified
	check   bool      // the first event read must be at most after+1, or the hint was wrong
	next    uint64    // the stream sequence the next get starts at
	seq     uint64    // sequence of the last message read (0: none yet)
	buf     []Event   // the rest of the message being read
	skipped Event     // the last event skipped as at or before the position
	from    uint64    // the position Read was given, and its hint: the
	fromSeq uint64    // cursor's event
	more    [][]Event // the events of the messages read after it
	gets    bool      // reading the stream (not yet caught up with the topic)
	live    *topic    // joined once the reader first caught up
	got     int       // messages read by gets so far
	failing time.Time // when the current run of failed gets began
	retry   retrypolicy.RetryPolicy[any]
}

// Read starts reading ref's events after offset after. hint, when non-zero,
// is the stream sequence of the message holding the event at offset after
// (its Event.Seq): reading then starts there instead of at the
// generation's first event. A wrong hint costs time, never correctness.
func (j *Journal) Read(_ context.Context, ref Ref, after, hint uint64) (*Reader, error) {
	r := &Reader{j: j, ref: ref, subject: ref.subject(), after: after, next: 1, gets: true, from: after, fromSeq: hint}
	if hint > 0 && after > 0 {
		r.next, r.check, r.hint = hint, true, hint
	}
	r.retry = r.getRetry()
	return r, nil
}

// Next returns the next event after the reader's position. It blocks until
// one is stored or ctx ends (then it returns ctx's error and the Reader stays
// usable). The generation's end marker is returned even when the position
// is past it: nothing will follow it. A failed generation's last event
// (the reason it failed) comes before it to a reader positioned at or past
// that event, unless Read's position and hint name it: a cursor may name
// an event its owner showed before the journal lost it.
func (r *Reader) Next(ctx context.Context) (Event, error) {
	for {
		if len(r.buf) == 0 {
			if len(r.more) == 0 {
				msgs, err := r.read(ctx)
				if err != nil {
					return Event{}, err
				}
				r.more = msgs
			}
			if len(r.more) > 0 {
				r.buf, r.more = r.more[0], r.more[1:]
			}
			continue
		}
		ev := r.buf[0]
		r.buf = r.buf[1:]
		if ev.Offset > r.after+1 && r.check {
			// The hint pointed past the events we need: read the generation
			// from its start (offsets below the position are skipped).
			r.fromStart()
			continue
		}
		r.check = false
		if reason := r.skipped; ev.IsEnd() && ev.End == EndFailed && reason.Offset+1 == ev.Offset && !reason.IsEnd() &&
			(reason.Offset != r.from || reason.Seq != r.fromSeq) {
			// A cursor at or past a failed generation's last event that
			// does not name it: an event its owner showed before the
			// journal stored it (and lost it). The reason the generation
			// failed is news to this reader.
			r.skipped = Event{}
			r.buf = append([]Event{ev}, r.buf...)
			return reason, nil
		}
		if ev.IsEnd() && ev.Offset <= r.after {
			return ev, nil
		}
		if ev.Offset <= r.after {
			r.skipped = ev
			continue
		}
		if ev.Offset > r.after+1 {
			// Offsets are contiguous; a hole means an append was lost.
			return Event{}, fmt.Errorf("%w: want offset %d, stored %d", ErrGap, r.after+1, ev.Offset)
		}
		r.after = ev.Offset
		return ev, nil
	}
}

// Buffered reports whether the reader holds events it has read but not
// returned. Once Next has returned an event, Next then returns at once
// (offsets are contiguous from there: nothing held is skipped).
func (r *Reader) Buffered() bool { return len(r.buf) > 0 || len(r.more) > 0 }

// fromStart drops a wrong hint: the generation is read from its first event.
func (r *Reader) fromStart() {
	r.buf, r.more = nil, nil
	r.check, r.hint, r.next, r.seq, r.gets = false, 0, 1, 0, true
}

// read returns the events of the next messages, one slice per message:
// from the stream while the reader is behind, then from the topic, waiting
// there for the next one.
func (r *Reader) read(ctx context.Context) ([][]Event, error) {
	for {
		if r.gets {
			evs, n, err := r.getRetrying(ctx)
			switch {
			case err != nil:
				return nil, err
			case n > 0:
				return evs, nil
			case r.check && r.hintWrong(ctx):
				r.fromStart()
				continue
			}
			// Caught up. The first time, join the topic, then look once
			// more: what was stored before the join was not heard.
			r.gets = false
			if r.live == nil {
				t, err := r.j.live.join(r.subject)
				if err != nil {
					return nil, fmt.Errorf("journal: read: %w", err)
				}
				r.live, r.gets = t, true
			}
			continue
		}
		p, ok, behind, changed := r.live.after(r.seq)
		switch {
		case ok:
			r.seq, r.next = p.seq, p.seq+1
			if len(p.events) > 0 && r.check && p.events[0].Offset > r.after+1 {
				r.fromStart()
				continue
			}
			return [][]Event{p.events}, nil
		case behind:
			r.gets = true
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// getRetrying is get, asked again through failures (getRetry).
func (r *Reader) getRetrying(ctx context.Context) (evs [][]Event, n int, err error) {
	// failsafe answers ctx's error once ctx has ended, even for an attempt
	// that got messages: they are kept, or the next Next would find them
	// missing.
	err = failsafe.With(r.retry).WithContext(ctx).Run(func() error {
		evs, n, err = r.get(ctx)
		return err
	})
	if n > 0 || err == nil {
		// A run of failures may span calls (a ctx that ends leaves the
		// Reader usable): an answer ends it.
		r.failing = time.Time{}
		return evs, n, nil
	}
	return nil, 0, err
}

// get reads the messages stored from r.next on, up to a batch, and returns
// their events (a slice per message: they are not copied) and how many
// messages it read (0: none is stored yet).
func (r *Reader) get(ctx context.Context) (evs [][]Event, n int, err error) {
	gctx, cancel := context.WithTimeout(ctx, getTimeout)
	defer cancel()
	batch := getBatch
	if r.got == 0 {
		batch = 1
	}
	msgs, err := jetstreamext.GetBatch(gctx, r.j.js, r.j.cfg.Stream, batch,
		jetstreamext.GetBatchSeq(r.next), jetstreamext.GetBatchSubject(r.subject), jetstreamext.GetBatchMaxBytes(getBytes))
	if err != nil {
		return nil, 0, fmt.Errorf("journal: read: %w", err)
	}
	for m, err := range msgs {
		switch {
		case errors.Is(err, jetstreamext.ErrNoMessages):
			return evs, n, nil
		case err != nil && n > 0:
			return evs, n, nil // what was read is kept; the next get meets the failure again
		case err != nil:
			return nil, 0, fmt.Errorf("journal: read: %w", err)
		}
		n++
		r.got++
		r.seq, r.next = m.Sequence, m.Sequence+1
		// Events before the reader's position are not made, but the one at
		// it is: Next looks at it (a failed generation's stored reason).
		f, _ := decodeFrom(m.Header, m.Data, m.Sequence, r.after)
		evs = append(evs, f.events)
	}
	switch {
	case n > 0: // the batch's end (or a partial batch: the rest is asked for next)
		return evs, n, nil
	case ctx.Err() != nil:
		return nil, 0, ctx.Err()
	}
	// Not even "no messages": the request was lost, or no replica answered in time.
	return nil, 0, errNoAnswer
}

// getRetry is how a Reader rides out a NATS failover: a get that failed is
// asked again after a pause that grows with the time since the failures
// began (50 ms in the first second, doubling each second to 800 ms from
// the fifth on), until readRetry has passed.
func (r *Reader) getRetry() retrypolicy.RetryPolicy[any] {
	return retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool { return err != nil && !errors.Is(err, context.Canceled) }).
		// failsafe calls OnFailure before AbortIf: the run has begun by
		// the time its length is measured.
		OnFailure(func(failsafe.ExecutionEvent[any]) {
			if r.failing.IsZero() {
				r.failing = time.Now()
			}
		}).
		AbortIf(func(any, error) bool { return time.Since(r.failing) > readRetry }).
		WithMaxAttempts(-1).
		WithDelayFunc(func(failsafe.ExecutionAttempt[any]) time.Duration {
			return 50 * time.Millisecond << min(time.Since(r.failing)/time.Second, 4)
		}).
		OnRetryScheduled(func(failsafe.ExecutionScheduledEvent[any]) { r.j.readRetries.Add(1) }).
		Build()
}

// hintWrong reports whether nothing follows the hint because the hint does
// not name the message holding this generation's event at offset after (a
// hint past the end would otherwise wait forever for events that were
// stored before it).
func (r *Reader) hintWrong(ctx context.Context) bool {
	m, err := r.j.stream.GetMsg(ctx, r.hint, jetstream.WithGetMsgSubject(r.subject))
	if err != nil {
		return ctx.Err() == nil
	}
	f, ok := decode(m.Header, m.Data, m.Sequence)
	return !ok || m.Sequence != r.hint || f.events[0].Offset > r.after || f.last() < r.after
}

// Close stops the reader.
func (r *Reader) Close() {
	if r.live != nil {
		r.j.live.leave(r.live)
		r.live = nil
	}
}
