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

// TestTailChunks: a tail longer than a chunk gives every reader every
// event once, in order, whatever its position and however the events come
// (a reader waiting on the channel, one catching up on several chunks);
// the events a reader was given do not move as the tail grows; and a
// position past a completed tail's end gets the end marker.
func TestTailChunks(t *testing.T) {
	tl := newTail()
	const n = 3*tailChunk + 5
	read := func(after uint64, got chan<- []uint64) {
		var offs []uint64
		for {
			evs, changed := tl.Since(after)
			for _, ev := range evs {
				if ev.IsEnd() {
					got <- offs
					return
				}
				offs = append(offs, ev.Offset)
				after = ev.Offset
			}
			<-changed
		}
	}
	starts := []uint64{0, 1, tailChunk - 1, tailChunk, tailChunk + 1, 2 * tailChunk, n - 1}
	got := make([]chan []uint64, len(starts))
	for i, after := range starts {
		got[i] = make(chan []uint64, 1)
		go read(after, got[i])
	}
	first, _ := tl.Since(0) // empty: nothing yet
	for off := uint64(1); off <= n; off++ {
		if !tl.preview(journal.Event{Offset: off, Data: []byte{byte(off)}}) {
			t.Fatalf("preview of event %d refused", off)
		}
		if off == 3 {
			first, _ = tl.Since(0)
		}
	}
	if len(first) != 3 || first[0].Offset != 1 || first[2].Offset != 3 || first[2].Data[0] != 3 {
		t.Fatalf("the events given before the tail grew are now %+v", first)
	}
	tl.store(journal.Event{Offset: n + 1, End: journal.EndCompleted})
	wait := func(ch <-chan []uint64) []uint64 {
		t.Helper()
		select {
		case offs := <-ch:
			return offs
		case <-time.After(10 * time.Second):
			t.Fatal("a reader is stuck at a chunk's end")
			return nil
		}
	}
	for i, after := range starts {
		offs := wait(got[i])
		if uint64(len(offs)) != n-after || (len(offs) > 0 && (offs[0] != after+1 || offs[len(offs)-1] != n)) {
			t.Fatalf("reader after %d got %d events (%v...), want %d..%d", after, len(offs), offs[:min(len(offs), 3)], after+1, n)
		}
		for k := 1; k < len(offs); k++ {
			if offs[k] != offs[k-1]+1 {
				t.Fatalf("reader after %d got %d after %d", after, offs[k], offs[k-1])
			}
		}
	}
	// A reader that comes once the tail is complete: nothing changes any
	// more, so only Since's answers take it past each chunk.
	late := make(chan []uint64, 1)
	go read(0, late)
	if offs := wait(late); len(offs) != n {
		t.Fatalf("a reader of the complete tail got %d events, want %d", len(offs), n)
	}
	if evs, _ := tl.Since(2 * tailChunk); len(evs) != tailChunk || evs[0].Offset != 2*tailChunk+1 {
		t.Fatalf("Since(%d) = %d events from %d, want a chunk's from %d", 2*tailChunk, len(evs), evs[0].Offset, 2*tailChunk+1)
	}
	if evs, _ := tl.Since(n + 5); len(evs) != 1 || !evs[0].IsEnd() {
		t.Fatalf("Since past the end = %+v, want the end marker", evs)
	}
	if !tl.Completed() || tl.Last() != n+1 {
		t.Fatalf("Completed = %v, Last = %d; want true, %d", tl.Completed(), tl.Last(), n+1)
	}
}

// TestTailWakesOnlyWhoWatches: an event added while nobody holds the
// tail's channel makes no new one (a fast generation nobody waits on
// allocates none per event); one handed out by Since is closed by the next
// event, and the channel after it is new.
func TestTailWakesOnlyWhoWatches(t *testing.T) {
	tail := newTail()
	first := tail.changed
	for i := range 3 {
		tail.store(journal.Event{Offset: uint64(i + 1), Type: "message"})
	}
	if tail.changed != first {
		t.Fatal("events nobody waited for replaced the channel")
	}
	evs, ch := tail.Since(3)
	if len(evs) != 0 {
		t.Fatalf("Since(3) = %d events, want none", len(evs))
	}
	select {
	case <-ch:
		t.Fatal("closed before the next event")
	default:
	}
	tail.store(journal.Event{Offset: 4, Type: "message"})
	select {
	case <-ch:
	default:
		t.Fatal("the next event did not close the channel Since gave")
	}
	if tail.changed == ch {
		t.Fatal("the closed channel was kept")
	}
	next := tail.changed
	tail.store(journal.Event{Offset: 5, Type: "message"})
	if tail.changed != next {
		t.Fatal("an event after the wake-up, with nobody waiting, replaced the channel")
	}
	if evs, _ := tail.Since(4); len(evs) != 1 || evs[0].Offset != 5 {
		t.Fatalf("Since(4) = %+v, want event 5", evs)
	}
}

// TestTailUnsettledReasonUnplacedAtOnce: a reader woken by an unsettled
// tail's reason already finds it unplaced (sent without an id). The
// reason was added, and its readers woken, before it was marked, so a
// reader that looked at once could give it an id its journal position
// does not have.
func TestTailUnsettledReasonUnplacedAtOnce(t *testing.T) {
	for range 200 {
		tl := newTail()
		if !tl.preview(journal.Event{Offset: 1, Data: []byte("a")}) {
			t.Fatal("the first event was not shown")
		}
		_, changed := tl.Since(1)
		seen := make(chan bool)
		go func() {
			<-changed
			evs, _ := tl.Since(1)
			seen <- len(evs) > 0 && evs[0].Type == TypeError && tl.Unplaced(evs[0])
		}()
		tl.unsettled([]byte(`{"error":{}}`))
		if !<-seen {
			t.Fatal("a reader woken by the reason found it placed")
		}
	}
}
