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

// TestReaderResumesInOneGet: a reader that seeks by a hint asks for the
// hint's message and the one after it in one get, so a cursor whose next
// event is in either costs one round trip of two messages, not a second
// get of everything stored after them.
func TestReaderResumesInOneGet(t *testing.T) {
	j := newTestJournal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ref := Ref{ID: "one-get", Gen: 1}
	var stored []Event
	w := j.NewWriter(ref, func(ev Event) { stored = append(stored, ev) })
	defer w.Abort()
	// Events 1 and 2 in a message each; 3..8 lingering, stored in one
	// message with 9 (not shown: it is sent at once); 10 and 11 in a
	// message each, and the end.
	stores := func(i int) {
		t.Helper()
		for w.Stored() < uint64(i) {
			time.Sleep(time.Millisecond) // the writer stores in the background; ctx bounds the test
			if ctx.Err() != nil {
				t.Fatalf("event %d not stored", i)
			}
		}
	}
	for i := 1; i <= 11; i++ {
		var err error
		if i >= 3 && i <= 8 {
			err = w.AppendShown(ctx, "t", []byte(strconv.Itoa(i)), func(Event) {})
		} else {
			err = w.Append(ctx, "t", []byte(strconv.Itoa(i)))
		}
		if err != nil {
			t.Fatal(err)
		}
		if i <= 2 || i >= 9 {
			stores(i)
		}
	}
	if err := w.End(ctx, EndCompleted); err != nil {
		t.Fatal(err)
	}
	hint := stored[4].Seq // event 5's: the message of event 2
	if stored[2].Seq != hint || stored[8].Seq != hint || stored[9].Seq <= hint {
		t.Fatalf("events 3, 5, 9 and 10 seek at %d, %d, %d, %d: 3..9 not one frame", stored[2].Seq, hint, stored[8].Seq, stored[9].Seq)
	}
	if stored[9].Seq != hint+1 {
		t.Fatalf("events 3..9 stored in message %d, want %d (one after event 2's)", stored[9].Seq, hint+1)
	}

	r, err := j.Read(ctx, ref, 5, hint)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ev, err := r.Next(ctx)
	if err != nil || ev.Offset != 6 || string(ev.Data) != "6" {
		t.Fatalf("Next after event 5 = %+v, %v; want event 6", ev, err)
	}
	if r.got != 2 {
		t.Errorf("read %d messages to resume, want 2 (the hint's and the next)", r.got)
	}
	if len(r.buf) != 3 || r.buf[0].Offset != 7 || r.buf[2].Offset != 9 {
		t.Errorf("held after event 6: %+v, want events 7 to 9", r.buf)
	}
	for i := 7; i <= 11; i++ {
		if ev, err := r.Next(ctx); err != nil || ev.Offset != uint64(i) || string(ev.Data) != strconv.Itoa(i) {
			t.Fatalf("Next = %+v, %v; want event %d", ev, err, i)
		}
	}
	if ev, err := r.Next(ctx); err != nil || !ev.IsEnd() || ev.Offset != 12 {
		t.Fatalf("Next after event 11 = %+v, %v; want the end", ev, err)
	}
}
