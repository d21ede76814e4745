package resume_test

import (
	"testing"

	"github.com/reprise-dev/reprise/resume"
)

func ptr(v float64) *float64 { return &v }

// TestBilledAndSaved: a failed generation with usage is billed but shows no
// usage; the next, completed one adds to the bill; a duplicate of a running
// generation is settled into Saved at its cost when it ends, one of a
// completed generation at once; a failed generation's duplicates save
// nothing.
func TestBilledAndSaved(t *testing.T) {
	store := newStore(t)
	m := newManager(t, store, "a", 0, nil)
	req := request("k-bill", `{"a":1}`)
	ctx := waitCtx(t)

	l := mustStart(t, m, req)
	if _, saved, err := m.Duplicate(ctx, req.ID, 1); err != nil || saved != nil {
		t.Fatalf("Duplicate of a running generation: %v saved %v, want none yet", err, saved)
	}
	failed := resume.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}
	if err := l.Finish(ctx, resume.Result{State: resume.Failed, Error: "upstream_interrupted", Usage: &failed, Model: "m", Cost: ptr(1.5)}); err != nil {
		t.Fatal(err)
	}
	rec := stored(t, store, req.ID)
	if rec.Usage != nil || rec.Billed == nil || rec.Billed.Usage != failed || *rec.Billed.Cost != 1.5 || rec.Billed.Generations != 1 {
		t.Fatalf("after a failed generation: usage %+v billed %+v, want no usage and 5 tokens billed at 1.5", rec.Usage, rec.Billed)
	}
	if rec.Saved == nil || rec.Saved.Duplicates != 1 || *rec.Saved.Cost != 1.5 || rec.Attached != 0 || l.Settled() != 1 {
		t.Errorf("saved %+v attached %d settled %d, want the attach settled at 1.5", rec.Saved, rec.Attached, l.Settled())
	}

	l = mustStart(t, m, req)
	done := resume.Usage{PromptTokens: 3, CompletionTokens: 10, TotalTokens: 13}
	if err := l.Finish(ctx, resume.Result{State: resume.Completed, Usage: &done, Model: "m", Cost: ptr(4)}); err != nil {
		t.Fatal(err)
	}
	rec, saved, err := m.Duplicate(ctx, req.ID, 2)
	if err != nil || saved == nil || *saved != 4 {
		t.Fatalf("Duplicate of a completed generation: %v saved %v, want 4", err, saved)
	}
	want := resume.Usage{PromptTokens: 6, CompletionTokens: 12, TotalTokens: 18}
	if *rec.Usage != done || *rec.Cost != 4 || rec.Billed.Usage != want || *rec.Billed.Cost != 5.5 || rec.Billed.Generations != 2 {
		t.Errorf("usage %+v cost %v billed %+v, want the last generation's and %+v at 5.5 over 2", rec.Usage, *rec.Cost, rec.Billed, want)
	}
	if rec.Saved.Duplicates != 2 || *rec.Saved.Cost != 5.5 {
		t.Errorf("saved %+v, want 2 duplicates at 5.5", rec.Saved)
	}
	if rec, saved, err := m.Duplicate(ctx, req.ID, 1); err != nil || saved != nil || rec.Saved.Duplicates != 2 {
		t.Errorf("a duplicate of a replaced generation: %v saved %v %+v, want nothing counted", err, saved, rec.Saved)
	}
}
