package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultWindow is how many appends a Writer keeps in flight.
const DefaultWindow = 256

// Writer appends the events of one generation. The first append is
// synchronous and fenced (the generation's subject must be empty); the rest
// are pipelined: Append returns once the publish is sent, and sink is called
// for every event, in order, once JetStream has acknowledged it (with Seq
// set). A Writer is used by one goroutine; sink must not block.
type Writer struct {
	j       *Journal
	ref     Ref
	subject string
	sink    func(Event)
	next    uint64

	inflight chan inflight
	done     chan struct{}

	mu  sync.Mutex
	err error
}

type inflight struct {
	ev  Event
	fut jetstream.PubAckFuture
}

// NewWriter starts a writer for ref. Call End or Abort to stop it.
func (j *Journal) NewWriter(ref Ref, sink func(Event)) *Writer {
	w := &Writer{
		j:        j,
		ref:      ref,
		subject:  ref.subject(),
		sink:     sink,
		inflight: make(chan inflight, DefaultWindow),
		done:     make(chan struct{}),
	}
	go w.acks()
	return w
}

// Appended is the number of events appended so far (acknowledged or not).
func (w *Writer) Appended() uint64 { return w.next }

// Append journals one event. It fails with the writer's first error, e.g.
// ErrFenced when another writer already started this generation.
func (w *Writer) Append(ctx context.Context, typ string, data []byte) error {
	return w.publish(ctx, Event{Type: typ, Data: data})
}

// End appends the end marker and waits until every append is acknowledged.
// It returns the first error of any append.
func (w *Writer) End(ctx context.Context, state string) error {
	if err := w.publish(ctx, Event{End: state}); err != nil {
		w.Abort()
		return err
	}
	close(w.inflight)
	select {
	case <-w.done:
	case <-ctx.Done():
		return fmt.Errorf("journal: waiting for acks: %w", ctx.Err())
	}
	return w.Err()
}

// Abort stops the writer without an end marker; unacknowledged events may
// or may not be stored. It is safe to call after End.
func (w *Writer) Abort() {
	w.fail(ErrClosed)
	defer func() { _ = recover() }() // inflight may already be closed by End
	close(w.inflight)
}

// Err returns the writer's first error.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *Writer) publish(ctx context.Context, ev Event) error {
	if err := w.Err(); err != nil {
		return err
	}
	w.next++
	ev.Offset = w.next
	if ev.Offset == 1 {
		return w.first(ctx, ev)
	}
	// No automatic re-send: a re-sent append would be stored after later
	// ones, out of order. A failed append fails the generation instead.
	fut, err := w.j.js.PublishMsgAsync(ev.msg(w.subject), jetstream.WithStallWait(DefaultStallWait), jetstream.WithRetryAttempts(0))
	if err != nil {
		err = fmt.Errorf("journal: publish: %w", err)
		w.fail(err)
		return err
	}
	select {
	case w.inflight <- inflight{ev: ev, fut: fut}:
		return nil
	case <-ctx.Done():
		w.fail(ctx.Err())
		return ctx.Err()
	}
}

// first publishes a generation's first event synchronously, expecting its
// subject to be empty: it is the fence. Nothing else is in flight until it
// is acknowledged, so a writer that lost the race stores nothing.
func (w *Writer) first(ctx context.Context, ev Event) error {
	// Bounded on its own: the caller's context may be long, and a request
	// lost with its connection is never answered.
	ctx, cancel := context.WithTimeout(ctx, DefaultAckTimeout)
	defer cancel()
	ack, err := w.j.js.PublishMsg(ctx, ev.msg(w.subject), jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithRetryAttempts(0))
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			err = ErrFenced
		} else {
			err = fmt.Errorf("journal: append 1: %w", err)
		}
		w.fail(err)
		return err
	}
	ev.Seq = ack.Sequence
	w.sink(ev)
	return nil
}

func (w *Writer) acks() {
	defer close(w.done)
	for in := range w.inflight {
		if w.Err() != nil {
			continue // drain; the generation is already lost
		}
		select {
		case ack := <-in.fut.Ok():
			in.ev.Seq = ack.Sequence
			w.sink(in.ev)
		case err := <-in.fut.Err():
			w.fail(fmt.Errorf("journal: append %d: %w", in.ev.Offset, err))
		}
	}
}
