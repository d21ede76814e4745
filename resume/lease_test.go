package resume_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/resume"
)

// TestLeaseLapse: a lease that runs out by its owner's clock, its renewals
// failing, reports the lapse once, from the end of the lease that ran out;
// Renewed holds until a renewal is stored once the store answers again,
// and reports the loss of the lease. A lease that runs reports nothing and
// holds nothing.
func TestLeaseLapse(t *testing.T) {
	const lease = 60 * time.Millisecond
	store := newStore(t)
	fs := &flakyUpdates{Store: store}
	clk := newClock()
	m, err := resume.New(resume.Config{Store: fs, Owner: "owner-a", Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	req := request("lapse", "body")
	l := mustStart(t, m, req)
	until := l.Record().LeaseUntil

	if since, ok := l.Lapse(); ok {
		t.Fatalf("Lapse of a running lease = %s, true", since)
	}
	if err := l.Renewed(waitCtx(t)); err != nil {
		t.Fatalf("Renewed of a running lease: %v", err)
	}

	fs.down.Store(true)
	clk.Advance(2 * lease) // renewals fail, and the clock passes the lease's end
	since, ok := l.Lapse()
	if !ok || !since.Equal(until) {
		t.Fatalf("Lapse after the lease ran out = %s, %v; want %s, true", since, ok, until)
	}
	if since, ok := l.Lapse(); ok {
		t.Fatalf("the same lapse reported twice (%s)", since)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Renewed(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Renewed while the lease has run out = %v; want it held until its context ended", err)
	}

	fs.down.Store(false) // the store answers again: the lease is renewed
	if err := l.Renewed(waitCtx(t)); err != nil {
		t.Fatalf("Renewed once the store answers: %v", err)
	}
	if rec := stored(t, store, req.ID); !rec.LeaseUntil.After(clk.Now()) {
		t.Fatalf("the stored lease runs to %s, not past now (%s)", rec.LeaseUntil, clk.Now())
	}
	if since, ok := l.Lapse(); ok {
		t.Fatalf("the lapse reported again after the renewal (%s)", since)
	}

	// Another instance takes the key over: Renewed reports the loss.
	clkB := newClock()
	clkB.Advance(time.Hour)
	b := newManager(t, store, "owner-b", lease, clkB.Now)
	for range 5 {
		lapse(t, clkB, lease, b)
		if out, err := begin(t, b, req); err == nil && out.Decision == resume.Start {
			break
		}
	}
	select {
	case <-l.Lost():
	case <-time.After(waitTimeout):
		t.Fatal("Lost() not closed after the takeover")
	}
	if err := l.Renewed(waitCtx(t)); !errors.Is(err, resume.ErrFenced) {
		t.Fatalf("Renewed of a lost lease = %v, want ErrFenced", err)
	}
}

// TestLeaseLapseSeenAfterRenewal: a lease that ran out and was renewed
// before its owner looked (a paused owner wakes: its heartbeat may renew
// before its generation reads on) still reports the lapse, once.
func TestLeaseLapseSeenAfterRenewal(t *testing.T) {
	const lease = 60 * time.Millisecond
	store := newStore(t)
	fs := &flakyUpdates{Store: store}
	clk := newClock()
	m, err := resume.New(resume.Config{Store: fs, Owner: "owner-a", Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	req := request("lapse-renewed", "body")
	l := mustStart(t, m, req)
	until := l.Record().LeaseUntil
	fs.down.Store(true)
	clk.Advance(2 * lease)
	fs.down.Store(false)
	eventually(t, "the renewal after the lease ran out", func() bool { return stored(t, store, req.ID).LeaseUntil.After(clk.Now()) })
	since, ok := l.Lapse()
	if !ok || !since.Equal(until) {
		t.Fatalf("Lapse after the renewal = %s, %v; want %s, true", since, ok, until)
	}
	if since, ok := l.Lapse(); ok {
		t.Fatalf("the same lapse reported twice (%s)", since)
	}
}
