package resume_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/resume"
)

// adopter records what it was handed; it adopts what can is true for.
type adopter struct {
	can bool

	mu     sync.Mutex
	asked  int
	leases []*resume.Lease
	recs   []resume.Record
}

func (a *adopter) Adoptable(context.Context, string, resume.Record) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked++
	return a.can
}

func (a *adopter) Adopt(_ context.Context, _ string, rec resume.Record, l *resume.Lease) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leases, a.recs = append(a.leases, l), append(a.recs, rec)
}

// TestAdopt: a generation whose owner's lease ran out is taken over by the
// instance whose Adopter can continue it — the same generation, in
// progress, that instance its owner under a lease that fences the old one —
// by Get and by Begin (which attaches); an Adopter that cannot leaves it to
// today's end (owner_lost, then a new generation).
func TestAdopt(t *testing.T) {
	for _, via := range []string{"get", "begin"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			store := newStore(t)
			clk := newClock()
			a := newManager(t, store, "owner-a", 0, clk.Now)
			ad := &adopter{can: true}
			b := newManagerWith(t, resume.Config{Store: store, Owner: "owner-b", Now: clk.Now, Adopter: ad})
			req := request("adopt-"+via, "body")
			old := mustStart(t, a, req)
			old.SetEvents(4)
			eventually(t, "the heartbeat stores 4 events", func() bool { // within Lease/3
				return stored(t, store, req.ID).Events == 4
			})
			lapse(t, clk, a.Lease()+time.Second, b)

			var rec resume.Record
			if via == "get" {
				var err error
				if rec, err = b.Get(waitCtx(t), req.ID); err != nil {
					t.Fatal(err)
				}
			} else {
				out, err := begin(t, b, req)
				if err != nil {
					t.Fatal(err)
				}
				if out.Decision != resume.Attach || out.Lease != nil {
					t.Fatalf("Begin = %s, want attach to the adopted generation", out.Decision)
				}
				rec = out.Record
			}
			if rec.State != resume.InProgress || rec.Generation != 1 || rec.Owner != "owner-b" || rec.Events != 4 {
				t.Fatalf("record %+v, want generation 1 in progress, owner-b, 4 events", rec)
			}
			if len(ad.leases) != 1 || ad.recs[0].Generation != 1 {
				t.Fatalf("adopted %d leases, want 1 of generation 1", len(ad.leases))
			}
			if err := old.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 9}); !errors.Is(err, resume.ErrFenced) {
				t.Fatalf("the old owner's Finish: %v, want ErrFenced", err)
			}
			if err := ad.leases[0].Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 9}); err != nil {
				t.Fatalf("the adopter's Finish: %v", err)
			}
			if got := stored(t, store, req.ID); got.State != resume.Completed || got.Generation != 1 || got.Events != 9 {
				t.Fatalf("record after the adopter finished: %+v", got)
			}
		})
	}
}

// TestAdoptRefused: an Adopter that cannot continue the generation leaves
// it to be declared lost.
func TestAdoptRefused(t *testing.T) {
	store := newStore(t)
	clk := newClock()
	a := newManager(t, store, "owner-a", 0, clk.Now)
	ad := &adopter{}
	b := newManagerWith(t, resume.Config{Store: store, Owner: "owner-b", Now: clk.Now, Adopter: ad})
	req := request("adopt-refused", "body")
	mustStart(t, a, req)
	lapse(t, clk, a.Lease()+time.Second, b)
	rec, err := b.Get(waitCtx(t), req.ID)
	if err != nil || rec.State != resume.Failed || rec.Error != resume.OwnerLost {
		t.Fatalf("Get = %+v, %v; want failed owner_lost", rec, err)
	}
	if ad.asked != 1 || len(ad.leases) != 0 {
		t.Fatalf("asked %d, adopted %d; want asked once, none adopted", ad.asked, len(ad.leases))
	}
}

// TestLostTold: the Manager that settles a lost owner's generation tells
// Config.Lost once, with the state it settled: failed when a reader looks
// (Get), failed when a new generation replaces it (Begin).
func TestLostTold(t *testing.T) {
	for _, via := range []string{"get", "begin"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			store := newStore(t)
			clk := newClock()
			a := newManager(t, store, "owner-a", 0, clk.Now)
			var mu sync.Mutex
			var told []resume.State
			b := newManagerWith(t, resume.Config{Store: store, Owner: "owner-b", Now: clk.Now, Lost: func(s resume.State) {
				mu.Lock()
				defer mu.Unlock()
				told = append(told, s)
			}})
			req := request("lost-"+via, "body")
			mustStart(t, a, req)
			lapse(t, clk, a.Lease()+time.Second, b)
			if via == "get" {
				if rec, err := b.Get(waitCtx(t), req.ID); err != nil || rec.State != resume.Failed {
					t.Fatalf("Get: %+v, %v; want failed", rec, err)
				}
			} else if out, err := begin(t, b, req); err != nil || out.Decision != resume.Start {
				t.Fatalf("Begin: %+v, %v; want a new generation", out, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(told) != 1 || told[0] != resume.Failed {
				t.Errorf("Lost told %v, want [failed]", told)
			}
		})
	}
}
