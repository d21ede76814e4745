package resume_test

import (
	"testing"

	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestCheckSettlesAGoneOwnersGeneration: two instances on one NATS, each
// answering for its name. While the owner answers, Check reads nothing
// and changes nothing, though the generation is quiet; once the owner's
// connection closed (its process died), Check settles its generation at
// once — its lease far from run out — as a lapsed one: asked of the
// Salvager first (here it holds nothing terminal), then failed
// owner_lost. A name that is not the record's owner settles nothing, and
// an instance never judges itself gone.
func TestCheckSettlesAGoneOwnersGeneration(t *testing.T) {
	e := journaltest.Server(t, "")
	ncA := journaltest.Connect(t, e)
	ja := journaltest.Open(t, ncA, journal.Config{Memory: true})
	jb := journaltest.Open(t, journaltest.Connect(t, e), journal.Config{Memory: true})
	a := newManagerWith(t, resume.Config{Store: ja, Owner: "owner-a", Gone: ja.OwnerGone})
	var asked []resume.Record
	b := newManagerWith(t, resume.Config{Store: jb, Owner: "owner-b", Gone: jb.OwnerGone, Salvager: salvager{
		salvage: func(rec resume.Record) (resume.Result, bool, error) {
			asked = append(asked, rec)
			return resume.Result{}, false, nil
		},
		salvaged: func(resume.Record) { t.Error("Salvaged told of a generation that did not complete") },
	}})
	for _, j := range []struct {
		j    *journal.Journal
		name string
	}{{ja, "owner-a"}, {jb, "owner-b"}} {
		stop, err := j.j.AnswerOwner(j.name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	req := request("gone-owner", "body")
	out, err := a.Begin(waitCtx(t), req)
	if err != nil || out.Decision != resume.Start {
		t.Fatalf("Begin on A: %s, %v", out.Decision, err)
	}

	for _, owner := range []string{"owner-a", "owner-b", ""} {
		if c, err := b.Check(waitCtx(t), req.ID, owner); c.Gone || err != nil {
			t.Fatalf("Check(%q) with A alive: %+v, %v", owner, c, err)
		}
	}
	if s := stored(t, ja, req.ID); s.State != resume.InProgress || s.Owner != "owner-a" {
		t.Fatalf("stored with A alive = %+v, want in progress under A", s)
	}
	// A name nothing answers for that owns no generation: gone, and the
	// record, another owner's, is left as it is.
	if c, err := b.Check(waitCtx(t), req.ID, "owner-x"); !c.Gone || c.Settled || err != nil || c.Record.State != resume.InProgress || c.Record.Owner != "owner-a" {
		t.Fatalf("Check(owner-x) = %+v, %v; want gone, the record untouched", c, err)
	}
	if len(asked) != 0 {
		t.Fatalf("Salvager asked %d times about a live owner's generation", len(asked))
	}

	ncA.Close() // A's process died
	// The server notices the closed connection a moment later: an ask
	// meanwhile is delivered to A, and goes unanswered (not gone).
	var c resume.Checked
	eventually(t, "A found gone", func() bool {
		var err error
		c, err = b.Check(waitCtx(t), req.ID, "owner-a")
		return err == nil && c.Gone
	})
	if !c.Settled {
		t.Fatalf("Check(owner-a) after A died: %+v; want settled by it", c)
	}
	if rec := c.Record; rec.State != resume.Failed || rec.Error != resume.OwnerLost || rec.Generation != 1 {
		t.Fatalf("Check = %+v, want generation 1 failed owner_lost", rec)
	}
	// Another reader's check finds it settled already.
	if c, err := b.Check(waitCtx(t), req.ID, "owner-a"); err != nil || !c.Gone || c.Settled || c.Record.State != resume.Failed {
		t.Fatalf("a second Check = %+v, %v; want gone, failed, settled by the first", c, err)
	}
	if len(asked) != 1 || asked[0].State != resume.InProgress {
		t.Fatalf("Salvager asked about %+v, want the generation in progress, once", asked)
	}
	if s := stored(t, jb, req.ID); s.State != resume.Failed || s.Error != resume.OwnerLost {
		t.Fatalf("stored = %+v, want failed owner_lost", s)
	}
	// The key starts anew on B.
	if out, err := begin(t, b, req); err != nil || out.Decision != resume.Start || out.Record.Generation != 2 {
		t.Fatalf("Begin on B: %s gen %d, %v; want start of generation 2", out.Decision, out.Record.Generation, err)
	}
}
