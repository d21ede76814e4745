package cost_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
)

type switchLog struct{ narrowed []bool }

func newGuard(tb testing.TB, cfg cost.GuardConfig) (*cost.Guard, *time.Time, *switchLog) {
	tb.Helper()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	log := &switchLog{}
	cfg.Now = func() time.Time { return now }
	cfg.OnSwitch = func(n bool, _ string) { log.narrowed = append(log.narrowed, n) }
	g, err := cost.NewGuard(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return g, &now, log
}

// TestGuardRatio: an hour that spends more than the ratio over the one
// before narrows; it widens again once that hour has passed and spend is
// flat; each switch is told once.
func TestGuardRatio(t *testing.T) {
	g, now, log := newGuard(t, cost.GuardConfig{Ratio: 0.3})
	g.Spent(10) // hour 1
	*now = now.Add(time.Hour)
	g.Spent(12) // +20%: calm
	if g.Narrowed() {
		t.Fatal("narrowed at +20%")
	}
	g.Spent(2) // +40%
	if !g.Narrowed() {
		t.Fatal("not narrowed at +40%")
	}
	*now = now.Add(time.Hour) // the next hour spends 14 again: flat
	g.Spent(14)
	if g.Narrowed() {
		t.Fatal("still narrowed after a flat hour")
	}
	if len(log.narrowed) != 2 || !log.narrowed[0] || log.narrowed[1] {
		t.Errorf("switches %v, want narrowed then widened", log.narrowed)
	}
}

// TestGuardDailyBudget: spend over the day's budget narrows until it is
// more than a day old.
func TestGuardDailyBudget(t *testing.T) {
	g, now, _ := newGuard(t, cost.GuardConfig{DailyBudget: 100})
	for range 10 {
		g.Spent(10)
		*now = now.Add(time.Hour)
	}
	if g.Narrowed() {
		t.Fatal("narrowed at the budget, not over it")
	}
	g.Spent(1)
	if !g.Narrowed() {
		t.Fatal("not narrowed over the budget")
	}
	*now = now.Add(15 * time.Hour) // the first hour's 10 is now over a day old
	if g.Narrowed() {
		t.Fatal("still narrowed once the day's spend fell under the budget")
	}
	*now = now.Add(48 * time.Hour)
	if g.Narrowed() {
		t.Fatal("narrowed after two idle days")
	}
}

// TestGuardOff: without thresholds the guard never narrows.
func TestGuardOff(t *testing.T) {
	g, now, _ := newGuard(t, cost.GuardConfig{})
	g.Spent(1)
	*now = now.Add(time.Hour)
	g.Spent(1e9)
	if g.Narrowed() {
		t.Fatal("narrowed with no threshold")
	}
	if _, err := cost.NewGuard(cost.GuardConfig{Ratio: -1}); !errors.Is(err, cost.ErrInvalidGuard) {
		t.Error("a negative ratio was accepted")
	}
}

// TestGuardShare: guards that share their spend through the journal's
// spend ledger (two instances on one JetStream) count the fleet's: each
// spent under the daily budget, together over it, so both narrow; a day
// later both widen again.
func TestGuardShare(t *testing.T) {
	j := journaltest.New(t, journal.Config{Memory: true})
	var clock atomic.Int64
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	var guards []*cost.Guard
	for _, name := range []string{"instance-a", "instance-b"} {
		g, err := cost.NewGuard(cost.GuardConfig{DailyBudget: 10, Now: now, ShareEvery: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		spend, err := j.Spend(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		var failures atomic.Int64
		go func() {
			defer close(done)
			g.Share(ctx, spend, func(error) { failures.Add(1) })
		}()
		t.Cleanup(func() {
			cancel()
			<-done
			if n := failures.Load(); n != 0 {
				t.Errorf("%s: %d exchanges failed", name, n)
			}
		})
		guards = append(guards, g)
	}
	guards[0].Spent(6)
	guards[1].Spent(6)
	until := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	until("both guards to narrow on the fleet's 12", func() bool { return guards[0].Narrowed() && guards[1].Narrowed() })
	clock.Add(int64(24*time.Hour + time.Minute))
	until("both guards to widen a day later", func() bool { return !guards[0].Narrowed() && !guards[1].Narrowed() })
}
