package cost_test

import (
	"errors"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/cost"
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
