package cost

import (
	"context"
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
	// DailyBudget narrows while the last 24 hours' spend exceeds it (the
	// fleet's while Share runs). Default 0: off.
	DailyBudget float64
	// OnSwitch, when set, is told each time the guard narrows (with why)
	// or widens again; it must not call the Guard. Default: nobody.
	OnSwitch func(narrowed bool, why string)
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// ShareEvery is how often Share exchanges spend with the fleet.
	// Default DefaultShareEvery.
	ShareEvery time.Duration
}

// DefaultShareEvery is how often Share publishes this instance's spend and
// reads the other instances'.
const DefaultShareEvery = 5 * time.Second

// minExchange is the least time one exchange with the fleet is given
// (ShareEvery, when longer).
const minExchange = 2 * time.Second

// A Fleet shares spend between the instances of one deployment: each
// publishes its own spend per minute under its own name (no two write the
// same entry), and reads everyone else's. journal.Spend implements it.
type Fleet interface {
	// Publish stores this instance's spend per minute (Unix minutes).
	Publish(ctx context.Context, minutes map[int64]float64) error
	// Others returns the other instances' spend per minute, summed.
	Others(ctx context.Context) (map[int64]float64, error)
}

// Guard watches spend (seed 000 §3.3): when the last hour spent more than
// the previous one by more than Ratio, or the last day more than
// DailyBudget, it reports Narrowed, and the call policy retries connect
// failures only (classify.Config.Narrowed) until spend calms down. It
// counts this instance's spend and, while Share runs, the fleet's. Safe for
// concurrent use.
type Guard struct {
	cfg GuardConfig

	mu       sync.Mutex
	minutes  [guardMinutes]float64 // this instance's spend per minute, a ring
	others   [guardMinutes]float64 // the other instances', as Share last read it
	last     int64                 // the newest minute written
	dirty    bool                  // minutes changed since Share last published them
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
	if cfg.ShareEvery <= 0 {
		cfg.ShareEvery = DefaultShareEvery
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
	g.dirty = true
	g.check()
}

// Share makes the guard count the whole fleet's spend until ctx ends:
// every ShareEvery it publishes this instance's spend to f (when it
// changed) and reads the other instances'. A fleet that does not answer
// leaves the figures last read in force (and this instance's own always);
// each failure is told to failed, when set.
func (g *Guard) Share(ctx context.Context, f Fleet, failed func(error)) {
	t := time.NewTicker(g.cfg.ShareEvery)
	defer t.Stop()
	for {
		if err := g.exchange(ctx, f); err != nil && ctx.Err() == nil && failed != nil {
			failed(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// exchange publishes this instance's spend, if it changed, and reads the
// others'.
func (g *Guard) exchange(ctx context.Context, f Fleet) error {
	ctx, cancel := context.WithTimeout(ctx, max(g.cfg.ShareEvery, minExchange))
	defer cancel()
	g.mu.Lock()
	now := g.advance()
	var mine map[int64]float64
	if g.dirty {
		mine = map[int64]float64{}
		for m := now - guardMinutes + 1; m <= now; m++ {
			if v := g.minutes[m%guardMinutes]; v != 0 {
				mine[m] = v
			}
		}
		g.dirty = false
	}
	g.mu.Unlock()
	if mine != nil {
		if err := f.Publish(ctx, mine); err != nil {
			g.mu.Lock()
			g.dirty = true
			g.mu.Unlock()
			return err
		}
	}
	others, err := f.Others(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now = g.advance()
	g.others = [guardMinutes]float64{}
	for m, v := range others {
		if m <= now && now-m < guardMinutes && v > 0 && !math.IsInf(v, 0) {
			g.others[m%guardMinutes] += v
		}
	}
	g.check()
	return nil
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
		g.minutes, g.others = [guardMinutes]float64{}, [guardMinutes]float64{}
	} else {
		for m := g.last + 1; m <= now; m++ {
			g.minutes[m%guardMinutes], g.others[m%guardMinutes] = 0, 0
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
		i := ((m % guardMinutes) + guardMinutes) % guardMinutes
		s += g.minutes[i] + g.others[i]
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
