package cost

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrInvalidGuard is returned by NewGuard for a negative or non-finite
// threshold.
var ErrInvalidGuard = errors.New("cost: invalid cost guard")

// GuardConfig configures a Guard. With neither Ratio nor DailyBudget set
// the guard never narrows.
type GuardConfig struct {
	// Ratio narrows when the last hour's spend exceeds the previous hour's
	// by more than this share (0.3: by more than 30%). Default 0: off.
	Ratio float64
	// MinHourly is the previous hour's spend below which Ratio does not
	// apply: a quiet hour is no baseline. Default 0 (any spend).
	MinHourly float64
	// DailyBudget narrows while the last 24 hours' spend exceeds it.
	// Default 0: off.
	DailyBudget float64
	// OnSwitch, when set, is told each time the guard narrows (with why)
	// or widens again; it must not call the Guard. Default: nobody.
	OnSwitch func(narrowed bool, why string)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Guard watches spend (seed 000 §3.3): when the last hour spent more than
// the previous one by more than Ratio, or the last day more than
// DailyBudget, it reports Narrowed, and the call policy retries connect
// failures only (classify.Config.Narrowed) until spend calms down. It
// counts this instance's spend. Safe for concurrent use.
type Guard struct {
	cfg GuardConfig

	mu       sync.Mutex
	minutes  [guardMinutes]float64 // spend per minute, a ring
	last     int64                 // the newest minute written
	narrowed bool
}

// guardMinutes spans the day the budget covers and the hour before the
// last one.
const guardMinutes = 24*60 + 60

// NewGuard returns a Guard.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	for _, v := range []float64{cfg.Ratio, cfg.MinHourly, cfg.DailyBudget} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%w: thresholds must be finite and not negative", ErrInvalidGuard)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Guard{cfg: cfg}, nil
}

// Spent adds a generation's cost.
func (g *Guard) Spent(cost float64) {
	if cost <= 0 || math.IsNaN(cost) || math.IsInf(cost, 0) {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.advance()
	g.minutes[now%guardMinutes] += cost
	g.check()
}

// Narrowed reports whether retries are narrowed to connect failures now.
func (g *Guard) Narrowed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.advance()
	g.check()
	return g.narrowed
}

// advance clears the minutes that passed since the last write and returns
// the current minute. g.mu is held.
func (g *Guard) advance() int64 {
	now := g.cfg.Now().Unix() / 60
	if g.last == 0 || now-g.last >= guardMinutes {
		g.minutes = [guardMinutes]float64{}
	} else {
		for m := g.last + 1; m <= now; m++ {
			g.minutes[m%guardMinutes] = 0
		}
	}
	if now > g.last {
		g.last = now
	}
	return g.last
}

// sum is the spend of the minutes [now-from, now-to). g.mu is held.
func (g *Guard) sum(from, to int64) float64 {
	var s float64
	for m := g.last - from + 1; m <= g.last-to; m++ {
		s += g.minutes[((m%guardMinutes)+guardMinutes)%guardMinutes]
	}
	return s
}

// check updates narrowed and tells OnSwitch. g.mu is held.
func (g *Guard) check() {
	hour, prev := g.sum(60, 0), g.sum(120, 60)
	why := ""
	switch {
	case g.cfg.DailyBudget > 0 && g.sum(24*60, 0) > g.cfg.DailyBudget:
		why = fmt.Sprintf("the last 24 hours spent more than the daily budget %g", g.cfg.DailyBudget)
	case g.cfg.Ratio > 0 && prev > 0 && prev >= g.cfg.MinHourly && hour > prev*(1+g.cfg.Ratio):
		why = fmt.Sprintf("the last hour spent %g, more than %g%% over the previous hour's %g", hour, g.cfg.Ratio*100, prev)
	}
	if narrowed := why != ""; narrowed != g.narrowed {
		g.narrowed = narrowed
		if g.cfg.OnSwitch != nil {
			g.cfg.OnSwitch(narrowed, why)
		}
	}
}
