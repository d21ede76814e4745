package cost_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
)

func TestBudgetParse(t *testing.T) {
	for in, want := range map[string]cost.Budget{
		"25/day": {Limit: 25, Period: cost.Day}, "0.5/hour": {Limit: 0.5, Period: cost.Hour}, "$300/month": {Limit: 300, Period: cost.Month},
	} {
		if got, err := cost.ParseBudget(in); err != nil || got != want || got.String() != want.String() {
			t.Errorf("ParseBudget(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"25", "25/week", "-1/day", "0/day", "x/day", "NaN/day", "Inf/day"} {
		if _, err := cost.ParseBudget(in); !errors.Is(err, cost.ErrInvalidBudget) {
			t.Errorf("ParseBudget(%q): %v, want ErrInvalidBudget", in, err)
		}
	}
}

func TestBudgetWindows(t *testing.T) {
	at := time.Date(2026, 12, 31, 23, 30, 0, 0, time.FixedZone("x", 3600)) // 22:30 UTC
	for p, want := range map[cost.Period][2]string{
		cost.Hour:  {"2026-12-31T22:00:00Z", "2026-12-31T23:00:00Z"},
		cost.Day:   {"2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"},
		cost.Month: {"2026-12-01T00:00:00Z", "2027-01-01T00:00:00Z"},
	} {
		start, end := p.Window(at)
		if start.Format(time.RFC3339) != want[0] || end.Format(time.RFC3339) != want[1] {
			t.Errorf("%s window of %s: %s – %s, want %s – %s", p, at, start, end, want[0], want[1])
		}
	}
}

// fleet is two KeySpend ledgers' exchange in memory: what one publishes
// the other's watch sees.
type fleet struct {
	mu       sync.Mutex
	entries  map[string]map[string]map[string]float64
	watchers map[string]func(string, map[string]map[string]float64)
}

type member struct {
	f    *fleet
	name string
}

func (m member) Publish(_ context.Context, spend map[string]map[string]float64) error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	m.f.entries[m.name] = spend
	for name, w := range m.f.watchers {
		if name != m.name {
			w(m.name, spend)
		}
	}
	return nil
}

func (m member) Watch(ctx context.Context, seen func(string, map[string]map[string]float64)) error {
	m.f.mu.Lock()
	for name, e := range m.f.entries {
		if name != m.name {
			seen(name, e)
		}
	}
	m.f.watchers[m.name] = seen
	m.f.mu.Unlock()
	<-ctx.Done()
	return nil
}

// TestKeySpendFleet: a key's spend on one instance counts on another
// through the fleet; its budget holds on both; a new window starts at zero.
func TestKeySpendFleet(t *testing.T) {
	now := time.Date(2026, 12, 8, 10, 15, 0, 0, time.UTC)
	var clock sync.Mutex
	at := func() time.Time { clock.Lock(); defer clock.Unlock(); return now }
	changed := make(chan struct{}, 16)
	f := &fleet{entries: map[string]map[string]map[string]float64{}, watchers: map[string]func(string, map[string]map[string]float64){}}
	a := cost.NewKeySpend(at, nil)
	b := cost.NewKeySpend(at, func() { changed <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for name, s := range map[string]*cost.KeySpend{"a": a, "b": b} {
		wg.Add(1)
		go func() { defer wg.Done(); s.Share(ctx, member{f, name}, time.Millisecond, nil) }()
	}
	defer func() { cancel(); wg.Wait() }()

	budget := cost.Budget{Limit: 10, Period: cost.Day}
	a.KeySpent("k1", 6)
	a.KeySpent("k1", 5)
	a.KeySpent("k2", 1)
	if until, over := a.Over("k1", budget); !over || !until.Equal(time.Date(2026, 12, 9, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("A: over %v until %s; want over until the day's end", over, until)
	}
	for b.Spent("k1", cost.Day) < 11 {
		<-changed
	}
	if _, over := b.Over("k1", budget); !over {
		t.Error("B: k1 not over budget")
	}
	if _, over := b.Over("k2", budget); over {
		t.Error("B: k2 over budget")
	}
	if got := b.Spent("k1", cost.Hour); got != 11 {
		t.Errorf("B: k1's hour %g, want 11", got)
	}
	clock.Lock()
	now = now.Add(24 * time.Hour)
	clock.Unlock()
	if _, over := b.Over("k1", budget); over {
		t.Error("B: k1 over budget the next day")
	}
}

// TestLoadLine: a price file that does not read is refused with its line.
func TestLoadLine(t *testing.T) {
	path := t.TempDir() + "/prices.json"
	if err := os.WriteFile(path, []byte("{\n  \"a\": {\"input_per_1m\": 1},\n  \"b\": {\"inptu_per_1m\": 2}\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cost.Load(path); !errors.Is(err, cost.ErrInvalidPrices) || !strings.Contains(err.Error(), path+":3:") {
		t.Errorf("Load: %v; want the error at %s:3", err, path)
	}
}
