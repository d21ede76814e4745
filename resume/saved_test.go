package resume_test

import (
	"errors"
	"testing"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/resume"
)

func ptr(v float64) *float64 { return &v }

// TestBilledAndSaved: a failed generation with usage is billed and shows
// its usage (reported); the requests served from it while it ran save
// nothing, since it failed. The next, completed one adds to the bill;
// requests served from it while it ran are settled into Saved by kind at
// its usage and cost when it ends, one of a completed generation at once;
// a request of a replaced generation counts nothing.
func TestBilledAndSaved(t *testing.T) {
	store := newStore(t)
	m := newManager(t, store, "a", 0, nil)
	req := request("k-bill", `{"a":1}`)
	ctx := waitCtx(t)

	l := mustStart(t, m, req)
	if _, now, err := m.Save(ctx, req.ID, 1, cost.SavedAttach); err != nil || now {
		t.Fatalf("Save of a running generation: %v now %v, want it pending", err, now)
	}
	failed := cost.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}
	if err := l.Finish(ctx, resume.Result{State: resume.Failed, Error: "upstream_interrupted", Usage: &failed, Basis: cost.Estimated, Model: "m", Cost: ptr(1.5)}); err != nil {
		t.Fatal(err)
	}
	rec := stored(t, store, req.ID)
	if rec.Usage == nil || *rec.Usage != failed || rec.Basis() != cost.Estimated || rec.Billed == nil || rec.Billed.Usage != failed ||
		*rec.Billed.Cost != 1.5 || rec.Billed.Generations != 1 || rec.Billed.Basis != cost.Estimated {
		t.Fatalf("after a failed generation: usage %+v (%s) billed %+v, want 5 estimated tokens billed at 1.5", rec.Usage, rec.Basis(), rec.Billed)
	}
	if rec.Saved != nil || rec.Attached != 0 || l.Settled() != (cost.SavedBy{}) {
		t.Errorf("saved %+v attached %d settled %+v, want the attach to a failed generation counted nowhere", rec.Saved, rec.Attached, l.Settled())
	}

	l = mustStart(t, m, req)
	if rec := stored(t, store, req.ID); rec.Basis() != "" || rec.Usage != nil {
		t.Errorf("a new generation: usage %+v basis %q, want none while it runs", rec.Usage, rec.Basis())
	}
	for _, how := range []string{cost.SavedAttach, cost.SavedResume, cost.SavedResume, cost.SavedRetry} {
		if _, now, err := m.Save(ctx, req.ID, 2, how); err != nil || now {
			t.Fatalf("Save %s of a running generation: %v now %v", how, err, now)
		}
	}
	done := cost.Usage{PromptTokens: 3, CompletionTokens: 10, TotalTokens: 13}
	if err := l.Finish(ctx, resume.Result{State: resume.Completed, Usage: &done, Model: "m", Cost: ptr(4)}); err != nil {
		t.Fatal(err)
	}
	if want := (cost.SavedBy{Attach: 1, Resume: 2, Retry: 1}); l.Settled() != want {
		t.Errorf("settled %+v, want %+v", l.Settled(), want)
	}
	rec, now, err := m.Save(ctx, req.ID, 2, cost.SavedReplay)
	if err != nil || !now {
		t.Fatalf("Save of a completed generation: %v now %v, want it counted at once", err, now)
	}
	want := cost.Usage{PromptTokens: 6, CompletionTokens: 12, TotalTokens: 18}
	if *rec.Usage != done || rec.Basis() != cost.Reported || *rec.Cost != 4 || rec.Billed.Usage != want || *rec.Billed.Cost != 5.5 ||
		rec.Billed.Generations != 2 || rec.Billed.Basis != cost.Estimated {
		t.Errorf("usage %+v (%s) cost %v billed %+v, want the last generation's and %+v (estimated in part) at 5.5 over 2", rec.Usage, rec.Basis(), *rec.Cost, rec.Billed, want)
	}
	wantBy := cost.SavedBy{Attach: 1, Replay: 1, Resume: 2, Retry: 1}
	wantSaved := cost.Usage{PromptTokens: 15, CompletionTokens: 50, TotalTokens: 65}
	if s := rec.Saved; s == nil || s.Duplicates != 5 || s.By != wantBy || s.Usage == nil || *s.Usage != wantSaved || *s.Cost != 20 {
		t.Errorf("saved %+v, want 5 by %+v of %+v at 20", s, wantBy, wantSaved)
	}
	if rec, now, err := m.Save(ctx, req.ID, 1, cost.SavedReplay); err != nil || now || rec.Saved.Duplicates != 5 {
		t.Errorf("a request of a replaced generation: %v now %v %+v, want nothing counted", err, now, rec.Saved)
	}
	if _, _, err := m.Save(ctx, req.ID, 2, "sdk_retry"); !errors.Is(err, resume.ErrInvalidOption) {
		t.Errorf("Save of an unknown kind: %v, want ErrInvalidOption", err)
	}
}

// TestSavedPendingOfAnotherGeneration: the split by kind a generation
// that ended without Finish left in the record (its owner died) counts
// nothing for the next generation.
func TestSavedPendingOfAnotherGeneration(t *testing.T) {
	rec := resume.Record{Generation: 2, Attached: 1, AttachedBy: &resume.Pending{Generation: 1, SavedBy: cost.SavedBy{Resume: 3}}}
	if got := rec.PendingBy(rec.Attached); got != (cost.SavedBy{Attach: 1}) {
		t.Errorf("pending %+v, want the one request of generation 2, an attach", got)
	}
}

// TestBilledCalls: a generation that was a call billed (Result.Call: the
// upstream answered, priced per call) counts in Billed.Calls, a failed one
// too; one that was none (refused before an answer) adds no call and no
// bill. A request served from a call while it ran counts in Saved.Calls
// when it completes, one served the completed call at once; the record
// keeps whether its last generation was a call.
func TestBilledCalls(t *testing.T) {
	store := newStore(t)
	m := newManager(t, store, "a", 0, nil)
	req := request("k-calls", `{"a":1}`)
	ctx := waitCtx(t)

	l := mustStart(t, m, req)
	if err := l.Finish(ctx, resume.Result{State: resume.Failed, Error: "upstream_refused", Model: "m"}); err != nil {
		t.Fatal(err)
	}
	if rec := stored(t, store, req.ID); rec.Billed != nil || rec.Call {
		t.Fatalf("a generation refused before an answer: billed %+v call %v, want nothing billed", rec.Billed, rec.Call)
	}

	l = mustStart(t, m, req)
	broken := cost.Usage{PromptTokens: 3, CompletionTokens: 1}
	if err := l.Finish(ctx, resume.Result{State: resume.Failed, Error: "upstream_interrupted", Usage: &broken, Basis: cost.Estimated, Model: "m", Cost: ptr(0.5), Call: true}); err != nil {
		t.Fatal(err)
	}
	if rec := stored(t, store, req.ID); rec.Billed == nil || rec.Billed.Calls != 1 || !rec.Call {
		t.Fatalf("a stream broken after the upstream answered: billed %+v call %v, want one call", rec.Billed, rec.Call)
	}

	l = mustStart(t, m, req)
	if rec := stored(t, store, req.ID); rec.Call {
		t.Error("a new generation still shows the last one's call")
	}
	for _, how := range []string{cost.SavedRetry, cost.SavedAttach} {
		if _, _, err := m.Save(ctx, req.ID, 3, how); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Finish(ctx, resume.Result{State: resume.Completed, Model: "m", Cost: ptr(0.5), Call: true}); err != nil {
		t.Fatal(err)
	}
	rec, now, err := m.Save(ctx, req.ID, 3, cost.SavedReplay)
	if err != nil || !now {
		t.Fatalf("Save of a completed generation: %v now %v", err, now)
	}
	if rec.Billed.Calls != 2 || rec.Billed.Generations != 2 || *rec.Billed.Cost != 1 {
		t.Errorf("billed %+v, want 2 calls at 1", rec.Billed)
	}
	if s := rec.Saved; s == nil || s.Calls != 3 || s.Duplicates != 3 || *s.Cost != 1.5 {
		t.Errorf("saved %+v, want 3 calls at 1.5", s)
	}
}
