package cost

import (
	"context"
	"math"
	"sync"
	"time"
)

// KeySpend is a spend ledger per proxy key: what each key's generations
// cost in the current hour, day and month (UTC calendar windows), this
// instance's and, while Share runs, every other instance's — what a key's
// Budget is held to, fleet-wide. Keys are told apart by a hash of their
// tenant (resume.TenantHash), never the key. Safe for concurrent use.
type KeySpend struct {
	now      func() time.Time
	onChange func()

	mu     sync.Mutex
	mine   map[string]map[string]float64            // key → window id → spend
	others map[string]map[string]map[string]float64 // instance → key → window id → spend
	dirty  chan struct{}                            // mine changed since Share last published it
}

// A KeyFleet shares per-key spend between the instances of one deployment:
// each publishes its own under its own name (no two write one entry) and
// watches everyone else's. journal.KeySpend implements it.
type KeyFleet interface {
	// Publish stores this instance's spend: key → window id → spend.
	Publish(ctx context.Context, spend map[string]map[string]float64) error
	// Watch calls seen with every other instance's spend as it is now and
	// each time it changes, until ctx ends or the watch fails.
	Watch(ctx context.Context, seen func(instance string, spend map[string]map[string]float64)) error
}

// periods are the windows spend is counted in.
var periods = []Period{Hour, Day, Month}

// NewKeySpend returns an empty ledger. now is the clock (nil: time.Now);
// onChange, when set, is told each time the spend it holds changed (it
// must not block).
func NewKeySpend(now func() time.Time, onChange func()) *KeySpend {
	if now == nil {
		now = time.Now
	}
	return &KeySpend{now: now, onChange: onChange, mine: map[string]map[string]float64{},
		others: map[string]map[string]map[string]float64{}, dirty: make(chan struct{}, 1)}
}

// KeySpent adds what a generation of key (a tenant hash) cost.
func (s *KeySpend) KeySpent(key string, cost float64) {
	if cost <= 0 || math.IsNaN(cost) || math.IsInf(cost, 0) {
		return
	}
	now := s.now()
	s.mu.Lock()
	w := s.mine[key]
	if w == nil {
		w = map[string]float64{}
		s.mine[key] = w
	}
	for _, p := range periods {
		w[p.ID(now)] += cost
	}
	s.mu.Unlock()
	select {
	case s.dirty <- struct{}{}:
	default:
	}
	if s.onChange != nil {
		s.onChange()
	}
}

// Spent is what key spent in the current window of p, fleet-wide as far as
// this instance knows.
func (s *KeySpend) Spent(key string, p Period) float64 {
	id := p.ID(s.now())
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := s.mine[key][id]
	for _, inst := range s.others {
		sum += inst[key][id]
	}
	return sum
}

// Over reports whether key spent b's limit in b's current window, and when
// that window ends.
func (s *KeySpend) Over(key string, b Budget) (until time.Time, over bool) {
	if b.IsZero() {
		return time.Time{}, false
	}
	_, end := b.Period.Window(s.now())
	return end, s.Spent(key, b.Period) >= b.Limit
}

// Share makes the ledger count the whole fleet's spend until ctx ends: it
// publishes this instance's spend to f when it changed — at once after a
// quiet spell, then at most once every (a burst is one write) — and
// follows every other instance's. A fleet that fails is tried again after
// every (the spend last learnt stays in force, and this instance's own
// always); each failure is told to failed, when set.
func (s *KeySpend) Share(ctx context.Context, f KeyFleet, every time.Duration, failed func(error)) {
	retry := every
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			err := f.Watch(ctx, s.seen)
			if ctx.Err() != nil {
				return
			}
			if err != nil && failed != nil {
				failed(err)
			}
			sleep(ctx, retry)
		}
	}()
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.dirty:
		}
		if err := f.Publish(ctx, s.current()); err != nil && ctx.Err() == nil {
			if failed != nil {
				failed(err)
			}
			select { // publish again
			case s.dirty <- struct{}{}:
			default:
			}
		}
		sleep(ctx, every)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// seen takes another instance's spend.
func (s *KeySpend) seen(instance string, spend map[string]map[string]float64) {
	s.mu.Lock()
	if spend == nil {
		delete(s.others, instance)
	} else {
		s.others[instance] = spend
	}
	s.mu.Unlock()
	if s.onChange != nil {
		s.onChange()
	}
}

// current is this instance's spend in the current windows (ended windows
// dropped), a copy.
func (s *KeySpend) current() map[string]map[string]float64 {
	now := s.now()
	live := map[string]bool{}
	for _, p := range periods {
		live[p.ID(now)] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]map[string]float64{}
	for key, w := range s.mine {
		for id := range w {
			if !live[id] {
				delete(w, id)
			}
		}
		if len(w) == 0 {
			delete(s.mine, key)
			continue
		}
		c := make(map[string]float64, len(w))
		for id, v := range w {
			c[id] = v
		}
		out[key] = c
	}
	return out
}
