package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// directMax is how many events a Reader fetches with direct gets before it
// switches to its consumer. Direct gets answer in well under a millisecond,
// while creating a consumer costs milliseconds: a resume gets its first
// events at once; a reader that needs more than half of them has its
// consumer made in the background meanwhile, for the bulk and the live part,
// and a short resume never makes one.
const directMax = 64

// consumerInactive removes a reader's consumer once nobody pulls from it.
// A live reader pulls continually, so only stopped readers' consumers go.
const consumerInactive = 5 * time.Second

// Reader reads one generation from a position on, then follows live.
// A Reader is used by one goroutine.
type Reader struct {
	j       *Journal
	ref     Ref
	subject string
	after   uint64 // offset of the last event returned
	hint    uint64 // the caller's hint, until it is verified
	next    uint64 // next stream sequence for a direct get
	direct  int    // direct gets left
	check   bool   // the first event read must be after+1, or the hint was wrong

	opening    chan opened
	stopOpen   context.CancelFunc
	it         jetstream.MessagesContext
	checkCons  bool
	consumerAt uint64
}

type opened struct {
	it  jetstream.MessagesContext
	err error
}

// Read starts reading ref's events after offset after. hint, when non-zero,
// is the stream sequence of the event at offset after: reading then starts
// right behind it instead of at the generation's first event. A wrong hint
// costs time, never correctness.
func (j *Journal) Read(_ context.Context, ref Ref, after, hint uint64) (*Reader, error) {
	r := &Reader{j: j, ref: ref, subject: ref.subject(), after: after, next: 1, direct: directMax}
	if hint > 0 && after > 0 {
		r.next, r.check, r.hint = hint+1, true, hint
	}
	r.consumerAt = r.next
	return r, nil
}

// open creates the ordered consumer in the background, starting at seq.
func (r *Reader) open(seq uint64) {
	r.closeConsumer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	ch := make(chan opened, 1)
	r.opening, r.stopOpen, r.consumerAt, r.checkCons = ch, cancel, seq, seq > 1
	go func() {
		// A stopped reader's consumer must not linger: the server caps
		// consumers per stream (1,000), and the default threshold is 5 min.
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.subject}, InactiveThreshold: consumerInactive}
		if seq > 1 {
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = seq
		}
		cons, err := r.j.js.OrderedConsumer(ctx, r.j.cfg.Stream, cfg)
		if err != nil {
			ch <- opened{err: fmt.Errorf("journal: read: %w", err)}
			return
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(512))
		ch <- opened{it: it, err: err}
	}()
}

func (r *Reader) closeConsumer() {
	if r.it != nil {
		r.it.Stop()
		r.it = nil
	}
	if r.opening != nil {
		r.stopOpen()
		if o := <-r.opening; o.it != nil {
			o.it.Stop()
		}
		r.opening = nil
	}
}

// Next returns the next event after the reader's position. It blocks until
// one is stored or ctx ends (then it returns ctx's error and the Reader stays
// usable).
func (r *Reader) Next(ctx context.Context) (Event, error) {
	for {
		ev, ok, err := r.read(ctx)
		if err != nil {
			return Event{}, err
		}
		if !ok {
			continue
		}
		if ev.Offset > r.after+1 && (r.check || (r.checkCons && r.it != nil)) {
			// The hint pointed past the events we need: read the generation
			// from its start (offsets below the position are skipped).
			r.fromStart()
			continue
		}
		r.check = false
		if r.it != nil {
			r.checkCons = false
		}
		if ev.Offset <= r.after {
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

// fromStart drops a wrong hint: the generation is read from its first event.
func (r *Reader) fromStart() {
	r.closeConsumer()
	r.check, r.hint, r.next, r.direct, r.consumerAt = false, 0, 1, directMax, 1
}

// hintWrong reports whether nothing follows the hint because the hint does
// not name this generation's event at offset after (a hint past the end
// would otherwise wait forever for events that were stored before it).
func (r *Reader) hintWrong(ctx context.Context) bool {
	m, err := r.j.stream.GetMsg(ctx, r.hint, jetstream.WithGetMsgSubject(r.subject))
	if err != nil {
		return ctx.Err() == nil
	}
	ev, ok := eventFrom(m.Header, m.Data, m.Sequence)
	return !ok || m.Sequence != r.hint || ev.Offset != r.after
}

// read fetches one stored message, by direct get while that phase lasts,
// then from the consumer. ok is false for a message that is not an event.
func (r *Reader) read(ctx context.Context) (Event, bool, error) {
	if r.it == nil && r.direct > 0 {
		m, err := r.j.stream.GetMsg(ctx, r.next, jetstream.WithGetMsgSubject(r.subject))
		switch {
		case err == nil:
			r.direct--
			if r.direct == directMax/2 {
				r.open(r.consumerAt)
			}
			r.next = m.Sequence + 1
			ev, ok := eventFrom(m.Header, m.Data, m.Sequence)
			return ev, ok, nil
		case ctx.Err() != nil:
			return Event{}, false, ctx.Err()
		case r.check && r.hintWrong(ctx):
			r.fromStart()
			return Event{}, false, nil
		default: // caught up with the live end, or direct get unavailable
			r.direct = 0
			return Event{}, false, nil
		}
	}
	if r.it == nil {
		if r.opening == nil {
			r.open(r.consumerAt)
		}
		select {
		case o := <-r.opening:
			r.opening = nil
			if o.err != nil {
				return Event{}, false, o.err
			}
			r.it = o.it
		case <-ctx.Done():
			return Event{}, false, ctx.Err()
		}
	}
	m, err := r.it.Next(jetstream.NextContext(ctx))
	if err != nil {
		if ctx.Err() != nil {
			return Event{}, false, ctx.Err()
		}
		if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
			return Event{}, false, ErrClosed
		}
		return Event{}, false, fmt.Errorf("journal: read: %w", err)
	}
	meta, err := m.Metadata()
	if err != nil {
		return Event{}, false, nil
	}
	ev, ok := eventFrom(m.Headers(), m.Data(), meta.Sequence.Stream)
	return ev, ok, nil
}

// Close stops the reader.
func (r *Reader) Close() { r.closeConsumer() }
