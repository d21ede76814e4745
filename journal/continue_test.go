package journal_test

import (
	"errors"
	"testing"

	"github.com/reprise-dev/reprise/journal"
)

// TestWriterAfter: a writer that continues a generation after its last
// stored event goes on with the offsets that follow, and fences the first
// writer, still running; one that finds more stored than the event it
// continues is fenced itself and stores nothing.
func TestWriterAfter(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	ref := journal.Ref{ID: "after", Gen: 1}
	var old collector
	w1 := j.NewWriter(ref, old.sink)
	defer w1.Abort()
	for i := 1; i <= 3; i++ {
		if err := w1.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, waitTimeout, "3 events stored", func() bool { return w1.Stored() == 3 })

	var c collector
	w2, last, err := j.NewWriterAfter(ctx, ref, c.sink)
	if err != nil || last.Offset != 3 {
		t.Fatalf("NewWriterAfter = %+v, %v; want after event 3", last, err)
	}
	if w2.Stored() != 3 || w2.Appended() != 3 {
		t.Fatalf("a writer after event 3: Stored %d, Appended %d; want 3, 3", w2.Stored(), w2.Appended())
	}
	w3, _, err := j.NewWriterAfter(ctx, ref, c.sink) // after event 3 as well: it will be stale
	if err != nil {
		t.Fatal(err)
	}
	for i := 4; i <= 5; i++ {
		if err := w2.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	_ = w1.Append(ctx, "", []byte("late"))
	if err := w1.End(ctx, journal.EndCompleted); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("the first writer after another continued: End = %v, want ErrFenced", err)
	}
	if err := w3.Append(ctx, "", []byte("stale")); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("a writer after a stale last event: Append = %v, want ErrFenced", err)
	}
	w3.Abort()
	if err := w2.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	if got := c.events(); len(got) != 3 || got[0].Offset != 4 || !got[2].IsEnd() || got[2].Offset != 6 {
		t.Fatalf("the new writer's sink saw %+v, want events 4, 5 and the end at 6", got)
	}
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readN(t, r, 6)
	for i := 1; i <= 5; i++ {
		checkEvent(t, got[i-1], i)
	}
	if !got[5].IsEnd() {
		t.Fatalf("event 6 %+v, want the end marker", got[5])
	}
	if _, _, err := j.NewWriterAfter(ctx, journal.Ref{ID: "after-none", Gen: 1}, c.sink); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("NewWriterAfter of an empty generation: %v, want ErrNotFound", err)
	}
}
