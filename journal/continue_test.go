package journal_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/reprise-dev/reprise/journal"
)

// TestContinue: a generation taken over by Continue goes on after its
// fence under the new writer, with offsets that follow; the first writer,
// still running, is fenced and stores nothing more.
func TestContinue(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	ref := journal.Ref{ID: "continue", Gen: 1}
	var old collector
	w1 := j.NewWriter(ref, old.sink)
	defer w1.Abort()
	for i := 1; i <= 3; i++ {
		if err := w1.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, waitTimeout, "3 events stored", func() bool { return w1.Stored() == 3 })

	errEnded := errors.New("ended")
	fence := func(last journal.Event, found bool) (journal.Event, error) {
		if last.IsEnd() {
			return journal.Event{}, errEnded
		}
		return journal.Event{Type: "reprise.fence", Data: []byte("after " + strconv.FormatUint(last.Offset, 10))}, nil
	}
	var c collector
	w2, f, err := j.Continue(ctx, ref, fence, c.sink)
	if err != nil {
		t.Fatal(err)
	}
	if f.Offset != 4 || string(f.Data) != "after 3" || f.Seq == 0 {
		t.Fatalf("fence %+v, want offset 4 after 3", f)
	}
	_ = w1.Append(ctx, "", []byte("late"))
	if err := w1.End(ctx, journal.EndCompleted); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("the first writer after Continue: End = %v, want ErrFenced", err)
	}
	for i := 5; i <= 6; i++ {
		if err := w2.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w2.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	if got := c.events(); len(got) != 3 || got[0].Offset != 5 || !got[2].IsEnd() {
		t.Fatalf("the new writer's sink saw %+v, want events 5, 6 and the end", got)
	}
	if w2.Appended() != 7 {
		t.Fatalf("Appended = %d, want 7: offsets count the whole generation", w2.Appended())
	}
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readN(t, r, 7)
	for _, i := range []int{1, 2, 3, 5, 6} {
		checkEvent(t, got[i-1], i)
	}
	if got[3].Type != "reprise.fence" || got[6].End != journal.EndCompleted {
		t.Fatalf("event 4 %+v, 7 %+v: want the fence and the end marker", got[3], got[6])
	}

	// An ended generation is refused by the fence, nothing appended.
	if _, _, err := j.Continue(ctx, ref, fence, c.sink); !errors.Is(err, errEnded) {
		t.Fatalf("Continue of an ended generation: %v, want the fence's error", err)
	}
	// Nothing stored: the fence is the first event.
	empty := journal.Ref{ID: "continue-empty", Gen: 1}
	w3, f, err := j.Continue(ctx, empty, fence, c.sink)
	if err != nil || f.Offset != 1 {
		t.Fatalf("Continue of an empty generation: %+v, %v; want the fence at 1", f, err)
	}
	w3.Abort()
}
