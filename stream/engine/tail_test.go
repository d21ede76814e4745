package engine

import (
	"errors"
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

// TestTailProgress: Progress counts the events appended, not the end
// marker, and moves its time with each append.
func TestTailProgress(t *testing.T) {
	tl := newTail()
	if n, at := tl.Progress(); n != 0 || !at.IsZero() {
		t.Fatalf("Progress of an empty tail = %d, %s; want 0 and no time", n, at)
	}
	before := time.Now()
	tl.append(journal.Event{Offset: 1, Data: []byte("a")})
	tl.append(journal.Event{Offset: 2, Data: []byte("b")})
	n, at := tl.Progress()
	if n != 2 || at.Before(before) {
		t.Fatalf("Progress after 2 events = %d, %s; want 2, at or after %s", n, at, before)
	}
	tl.append(journal.Event{Offset: 3, End: journal.EndCompleted})
	if n, end := tl.Progress(); n != 2 || end.Before(at) {
		t.Fatalf("Progress after the end marker = %d, %s; want 2, at or after %s", n, end, at)
	}
}
