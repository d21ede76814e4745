package journal

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReaderRetriesItsGets: a reader whose gets fail (its stream gone, as
// for a while in a failover) asks again, counting
// each retry in ReadRetries; a ctx that ends meanwhile returns ctx's error
// and leaves the reader usable, its run of failures still going; once the
// stream is back the reader reads on, and a message ends the run.
func TestReaderRetriesItsGets(t *testing.T) {
	j := newTestJournal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := j.js.DeleteStream(ctx, j.cfg.Stream); err != nil {
		t.Fatal(err)
	}
	ref := Ref{ID: "remade", Gen: 1}
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	if _, err := r.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next without a stream = %v, want the context's deadline", err)
	}
	retried := j.Stats().ReadRetries
	t.Logf("%d retries in 500ms without a stream", retried)
	if retried < 2 {
		t.Fatalf("ReadRetries = %d after 500ms of failures, want a retry every 50ms", retried)
	}
	if r.failing.IsZero() {
		t.Fatal("the run of failures ended with the context")
	}

	if _, _, err := create(ctx, j.js, j.cfg, jetstream.MemoryStorage); err != nil {
		t.Fatal(err)
	}
	w := j.NewWriter(ref, func(Event) {})
	if err := w.Append(ctx, "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.End(ctx, EndCompleted); err != nil {
		t.Fatal(err)
	}
	ev, err := r.Next(ctx)
	if err != nil || ev.Offset != 1 || string(ev.Data) != "x" {
		t.Fatalf("Next once the stream is back = %+v, %v; want offset 1 %q", ev, err, "x")
	}
	if !r.failing.IsZero() {
		t.Error("a message did not end the run of failures")
	}
	if got := j.Stats().ReadRetries; got < retried {
		t.Errorf("ReadRetries went from %d to %d", retried, got)
	}
}

// TestReaderFindsDroppedPushes: core NATS may drop a republished message
// (a reconnect, a leader change). A reader that waits live still gets
// every event: a later message names its predecessor, so a reader that
// lacks it reads the stream; and a dropped last message (nothing after it
// to tell) is found by the topic's probe.
func TestReaderFindsDroppedPushes(t *testing.T) {
	j := newTestJournal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ref := Ref{ID: "dropped", Gen: 1}
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w := j.NewWriter(ref, func(Event) {})
	defer w.Abort()
	if err := w.Append(ctx, "t", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if ev, err := r.Next(ctx); err != nil || ev.Offset != 1 {
		t.Fatalf("Next = %+v, %v; want event 1", ev, err)
	}
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	if _, err := r.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing stored = %v, want the deadline", err)
	}
	// The reader waits live; its topic now hears nothing: every push is dropped.
	if err := r.live.sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.Append(ctx, "t", []byte("2")); err != nil {
		t.Fatal(err)
	}
	if ev, err := r.Next(ctx); err != nil || ev.Offset != 2 || string(ev.Data) != "2" {
		t.Fatalf("Next after a dropped push = %+v, %v; want event 2", ev, err)
	}
	if d := time.Since(start); d > 3*probeEvery {
		t.Errorf("the dropped last message was found after %v, want within a probe (%v)", d, probeEvery)
	}
	// A push whose predecessor was dropped sends the reader to the stream:
	// event 3's push is dropped, event 4's heard.
	for i, d := range []string{"3", "4"} { // one message each
		if err := w.Append(ctx, "t", []byte(d)); err != nil {
			t.Fatal(err)
		}
		for w.Stored() < uint64(3+i) {
			time.Sleep(time.Millisecond) // the writer stores in the background; the test's ctx bounds it
			if ctx.Err() != nil {
				t.Fatalf("event %s not stored", d)
			}
		}
	}
	m4, err := j.stream.GetLastMsgForSubject(ctx, ref.subject())
	if err != nil {
		t.Fatal(err)
	}
	m3, err := j.stream.GetMsg(ctx, m4.Sequence-1)
	if err != nil || m3.Subject != ref.subject() {
		t.Fatalf("message before event 4's = %v, %v", m3, err)
	}
	h := m4.Header
	h.Set(jetstream.SequenceHeader, strconv.FormatUint(m4.Sequence, 10))
	h.Set("Nats-Last-Sequence", strconv.FormatUint(m3.Sequence, 10))
	r.live.receive(&nats.Msg{Header: h, Data: m4.Data})
	for i, want := range []string{"3", "4"} {
		if ev, err := r.Next(ctx); err != nil || ev.Offset != uint64(3+i) || string(ev.Data) != want {
			t.Fatalf("Next after a push past a dropped one = %+v, %v; want event %s", ev, err, want)
		}
	}
}
