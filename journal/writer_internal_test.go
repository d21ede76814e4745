package journal

import (
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

func newTestJournal(t *testing.T) *Journal {
	t.Helper()
	nc := newTestConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := Open(ctx, nc, Config{Memory: true, AppendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// newTestConn is a connection to an embedded server of the test's own.
func newTestConn(t *testing.T) *nats.Conn {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestSendRecognisesItsStoredMessage: a message sent again after its
// acknowledgement was lost is found stored (the writer's id on the
// subject's last message) and not stored twice; the chain goes on.
func TestSendRecognisesItsStoredMessage(t *testing.T) {
	j := newTestJournal(t)
	ctx := context.Background()
	ref := Ref{ID: "lostack", Gen: 1}
	w := j.NewWriter(ref, func(Event) {})
	defer w.Abort()
	first := []Event{{Offset: 1, Data: []byte("a")}}
	seq1, err := w.send(ctx, first, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	again, err := w.send(ctx, first, 0, "")
	if err != nil || again != seq1 {
		t.Fatalf("the first message sent again: seq %d, %v; want %d, nil", again, err, seq1)
	}
	next := []Event{{Offset: 2, Data: []byte("b")}, {Offset: 3, Data: []byte("c")}}
	seq2, err := w.send(ctx, next, seq1, "")
	if err != nil {
		t.Fatal(err)
	}
	again, err = w.send(ctx, next, seq1, "")
	if err != nil || again != seq2 {
		t.Fatalf("a later message sent again: seq %d, %v; want %d, nil", again, err, seq2)
	}
	info, err := j.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Fatalf("%d messages stored, want 2", info.State.Msgs)
	}
}

// TestSendStaleMessageIsRejected: a message delayed on the way (sent
// before an election, arriving after the chain moved on) is never stored
// behind later ones: it expects a last sequence that is no longer the
// last. The writer learns it was stored differently only if it is its own
// latest; otherwise the attempt fails within AppendTimeout.
func TestSendStaleMessageIsRejected(t *testing.T) {
	j := newTestJournal(t)
	ctx := context.Background()
	ref := Ref{ID: "stale", Gen: 1}
	w := j.NewWriter(ref, func(Event) {})
	defer w.Abort()
	seq1, err := w.send(ctx, []Event{{Offset: 1, Data: []byte("a")}}, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.send(ctx, []Event{{Offset: 2, Data: []byte("b")}}, seq1, ""); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = w.send(ctx, []Event{{Offset: 2, Data: []byte("stale b")}, {Offset: 3, Data: []byte("c")}}, seq1, "")
	if !isWrongLast(err) {
		t.Fatalf("stale message: %v, want a wrong-last-sequence failure", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the stale message failed after %s, beyond AppendTimeout", took)
	}
	last, err := j.Last(ctx, ref)
	if err != nil || string(last.Data) != "b" || last.Offset != 2 {
		t.Fatalf("last stored = %+v, %v; want offset 2 %q", last, err, "b")
	}
}

// TestSendFencedByAnotherWriter: a writer whose generation holds another
// writer's messages is fenced at once, first message or later.
func TestSendFencedByAnotherWriter(t *testing.T) {
	j := newTestJournal(t)
	ctx := context.Background()
	ref := Ref{ID: "other", Gen: 1}
	a := j.NewWriter(ref, func(Event) {})
	defer a.Abort()
	b := j.NewWriter(ref, func(Event) {})
	defer b.Abort()
	seq, err := a.send(ctx, []Event{{Offset: 1, Data: []byte("a")}}, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.send(ctx, []Event{{Offset: 1, Data: []byte("b")}}, 0, ""); !errors.Is(err, ErrFenced) {
		t.Fatalf("second writer's first message: %v, want ErrFenced", err)
	}
	if _, err := b.send(ctx, []Event{{Offset: 2, Data: []byte("b")}}, seq+5, ""); !errors.Is(err, ErrFenced) {
		t.Fatalf("second writer's later message: %v, want ErrFenced", err)
	}
}

// TestTakeBoundsFrames: a message packs events up to the frame limit
// (from the server's max_payload), and an event larger than it goes alone.
func TestTakeBoundsFrames(t *testing.T) {
	if got := frameLimit(1 << 20); got != maxFrame {
		t.Fatalf("frameLimit(1 MiB) = %d, want %d", got, maxFrame)
	}
	if got := frameLimit(64 << 10); got != 60<<10 {
		t.Fatalf("frameLimit(64 KiB) = %d, want 60 KiB", got)
	}
	if got := frameLimit(100); got != 1024 {
		t.Fatalf("frameLimit(100) = %d, want the 1 KiB floor", got)
	}
	w := &Writer{j: &Journal{maxFrame: 1000}}
	ev := func(n int) Event { return Event{Data: make([]byte, n)} }
	w.queue = []Event{ev(400), ev(400), ev(400), ev(5000), ev(10)}
	var sizes []int
	for len(w.queue) > 0 {
		b := w.take()
		sizes = append(sizes, len(b))
		w.queue = w.queue[len(b):]
	}
	if want := []int{2, 1, 1, 1}; !slices.Equal(sizes, want) {
		t.Fatalf("frames of %v events, want %v (each event counts %d bytes of overhead)", sizes, want, eventOverhead)
	}
}

// TestMaxEventSizeFitsOneMessage: an event of MaxEventSize bytes (type and
// data) is stored, alone in its message under the server's max_payload
// with room for the headers; an event over max_payload is refused by the
// server, so a limit above MaxEventSize could fail generations.
func TestMaxEventSizeFitsOneMessage(t *testing.T) {
	j := newTestJournal(t)
	if want := int(j.nc.MaxPayload()) - frameRoom - 2*binary.MaxVarintLen64; j.MaxEventSize() != want {
		t.Fatalf("MaxEventSize() = %d, want %d", j.MaxEventSize(), want)
	}
	write := func(id string, size int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := j.NewWriter(Ref{ID: id, Gen: 1}, func(Event) {})
		defer w.Abort()
		if err := w.Append(ctx, "type", make([]byte, 10)); err != nil {
			return err
		}
		if err := w.Append(ctx, "type", make([]byte, size-len("type"))); err != nil {
			return err
		}
		return w.End(ctx, EndCompleted)
	}
	if err := write("fits", j.MaxEventSize()); err != nil {
		t.Fatalf("an event of MaxEventSize bytes: %v", err)
	}
	if err := write("over", int(j.nc.MaxPayload())+1); err == nil {
		t.Fatal("an event over the server's max_payload was stored")
	}
}

// TestWriterQueueReused: the flusher takes the queue's head as it is (no
// copy) and, once it is stored, moves the rest to the front of the same
// array, clearing what it vacated: a writer's queue does not grow a new
// array as its head moves on. An emptied queue does not keep a burst's
// array.
func TestWriterQueueReused(t *testing.T) {
	j := &Journal{maxFrame: maxFrame}
	w := &Writer{j: j}
	push := func(from, n int) {
		for i := range n {
			w.queue = append(w.queue, Event{Offset: uint64(from + i), Seq: 1, Data: []byte("x")})
			w.queuedAt = append(w.queuedAt, time.Unix(int64(from+i), 0))
		}
	}
	push(1, 8)
	offset := uint64(1)
	for round := range 100 {
		batch := w.take()
		if len(batch) != len(w.queue) || &batch[0] != &w.queue[0] || cap(batch) != len(batch) {
			t.Fatalf("round %d: take gave %d events (cap %d), not the queue's head of %d", round, len(batch), cap(batch), len(w.queue))
		}
		push(int(offset)+len(w.queue), 3) // appended while the batch is sent
		kept, array := len(w.queue)-len(batch), &w.queue[:1][0]
		w.dequeue(len(batch))
		if len(w.queue) != kept || &w.queue[:1][0] != array || cap(w.queue) > 32 {
			t.Fatalf("round %d: %d events left in another array (room for %d); want %d in the same", round, len(w.queue), cap(w.queue), kept)
		}
		offset += uint64(len(batch))
		for i, ev := range w.queue {
			if ev.Offset != offset+uint64(i) || w.queuedAt[i].Unix() != int64(ev.Offset) {
				t.Fatalf("round %d: event %d is %d (queued at %d), want %d", round, i, ev.Offset, w.queuedAt[i].Unix(), offset+uint64(i))
			}
		}
		if rest := w.queue[len(w.queue):cap(w.queue)]; slices.ContainsFunc(rest, func(ev Event) bool { return ev.Data != nil }) {
			t.Fatalf("round %d: the vacated room still holds events", round)
		}
	}
	push(int(offset)+len(w.queue), 2*queueKeep)
	w.dequeue(len(w.queue))
	if w.queue != nil || w.queuedAt != nil {
		t.Fatalf("an emptied queue kept room for %d events", cap(w.queue))
	}
}
