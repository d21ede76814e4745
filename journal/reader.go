package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/fair"
)

// A Reader reads the stored part of a generation by batched direct gets
// (any replica answers them; they cost the server no state) and follows
// the live part through its instance's shared topic (live.go): a reader
// holds no JetStream consumer, so readers are bounded by memory, not by a
// server's consumer limit.
const (
	// getBatch and getBytes bound one batched get: a long replay takes a
	// round trip per getBatch messages or getBytes bytes (Config.MaxReads
	// of them in flight on an instance). A resume's first get asks for
	// one message, or two when it seeks by a hint (the hint names a
	// message stored before the one holding the events after the cursor,
	// most often the one just before): its first event comes at once,
	// before the bulk. A get in the short reads' lane asks for at most
	// headBytes (reads.go), a reader's first from the start too: a short
	// replay comes whole in one round trip.
	getBatch = 256
	getBytes = 1 << 20
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
	more    []unread  // the messages read after it
	gets    bool      // reading the stream (not yet caught up with the topic)
	live    *topic    // joined once the reader first caught up
	got     int       // messages read by gets so far
	bytes   int       // their size
	pending uint64    // messages of the generation after the last one read, as the stream said then
	failing time.Time // when the current run of failed gets began
	retry   retrypolicy.RetryPolicy[any]
	tenant  string       // whose turns its gets take (For)
	head    *fair.Stream // its turns in the short reads' lane, once it took one
	long    *fair.Stream // in the long reads' lane
}

// A ReadOption configures a Reader.
type ReadOption func(*Reader)

// For has a Reader's gets take their turns (reads.go) as tenant's: the
// turns go round the tenants whose readers wait. Without it, a reader's
// turns are those of the tenant "".
func For(tenant string) ReadOption { return func(r *Reader) { r.tenant = tenant } }

// Read starts reading ref's events after offset after. hint, when non-zero,
// is the event's Event.Seq, a stream sequence at or before the message
// holding the event at offset after: reading then starts there instead of
// at the generation's first event. A wrong hint costs time, never
// correctness.
func (j *Journal) Read(_ context.Context, ref Ref, after, hint uint64, opts ...ReadOption) (*Reader, error) {
	r := &Reader{j: j, ref: ref, subject: ref.subject(), after: after, next: 1, gets: true, from: after, fromSeq: hint}
	for _, o := range opts {
		o(r)
	}
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
				r.buf, r.more = r.more[0].events(r.after), r.more[1:]
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

// Live reports whether the reader has caught up with what was stored and
// follows the generation as it is written (its instance's topic), rather
// than reading what was stored before it came.
func (r *Reader) Live() bool { return !r.gets && r.live != nil }

// fromStart drops a wrong hint: the generation is read from its first event.
func (r *Reader) fromStart() {
	r.buf, r.more = nil, nil
	r.check, r.hint, r.next, r.seq, r.gets = false, 0, 1, 0, true
}

// unread is a message a Reader read and has not reached yet: its events,
// or the stored message, decoded only when the reader reaches it — from
// its position then: a get brings up to a batch of messages, and a resume
// into a long generation makes none of the events before its cursor.
type unread struct {
	evs []Event   // the events (the topic's), when msg is nil
	msg *nats.Msg // a stored message
	seq uint64    // its stream sequence
}

// events returns u's events from offset after on: the one at after is
// kept, Next looks at it (a failed generation's stored reason). A message
// that is not a frame has none.
func (u unread) events(after uint64) []Event {
	if u.msg == nil {
		return u.evs
	}
	f, _ := decodeFrom(u.msg.Header, u.msg.Data, u.seq, after)
	return f.events
}

// read returns the next messages read, in order: from the stream while the
// reader is behind, then from the topic, waiting there for the next one.
func (r *Reader) read(ctx context.Context) ([]unread, error) {
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
			return []unread{{evs: p.events}}, nil
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
func (r *Reader) getRetrying(ctx context.Context) (evs []unread, n int, err error) {
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
// them and how many it read (0: none is stored yet). It waits for its turn
// among the instance's gets first (lanes, For); getTimeout bounds the get
// itself.
func (r *Reader) get(ctx context.Context) (evs []unread, n int, err error) {
	// A read's size is unknown until its first message says how many
	// follow; the bytes left are guessed at the average of those read.
	short := r.got == 0 || r.pending*uint64(r.bytes/r.got) <= headBytes
	q := r.lane(short)
	if err := q.Wait(ctx); err != nil {
		return nil, 0, err
	}
	defer q.Done()
	gctx, cancel := context.WithTimeout(ctx, getTimeout)
	defer cancel()
	batch, size := getBatch, getBytes
	if short {
		size = headBytes
	}
	if r.got == 0 {
		switch {
		case r.check: // by a hint: its message, and the one after
			batch, size = 2, 2*(r.j.maxFrame+frameRoom)
		case r.after > 0: // a resume without a hint: the first message alone
			batch = 1
		}
	}
	n, err = r.j.getBatch(gctx, r.j.readConn(short), r.subject, r.next, batch, size, func(m *nats.Msg, seq, pending uint64) {
		r.got++
		r.bytes += len(m.Data)
		r.seq, r.next, r.pending = seq, seq+1, pending
		evs = append(evs, unread{msg: m, seq: seq})
	})
	switch {
	case n > 0: // what was read is kept (after a failure, the next get meets it again)
		return evs, n, nil
	case err == nil: // none stored yet
		return nil, 0, nil
	case ctx.Err() != nil:
		return nil, 0, ctx.Err()
	}
	// errNoAnswer: the request was lost, or no replica answered in time.
	return nil, 0, err
}

// lane is the reader's turns in the short reads' lane or the long ones'.
func (r *Reader) lane(short bool) *fair.Stream {
	if short {
		if r.head == nil {
			r.head = r.j.reads.head.Stream(r.tenant)
		}
		return r.head
	}
	if r.long == nil {
		r.long = r.j.reads.long.Stream(r.tenant)
	}
	return r.long
}

// getRetry is how a Reader rides out a NATS failover: a get that failed is
// asked again after a pause that grows with the time since the failures
// began (50 ms in the first second, doubling each second to 800 ms from
// the fifth on), until readRetry has passed. A get whose reply the
// connection dropped is not a failure of the journal but of a busy
// instance: it is asked again after 50 ms without starting the run of
// failures. (A get waits for its turn as long as its reader's context
// lets it: a long queue delays a reader and never fails it.)
func (r *Reader) getRetry() retrypolicy.RetryPolicy[any] {
	return retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool { return err != nil && !errors.Is(err, context.Canceled) }).
		// failsafe calls OnFailure before AbortIf: the run has begun by
		// the time its length is measured.
		OnFailure(func(e failsafe.ExecutionEvent[any]) {
			if r.failing.IsZero() && !busy(e.LastError()) {
				r.failing = time.Now()
			}
		}).
		AbortIf(func(any, error) bool { return !r.failing.IsZero() && time.Since(r.failing) > readRetry }).
		WithMaxAttempts(-1).
		WithDelayFunc(func(a failsafe.ExecutionAttempt[any]) time.Duration {
			if r.failing.IsZero() {
				return 50 * time.Millisecond
			}
			return 50 * time.Millisecond << min(time.Since(r.failing)/time.Second, 4)
		}).
		OnRetryScheduled(func(failsafe.ExecutionScheduledEvent[any]) { r.j.readRetries.Add(1) }).
		Build()
}

// busy reports whether a get failed for want of the instance's room, not
// the journal's: its reply dropped by the connection.
func busy(err error) bool { return errors.Is(err, nats.ErrSlowConsumer) }

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
