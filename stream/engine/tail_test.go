package engine

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestRegistryOwned: while a generation runs here, a key's record is the
// owner's own copy; once its lease is lost, or the generation is removed,
// it is not (the store's answers). Removing an old generation keeps the
// lease of a newer one of the same key.
func TestRegistryOwned(t *testing.T) {
	j := testJournal(t)
	ctx := testCtx(t)
	var skew atomic.Int64 // the lease heartbeats read the clock concurrently
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	m, err := resume.New(resume.Config{Store: j, Owner: "here", Now: now, Lease: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	id := resume.StreamID("tenant", "owned")
	req := resume.Request{ID: id, Key: "owned", Path: "/v1/chat/completions", Fingerprint: "f", Stream: true}
	out, err := m.Begin(ctx, req)
	if err != nil || out.Lease == nil {
		t.Fatalf("Begin: %v", err)
	}
	var live registry
	if _, ok := live.owned(id); ok {
		t.Fatal("owned before any generation was added")
	}
	ref1 := journal.Ref{ID: id, Gen: 1}
	live.add(ref1, newTail(), out.Lease, func(error) {})
	if rec, ok := live.owned(id); !ok || rec.Generation != 1 || rec.State != resume.InProgress || rec.Owner != "here" {
		t.Fatalf("owned = %+v, %v; want generation 1 in progress, ours", rec, ok)
	}
	if err := out.Lease.Finish(ctx, resume.Result{State: resume.Failed, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	out2, err := m.Begin(ctx, req)
	if err != nil || out2.Lease == nil || out2.Record.Generation != 2 {
		t.Fatalf("Begin generation 2: %+v, %v", out2.Record, err)
	}
	defer func() { _ = out2.Lease.Finish(ctx, resume.Result{State: resume.Failed}) }()
	live.add(journal.Ref{ID: id, Gen: 2}, newTail(), out2.Lease, func(error) {})
	live.remove(ref1) // the old pump ends after the new one started
	if rec, ok := live.owned(id); !ok || rec.Generation != 2 {
		t.Fatalf("owned after removing generation 1 = %+v, %v; want generation 2", rec, ok)
	}
	// Another owner takes the key over: this lease is lost, the record is
	// no longer ours to tell.
	skew.Store(int64(time.Hour))
	other, err := resume.New(resume.Config{Store: j, Owner: "there", Now: now, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// It judges the lease lapsed once it saw the store answer for a lease.
	for range 5 {
		skew.Add(int64(time.Minute / 4))
		if _, err := other.Get(ctx, resume.StreamID("tenant", "probe")); !errors.Is(err, resume.ErrNotFound) {
			t.Fatal(err)
		}
	}
	out3, err := other.Begin(ctx, req)
	if err != nil || out3.Decision != resume.Start {
		t.Fatalf("takeover: %v, %v", out3.Decision, err)
	}
	defer func() { _ = out3.Lease.Finish(ctx, resume.Result{State: resume.Failed}) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := live.owned(id); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("owned still answers 10s after the lease was taken over")
		}
		time.Sleep(10 * time.Millisecond)
	}
	live.remove(journal.Ref{ID: id, Gen: 2})
	if _, ok := live.owned(id); ok {
		t.Fatal("owned after the generation was removed")
	}
}

// TestTailProgress: Progress counts the events stored, not the end marker
// nor events only previewed, and moves its time with each store.
func TestTailProgress(t *testing.T) {
	tl := newTail()
	if n, at := tl.Progress(); n != 0 || !at.IsZero() {
		t.Fatalf("Progress of an empty tail = %d, %s; want 0 and no time", n, at)
	}
	before := time.Now()
	tl.store(journal.Event{Offset: 1, Data: []byte("a")})
	tl.store(journal.Event{Offset: 2, Data: []byte("b")})
	n, at := tl.Progress()
	if n != 2 || at.Before(before) {
		t.Fatalf("Progress after 2 events = %d, %s; want 2, at or after %s", n, at, before)
	}
	tl.preview(journal.Event{Offset: 3, Data: []byte("c")})
	if n, _ := tl.Progress(); n != 2 {
		t.Fatalf("Progress with a third event previewed = %d; want 2 (stored)", n)
	}
	tl.store(journal.Event{Offset: 3, Data: []byte("c")})
	tl.store(journal.Event{Offset: 4, End: journal.EndCompleted})
	if n, end := tl.Progress(); n != 3 || end.Before(at) {
		t.Fatalf("Progress after the end marker = %d, %s; want 3, at or after %s", n, end, at)
	}
}

// TestTailPreview: an event is shown when previewed, once, in order; an
// event that was not previewed (the fence, the terminal event, an error)
// is shown only once stored, and no preview overtakes it; a failed tail
// ends after what it showed and previews nothing more.
func TestTailPreview(t *testing.T) {
	tl := newTail()
	ev := func(off uint64) journal.Event { return journal.Event{Offset: off, Data: []byte{byte('a' + off)}} }
	shown := func() []uint64 {
		evs, _ := tl.Since(0)
		var offs []uint64
		for _, e := range evs {
			offs = append(offs, e.Offset)
		}
		return offs
	}
	tl.store(ev(1)) // the fence
	_, changed := tl.Since(1)
	if !tl.preview(ev(2)) {
		t.Fatal("event 2 was not previewed")
	}
	select {
	case <-changed:
	default:
		t.Fatal("a preview did not wake the tail's readers")
	}
	tl.store(ev(2)) // stored after its preview: not added twice
	if got := shown(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("shown = %v; want [1 2]", got)
	}
	// Event 3 is the terminal one: handed to the journal without a
	// preview. Event 4 must wait for it.
	if tl.preview(ev(4)) {
		t.Fatal("event 4 was previewed before event 3 was stored")
	}
	if got := shown(); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("shown before event 3 is stored = %v; want [1 2]", got)
	}
	tl.store(ev(3))
	tl.store(ev(4))
	if got := shown(); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("shown after the stores = %v; want [1 2 3 4]", got)
	}
	tl.preview(ev(5))
	tl.fail([]byte("lost"))
	if got := shown(); !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("shown after fail = %v; want the previewed 5, then the error (6) and the end marker (7)", got)
	}
	if evs, _ := tl.Since(5); evs[0].Type != TypeError || evs[1].End != journal.EndFailed {
		t.Fatalf("after event 5: %+v; want the error event and the failed end marker", evs)
	}
	if tl.preview(ev(8)) {
		t.Fatal("a failed tail took a preview")
	}
	if n, _ := tl.Progress(); n != 4 {
		t.Fatalf("Progress after fail = %d; want 4 (stored)", n)
	}
}
