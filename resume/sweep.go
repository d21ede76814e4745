package resume

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Sweeping. A lapsed lease is settled by whoever looks at its key: a
// reader, a request with the key. A key nobody looks at again — its owner
// died, its client gave up — would stay in progress for as long as its
// record is kept, and its status, its bill and the cost view with it. So
// every instance sweeps: a watch on the records keeps the ones in progress
// in memory with the end of their lease, and every Lease/4 the sweeper
// looks (Get) at each whose lease ran out, as a reader would: the same
// judgment (contact.go), the same settling (adopted, completed by the
// Salvager, or failed OwnerLost), under the same compare-and-set, so two
// instances sweeping one key at once settle it once. A sweep with nothing
// to look at still asks the store once, which keeps this instance's
// contact with it running: a lease that runs out is judged at once, not a
// lease later.
//
// A record is looked at only once this instance has known it, unchanged,
// for a whole lease (the watch's word, besides the clock's): a renewal
// applied late (written before an outage, stored after it) carries a lease
// already run out, yet shows its owner alive.

// Records tells of the records a Store holds and of every change to them.
// journal.Journal implements it.
type Records interface {
	// WatchRecords calls seen with every record held (its id, value and
	// revision), then with every change to one (value nil: removed), from
	// one goroutine in the store's order, until ctx ends or the watch
	// fails; the channel is closed after seen's last call.
	WatchRecords(ctx context.Context, seen func(id string, value []byte, rev uint64)) (<-chan struct{}, error)
}

// sweepWorkers is how many keys one sweep looks at at once: an instance
// that died with a thousand generations leaves a thousand orphans, each a
// few store round trips to settle.
const sweepWorkers = 4

// sweepProbe is the id a sweep with nothing to settle reads: no record's
// (a StreamID is hexadecimal).
const sweepProbe = "reprise-sweep-probe"

// SweepConfig configures Manager.Sweep.
type SweepConfig struct {
	// Records tells of the records. Required.
	Records Records
	// Every is the time between two sweeps. Default: the Manager's
	// Lease/4; at most Lease/2 (the store must be asked more often than
	// once a lease for a lease to be judged lapsed at all, contact.go).
	Every time.Duration
	// Settled, when set, is told of each key a sweep settled, with its
	// record as stored: failed, completed, or adopted (in progress under
	// this instance).
	Settled func(id string, rec Record)
	// Failed, when set, is told of each key a sweep could not look at
	// (the next sweep tries it again), and of a watch that could not be
	// opened (id ""; each sweep tries again, and tells only of the first
	// failure of a run).
	Failed func(id string, err error)
}

// A Sweeper settles, in the background, the keys whose owner's lease
// lapsed (Manager.Sweep).
type Sweeper struct {
	m   *Manager
	cfg SweepConfig

	mu   sync.Mutex
	held map[string]held // the records in progress, by id

	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// held is a record in progress as the watch told of it.
type held struct {
	rev   uint64
	until time.Time // the end of its lease, by its owner's clock
	since time.Time // when it was told of at rev, by this instance's
}

// Sweep starts a Sweeper, which runs until ctx ends or Stop.
func (m *Manager) Sweep(ctx context.Context, cfg SweepConfig) (*Sweeper, error) {
	if cfg.Records == nil {
		return nil, fmt.Errorf("%w: sweep: records are required", ErrInvalidOption)
	}
	if cfg.Every == 0 {
		cfg.Every = m.cfg.Lease / 4
	}
	if cfg.Every < 0 || cfg.Every > m.cfg.Lease/2 {
		return nil, fmt.Errorf("%w: sweep every %s, want up to half the lease (%s)", ErrInvalidOption, cfg.Every, m.cfg.Lease)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Sweeper{m: m, cfg: cfg, held: map[string]held{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer cancel()
		s.run(ctx)
	}()
	return s, nil
}

// Stop stops the sweeper and waits for it; a sweep under way is cut (what
// it did not settle, the next look does). It is idempotent.
func (s *Sweeper) Stop() {
	s.stopOnce.Do(s.cancel)
	<-s.done
}

// Held is how many records in progress the sweeper knows of.
func (s *Sweeper) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

func (s *Sweeper) run(ctx context.Context) {
	defer close(s.done)
	var watching <-chan struct{} // nil while no watch runs
	told := false                // of the watch's last failure
	t := time.NewTimer(0)        // the first sweep opens the watch at once
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if watching != nil {
				<-watching // it ends with ctx
			}
			return
		case <-watching:
			watching = nil // the next sweep opens it again
			continue
		case <-t.C:
		}
		if watching == nil {
			w, err := s.cfg.Records.WatchRecords(ctx, s.seen)
			if err != nil && ctx.Err() == nil && !told {
				s.failed("", err)
			}
			watching, told = w, err != nil
		}
		s.sweep(ctx)
		t.Reset(s.cfg.Every)
	}
}

// inProgressState is how an encoded record in progress says so: most
// records the watch tells of are finished (or the keyless index's
// entries), and are not decoded.
var inProgressState = []byte(`"state":"in_progress"`)

// seen keeps the records in progress the watch tells of.
func (s *Sweeper) seen(id string, value []byte, rev uint64) {
	var rec struct {
		State      State     `json:"state"`
		LeaseUntil time.Time `json:"lease_until"`
	}
	going := bytes.Contains(value, inProgressState) && json.Unmarshal(value, &rec) == nil && rec.State == InProgress
	s.mu.Lock()
	defer s.mu.Unlock()
	if !going {
		delete(s.held, id)
		return
	}
	if h, ok := s.held[id]; ok && h.rev == rev {
		return // told again, by a watch opened again
	}
	s.held[id] = held{rev: rev, until: rec.LeaseUntil, since: s.m.cfg.Now()}
}

// due lists the records whose lease ran out at now, known unchanged for a
// whole lease, the longest run out first.
func (s *Sweeper) due(now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, h := range s.held {
		if now.After(h.until) && now.Sub(h.since) >= s.m.cfg.Lease {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b string) int { return s.held[a].until.Compare(s.held[b].until) })
	return ids
}

// sweep looks at every record due, a few at once, within a lease.
func (s *Sweeper) sweep(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.m.cfg.Lease)
	defer cancel()
	due := s.due(s.m.cfg.Now())
	if len(due) == 0 {
		// Its answer says nothing of any key: only that the store
		// answers (contact.go).
		_, _, _, _ = s.m.cfg.Store.Get(ctx, sweepProbe)
		return
	}
	ids := make(chan string)
	var wg sync.WaitGroup
	for range min(sweepWorkers, len(due)) {
		wg.Go(func() {
			for id := range ids {
				s.settle(ctx, id)
			}
		})
	}
feed:
	for _, id := range due {
		select {
		case ids <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(ids)
	wg.Wait()
}

// settle looks at id's record as a reader would (Get), and forgets it once
// it is no longer in progress.
func (s *Sweeper) settle(ctx context.Context, id string) {
	s.mu.Lock()
	h := s.held[id]
	s.mu.Unlock()
	rec, settled, err := s.m.look(ctx, id, "")
	switch {
	case err != nil && !errors.Is(err, ErrNotFound):
		if ctx.Err() == nil {
			s.failed(id, err)
		}
		return
	case err != nil || rec.State != InProgress:
		s.mu.Lock()
		if s.held[id].rev == h.rev { // the watch told of no newer generation meanwhile
			delete(s.held, id)
		}
		s.mu.Unlock()
	}
	if settled && s.cfg.Settled != nil {
		s.cfg.Settled(id, rec)
	}
}

func (s *Sweeper) failed(id string, err error) {
	if s.cfg.Failed != nil {
		s.cfg.Failed(id, err)
	}
}
