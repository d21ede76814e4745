package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/nats-io/nats.go/jetstream"
)

// directMax is how many events a Reader fetches with direct gets before it
// switches to its consumer. Direct gets answer in well under a millisecond,
// while creating a consumer costs milliseconds: a resume gets its first
// events at once; a reader that needs more than half of them has its
// consumer made in the background meanwhile, for the bulk and the live part,
// and a short resume never makes one.
const directMax = 64

// readRetry bounds how long a Reader keeps recreating its consumer through
// a NATS failover (the node it reads from gone, a stream leader election)
// before Next returns the error.
const readRetry = 30 * time.Second

// openTimeout bounds one attempt to create a reader's consumer.
const openTimeout = 5 * time.Second

// consumerHeartbeat is how often an idle consumer's server says it is
// alive.
const consumerHeartbeat = 2 * time.Second

// consumerInactive removes a reader's consumer once nobody pulls from it.
// A live reader pulls continually, so only stopped readers' consumers go.
const consumerInactive = 5 * time.Second

// Reader reads one generation from a position on, then follows live.
// A Reader is used by one goroutine.
type Reader struct {
	j       *Journal
	ref     Ref
	subject string
	after   uint64    // offset of the last event returned
	hint    uint64    // the caller's hint, until it is verified
	next    uint64    // next stream sequence for a direct get
	direct  int       // direct gets left
	check   bool      // the first event read must be at most after+1, or the hint was wrong
	buf     []Event   // the rest of the last message read
	seq     uint64    // sequence of the last message read
	failing time.Time // when the consumer's current run of failures began

	retry      retrypolicy.RetryPolicy[any] // consumerRetry, made with the first consumer
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
// is the stream sequence of the message holding the event at offset after
// (its Event.Seq): reading then starts there instead of at the
// generation's first event. A wrong hint costs time, never correctness.
func (j *Journal) Read(_ context.Context, ref Ref, after, hint uint64) (*Reader, error) {
	r := &Reader{j: j, ref: ref, subject: ref.subject(), after: after, next: 1, direct: directMax}
	if hint > 0 && after > 0 {
		r.next, r.check, r.hint = hint, true, hint
	}
	r.consumerAt = r.next
	return r, nil
}

// open creates the ordered consumer in the background, starting at seq.
func (r *Reader) open(seq uint64) {
	r.closeConsumer()
	// A create request lost in a failover (the meta leader gone with it)
	// is never answered: bounded, it is made again (consumerRetry).
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
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
		// The server's heartbeats tell a stalled consumer (its node died,
		// a leader moved) from an idle one: nats.go replaces it after two
		// missed ones — in 4 s, not the default's 10.
		it, err := cons.Messages(jetstream.PullMaxMessages(512), jetstream.PullHeartbeat(consumerHeartbeat))
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
		if len(r.buf) == 0 {
			evs, err := r.read(ctx)
			if err != nil {
				return Event{}, err
			}
			r.buf = evs
			continue
		}
		ev := r.buf[0]
		r.buf = r.buf[1:]
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
	r.buf = nil
	r.check, r.hint, r.next, r.direct, r.consumerAt, r.seq = false, 0, 1, directMax, 1, 0
}

// consumerRetry is how a Reader rides out a NATS failover: a consumer
// that failed is dropped and made again behind the last message read,
// after a pause that grows with the time since the failures began (50 ms
// in the first second, doubling each second to 800 ms from the fifth on),
// until readRetry has passed. A closed reader is not retried.
func (r *Reader) consumerRetry() retrypolicy.RetryPolicy[any] {
	return retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool { return err != nil && !errors.Is(err, ErrClosed) }).
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
		OnRetryScheduled(func(failsafe.ExecutionScheduledEvent[any]) {
			r.j.readRetries.Add(1)
			r.closeConsumer()
			if r.seq > 0 {
				r.consumerAt, r.checkCons = r.seq+1, true
			}
		}).
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

// read fetches one stored message, by direct get while that phase lasts,
// then from the consumer, and returns its events (none for a message that
// is not an event frame).
func (r *Reader) read(ctx context.Context) ([]Event, error) {
	if r.it == nil && r.direct > 0 {
		m, err := r.j.stream.GetMsg(ctx, r.next, jetstream.WithGetMsgSubject(r.subject))
		switch {
		case err == nil:
			r.direct--
			if r.direct == directMax/2 {
				r.open(r.consumerAt)
			}
			r.next, r.seq = m.Sequence+1, m.Sequence
			f, _ := decode(m.Header, m.Data, m.Sequence)
			return f.events, nil
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case r.check && r.hintWrong(ctx):
			r.fromStart()
			return nil, nil
		default: // caught up with the live end, or direct get unavailable
			r.direct = 0
			return nil, nil
		}
	}
	// failsafe answers ctx's error once ctx has ended, even for an attempt
	// that got a message: the message is kept, or the next Next would find
	// it missing.
	if r.retry == nil { // a short resume never gets here
		r.retry = r.consumerRetry()
	}
	var m jetstream.Msg
	err := failsafe.With(r.retry).WithContext(ctx).Run(func() (err error) {
		m, err = r.consume(ctx)
		return err
	})
	if m == nil {
		return nil, err
	}
	// A run of failures may span calls (a ctx that ends leaves the Reader
	// usable): a message ends it.
	r.failing = time.Time{}
	meta, err := m.Metadata()
	if err != nil {
		return nil, nil
	}
	r.seq = meta.Sequence.Stream
	f, _ := decode(m.Headers(), m.Data(), meta.Sequence.Stream)
	return f.events, nil
}

// consume returns the next message from the consumer, made first if the
// reader has none.
func (r *Reader) consume(ctx context.Context) (jetstream.Msg, error) {
	if r.it == nil {
		if r.opening == nil {
			r.open(r.consumerAt)
		}
		select {
		case o := <-r.opening:
			r.opening = nil
			if o.err != nil {
				return nil, o.err
			}
			r.it = o.it
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m, err := r.it.Next(jetstream.NextContext(ctx))
	switch {
	case err == nil:
		return m, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, jetstream.ErrMsgIteratorClosed):
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("journal: read: %w", err)
}

// Close stops the reader.
func (r *Reader) Close() { r.closeConsumer() }
