package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Reader reads one generation from a position on, then follows live.
type Reader struct {
	j     *Journal
	ref   Ref
	after uint64
	it    jetstream.MessagesContext
	first bool
}

// Read starts reading ref's events after offset after. hint, when non-zero,
// is the stream sequence of the event at offset after: reading then starts
// right behind it instead of at the generation's first event. A wrong hint
// costs time, never correctness.
func (j *Journal) Read(ctx context.Context, ref Ref, after, hint uint64) (*Reader, error) {
	r := &Reader{j: j, ref: ref, after: after}
	if err := r.open(ctx, hint); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reader) open(ctx context.Context, hint uint64) error {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.ref.subject()}}
	if hint > 0 && r.after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = hint + 1
	}
	cons, err := r.j.js.OrderedConsumer(ctx, r.j.cfg.Stream, cfg)
	if err != nil {
		return fmt.Errorf("journal: read: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(512))
	if err != nil {
		return fmt.Errorf("journal: read: %w", err)
	}
	r.it = it
	r.first = hint > 0 && r.after > 0
	return nil
}

// Next returns the next event after the reader's position. It blocks until
// one is stored or ctx ends (then it returns ctx's error and the Reader stays
// usable).
func (r *Reader) Next(ctx context.Context) (Event, error) {
	for {
		m, err := r.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return Event{}, ctx.Err()
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return Event{}, ErrClosed
			}
			return Event{}, fmt.Errorf("journal: read: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		ev, ok := eventFrom(m.Headers(), m.Data(), meta.Sequence.Stream)
		if !ok {
			continue
		}
		if r.first {
			r.first = false
			if ev.Offset > r.after+1 { // the hint skipped events: start over
				r.it.Stop()
				if err := r.open(ctx, 0); err != nil {
					return Event{}, err
				}
				continue
			}
		}
		if ev.Offset <= r.after {
			continue
		}
		r.after = ev.Offset
		return ev, nil
	}
}

// Close stops the reader.
func (r *Reader) Close() { r.it.Stop() }
