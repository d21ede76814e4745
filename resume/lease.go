package resume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/reprise-dev/reprise/internal/cost"
)

// Lease is an owner's claim on one generation. It heartbeats until Finish;
// Lost is closed once another owner took the key over (renewals that fail
// while the store is away lose nothing: see contact.go).
//
// A lease also runs out by its owner's clock: once no renewal was stored
// for a whole lease, another instance that sees the store may take the key
// over at any moment, and the owner cannot know whether it has until the
// store answers it again. An owner whose store is away (a NATS outage, for
// everyone or only for it) and one that was paused (SIGSTOP, a VM frozen)
// look alike from inside. So the owner holds what it does with its lease:
// it reads nothing more from its upstream (Lapse, Renewed), and reads on
// once a renewal is stored, or stops the upstream call at once when it
// finds the takeover. An upstream that waits for its reader then
// generates no more than the connection's buffers take, and the woken or
// reconnected owner bills no whole second answer; through an outage that
// nobody could take over in, the generation only waits.
type Lease struct {
	m      *Manager
	id     string
	events atomic.Uint64

	// until is the lease's end as last stored (unix ns, its owner's clock);
	// lapsed the end of the latest lease that ran out (by the clock, before
	// the renewal after it), 0 for none; reported the last Lapse reported.
	until, lapsed, reported atomic.Int64
	rmu                     sync.Mutex
	renewed                 chan struct{} // closed and replaced at every renewal stored

	mu   sync.Mutex
	rec  Record
	rev  uint64
	done bool

	settled cost.SavedBy // requests served from the generation Finish moved into Saved

	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	stopped  chan struct{}
}

func (m *Manager) hold(id string, rec Record, rev uint64) *Lease {
	l := &Lease{m: m, id: id, rec: rec, rev: rev, lost: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{}), renewed: make(chan struct{})}
	l.events.Store(rec.Events) // an adopted generation has some already
	l.until.Store(rec.LeaseUntil.UnixNano())
	go l.heartbeat()
	return l
}

// Record returns the record as this owner last wrote it.
func (l *Lease) Record() Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec
}

// Lost is closed when the lease is lost.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// SetEvents records progress; the next heartbeat stores it.
func (l *Lease) SetEvents(n uint64) { l.events.Store(n) }

func (l *Lease) heartbeat() {
	defer close(l.stopped)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop: // Finish or Abandon: a renewal under way is given up
			cancel()
		case <-ctx.Done():
		}
	}()
	every := l.m.cfg.Lease / 3
	// A renewal that fails once the lease ran out by the clock is tried
	// again at once, not at the next tick: the owner holds its generation
	// until it knows (Lapse), and the store's first answer after an outage
	// or a pause tells it.
	again := retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool {
			return err != nil && !errors.Is(err, ErrFenced) && ctx.Err() == nil && l.ranOut()
		}).
		WithBackoff(every/10, every/2).
		WithMaxAttempts(-1).
		Build()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		err := failsafe.With(again).WithContext(ctx).Run(func() error { return l.renew(ctx) })
		// A renewal that fails (the store away) loses nothing: the owner
		// keeps its generation and renews once the store is back — nobody
		// judges its lease lapsed without seeing the store answer for a
		// whole lease (contact.go). Only a takeover ends it.
		if errors.Is(err, ErrFenced) {
			l.markLost()
			return
		}
	}
}

// renew stores the lease's renewal (and the events counted so far).
func (l *Lease) renew(ctx context.Context) error {
	// Half a lease for one renewal: a slow store (a loaded machine, the
	// backlog after an outage) still gets it in before the lease runs
	// out; the next tick waits for it.
	ctx, cancel := context.WithTimeout(ctx, l.m.cfg.Lease/2)
	defer cancel()
	var at time.Time
	err := l.update(ctx, func(r *Record) {
		at = l.m.cfg.Now()
		r.LeaseUntil = at.Add(l.m.cfg.Lease)
		r.Events = l.events.Load()
	})
	if err == nil {
		l.renewedAt(at)
	}
	return err
}

// renewedAt records a renewal stored, written at at: the lease runs to a
// lease after it. A lease that had run out by then lapsed (Lapse).
func (l *Lease) renewedAt(at time.Time) {
	if old := l.until.Load(); at.UnixNano() >= old {
		l.lapsed.Store(old)
	}
	l.until.Store(at.Add(l.m.cfg.Lease).UnixNano())
	l.rmu.Lock()
	defer l.rmu.Unlock()
	close(l.renewed)
	l.renewed = make(chan struct{})
}

// ranOut reports whether the lease has run out by its owner's clock: no
// renewal stored for a whole lease.
func (l *Lease) ranOut() bool { return l.m.cfg.Now().UnixNano() >= l.until.Load() }

// Lapse reports whether the lease ran out by its owner's clock since the
// last call — it has now, or it had when the renewal after it was stored —
// and since when (the end of the lease that ran out). From then on another
// instance may have taken the key over: the owner reads nothing more from
// its upstream until Renewed tells it the lease is its own again.
func (l *Lease) Lapse() (since time.Time, ok bool) {
	if until := l.until.Load(); l.m.cfg.Now().UnixNano() >= until {
		l.lapsed.Store(until)
	}
	if v := l.lapsed.Load(); v != 0 && l.reported.Swap(v) != v {
		return time.Unix(0, v), true
	}
	return time.Time{}, false
}

// Renewed waits while the lease has run out by its owner's clock: it
// returns nil once a renewal is stored (at once when the lease runs),
// ErrFenced when the lease is lost or ended (Finish, Abandon), or ctx's
// error.
func (l *Lease) Renewed(ctx context.Context) error {
	for {
		l.rmu.Lock()
		renewed := l.renewed
		l.rmu.Unlock()
		select {
		case <-l.lost:
			return ErrFenced
		default:
		}
		if !l.ranOut() {
			return nil
		}
		select {
		case <-renewed:
		case <-l.lost:
			return ErrFenced
		case <-l.stopped:
			return ErrFenced
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (l *Lease) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// update applies change to the record under CAS, as long as it is still ours.
func (l *Lease) update(ctx context.Context, change func(*Record)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return ErrFenced
	}
	rec, rev := l.rec, l.rev
	for range maxCAS {
		change(&rec)
		rec.UpdatedAt = l.m.cfg.Now()
		nrev, ok, err := l.m.cfg.Store.Update(ctx, l.id, rec.encode(), rev)
		if err != nil {
			return err
		}
		if ok {
			l.rec, l.rev = rec, nrev
			return nil
		}
		val, crev, found, err := l.m.cfg.Store.Get(ctx, l.id)
		if err != nil {
			return err
		}
		cur, derr := decode(val)
		if !found || derr != nil || cur.Generation != l.rec.Generation || cur.Owner != l.rec.Owner || cur.Attempt != l.rec.Attempt || cur.State != InProgress {
			// Taken over: by a new generation, or by an instance that
			// adopted this one (a new attempt, perhaps of the same owner
			// name after a restart).
			return ErrFenced
		}
		rec, rev = cur, crev
	}
	return ErrContended
}

// Result is how a generation ended.
type Result struct {
	State       State // Completed, Failed or Cancelled
	Events      uint64
	Status      int
	ContentType string
	Error       string      // error code for Failed
	Usage       *cost.Usage // what the upstream reported, or estimated (Basis)
	// Basis is where Usage comes from: Reported when empty and Usage is
	// set; Unknown when Usage is nil.
	Basis    cost.Basis
	Upstream string // the name of the upstream that answered
	// Model is the model the request named; Cost what the generation
	// cost by the price table (nil: no price known).
	Model string
	Cost  *float64
	// Call: the upstream answered the generation and the price table
	// prices its model per call: a call billed.
	Call bool
}

// basis is where res's usage comes from.
func (res Result) basis() cost.Basis {
	switch {
	case res.Usage == nil:
		return cost.Unknown
	case res.Basis == "":
		return cost.Reported
	}
	return res.Basis
}

// Finish stores the generation's result and stops the heartbeat. ErrFenced
// when the key was taken over meanwhile.
func (l *Lease) Finish(ctx context.Context, res Result) error {
	if res.State != Completed && res.State != Failed && res.State != Cancelled {
		return fmt.Errorf("%w: finish state %q", ErrInvalidOption, res.State)
	}
	l.halt()
	l.mu.Lock()
	again := l.done
	l.mu.Unlock()
	if again {
		return ErrFenced
	}
	basis := res.basis()
	var settled cost.SavedBy
	change := func(r *Record) {
		r.State, r.Events, r.Status, r.ContentType, r.Error = res.State, res.Events, res.Status, res.ContentType, res.Error
		// A failed generation's usage is kept too: what it billed, never
		// shown as 0 (Basis says whether it was reported or estimated).
		r.Usage, r.Upstream, r.Model, r.Cost, r.Call = res.Usage, res.Upstream, res.Model, res.Cost, res.Call
		r.UsageBasis, r.BasisGeneration = basis, r.Generation
		r.billAs(res.Usage, basis, res.Cost, res.Call) // applied to a fresh copy on every try: once
		// The requests served from the generation while it ran saved
		// something only if it completed: a failed or cancelled one's
		// readers got no result.
		settled = cost.SavedBy{}
		if res.State == Completed {
			settled = r.PendingBy(r.Attached)
			r.saveBy(settled, res.Usage, res.Cost, res.Call)
		}
		r.Attached, r.AttachedBy = 0, nil
		r.Owner, r.LeaseUntil, r.Caller = "", time.Time{}, nil
	}
	// A store that does not answer (a NATS failover) is asked again until
	// ctx ends: a generation whose result is not recorded is lost once the
	// lease runs out. An update whose answer was lost shows as a finished
	// record on the next try: it is ours if it carries our attempt.
	rp := retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool {
			// ErrContended too: duplicates counting themselves (Duplicate)
			// write the record while it runs. Not a write the store
			// refused for good (it is full).
			return err != nil && !errors.Is(err, ErrFenced) && !refused(err)
		}).
		WithBackoff(100*time.Millisecond, 2*time.Second).
		WithMaxAttempts(-1).
		Build()
	// failsafe answers ctx's error once ctx has ended, even for an update
	// that was applied: the update's own outcome decides.
	var err error
	_ = failsafe.With(rp).WithContext(ctx).Run(func() error {
		err = l.update(ctx, change)
		return err
	})
	if errors.Is(err, ErrFenced) && l.finishedAs(ctx, res.State) {
		err = nil
	}
	l.mu.Lock()
	l.done = true
	if err == nil {
		l.settled = settled
	}
	attempt := l.rec.Attempt
	l.mu.Unlock()
	if err != nil && !errors.Is(err, ErrFenced) {
		l.m.gaveUp.add(l.id, attempt)
	}
	return err
}

// Abandon stops renewing the lease without recording a result: its owner
// cannot tell how the generation ended (the journal could not be settled).
// The record is left to run out, and whoever then finds it lapsed settles
// it (the Salvager seals the journal and records what it holds).
func (l *Lease) Abandon() {
	l.halt()
	l.mu.Lock()
	l.done = true
	attempt := l.rec.Attempt
	l.mu.Unlock()
	l.m.gaveUp.add(l.id, attempt)
}

// Settled is the requests, by kind, served from the generation while it
// ran that Finish counted into the record's Saved (none unless it
// completed).
func (l *Lease) Settled() cost.SavedBy {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settled
}

// finishedAs reports whether the stored record is this lease's generation
// finished with state: a Finish whose answer was lost.
func (l *Lease) finishedAs(ctx context.Context, state State) bool {
	val, _, found, err := l.m.cfg.Store.Get(ctx, l.id)
	if err != nil || !found {
		return false
	}
	cur, err := decode(val)
	rec := l.Record()
	return err == nil && rec.Attempt != "" && cur.Attempt == rec.Attempt && cur.Generation == rec.Generation && cur.State == state
}

func (l *Lease) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.stopped
}
