package resume_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// lookStore is a Store that signals each Get on looks (dropped when a
// signal already waits).
type lookStore struct {
	resume.Store
	looks chan struct{}
}

func (s lookStore) Get(ctx context.Context, id string) ([]byte, uint64, bool, error) {
	v, rev, found, err := s.Store.Get(ctx, id)
	select {
	case s.looks <- struct{}{}:
	default:
	}
	return v, rev, found, err
}

// settledKey is one key a Sweeper settled.
type settledKey struct {
	id  string
	rec resume.Record
	at  time.Time
}

// startSweep starts m's Sweeper on store, every every, telling of each key
// it settles on the channel returned; it is stopped when the test ends.
func startSweep(tb testing.TB, m *resume.Manager, store *journal.Journal, every time.Duration) (*resume.Sweeper, <-chan settledKey) {
	tb.Helper()
	settled := make(chan settledKey, 16)
	s, err := m.Sweep(context.Background(), resume.SweepConfig{
		Records: store, Every: every,
		Settled: func(id string, rec resume.Record) { settled <- settledKey{id: id, rec: rec, at: time.Now()} },
		Failed:  func(id string, err error) { tb.Logf("sweep: %s: %v", id, err) },
	})
	if err != nil {
		tb.Fatalf("Sweep: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s, settled
}

// waitSettled waits (bounded) for the sweeper to settle a key.
func waitSettled(tb testing.TB, settled <-chan settledKey) settledKey {
	tb.Helper()
	select {
	case s := <-settled:
		return s
	case <-time.After(waitTimeout):
		tb.Fatal("no key was settled")
	}
	return settledKey{}
}

// notSettled fails when the sweeper settled a key.
func notSettled(tb testing.TB, settled <-chan settledKey, when string) {
	tb.Helper()
	select {
	case s := <-settled:
		tb.Fatalf("%s: the sweeper settled %s: %+v", when, s.id, s.rec)
	default:
	}
}

// waitLooks waits (bounded) for n more Gets on s.
func waitLooks(tb testing.TB, s lookStore, n int) {
	tb.Helper()
	for range n {
		select {
		case <-s.looks:
		case <-time.After(waitTimeout):
			tb.Fatal("the sweeper did not look at the store")
		}
	}
}

// TestSweepSettlesOrphans: a generation whose owner died is settled with
// nobody looking at its key — failed owner_lost, or completed when the
// Salvager finds it whole, billed then — within its lease and a sweep
// after its owner's last renewal. Two instances sweeping at once settle it
// once: both ask the Salvager (each holds the other back until both have),
// one records it, and only that one bills it.
func TestSweepSettlesOrphans(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	for _, tc := range []struct {
		name  string
		whole bool
		state resume.State
		code  string
	}{
		{"failed", false, resume.Failed, resume.OwnerLost},
		{"completed", true, resume.Completed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := newStore(t)
			owner := newManager(t, store, "owner-a", lease, nil)
			var asked, told atomic.Int32
			both := make(chan struct{})
			var once sync.Once
			sweepers := make([]<-chan settledKey, 2)
			for i, name := range []string{"owner-b", "owner-c"} {
				m := newManagerWith(t, resume.Config{Store: store, Owner: name, Lease: lease, Salvager: salvager{
					salvage: func(resume.Record) (resume.Result, bool, error) {
						if asked.Add(1) == 2 {
							once.Do(func() { close(both) })
						}
						select { // the other sweeper finds it in progress too
						case <-both:
						case <-time.After(waitTimeout):
							t.Error("only one sweeper asked the Salvager")
						}
						if !tc.whole {
							return resume.Result{}, false, nil
						}
						return resume.Result{State: resume.Completed, Events: 7, Status: 200, ContentType: "text/event-stream",
							Usage: &salvagedUsage, Cost: &salvagedCost}, true, nil
					},
					salvaged: func(resume.Record) { told.Add(1) },
				}})
				_, sweepers[i] = startSweep(t, m, store, 0)
			}
			req := request("orphan-"+tc.name, "body")
			l := mustStart(t, owner, req)
			l.Abandon() // its owner dies: nothing renews the lease
			died := time.Now()

			var got settledKey
			select {
			case got = <-sweepers[0]:
			case got = <-sweepers[1]:
			case <-time.After(waitTimeout):
				t.Fatal("the orphan was not settled")
			}
			took := got.at.Sub(died)
			t.Logf("settled %s %.2f s after its owner died (lease %s)", got.rec.State, took.Seconds(), owner.Lease())
			if took > owner.Lease()+2*time.Second {
				t.Errorf("settled %s after its owner died, want within the lease and a few seconds", took)
			}
			s := stored(t, store, req.ID)
			if got.id != req.ID || s.State != tc.state || s.Error != tc.code || s.Generation != 1 {
				t.Fatalf("settled %s, stored %+v; want %s %s %q generation 1", got.id, s, req.ID, tc.state, tc.code)
			}
			for _, ch := range sweepers {
				notSettled(t, ch, "once the key was settled")
			}
			if !tc.whole {
				if told.Load() != 0 || s.Billed != nil {
					t.Fatalf("a failed orphan billed %+v, Salvaged told %d times; want nothing", s.Billed, told.Load())
				}
				return
			}
			if told.Load() != 1 || s.Billed == nil || s.Billed.Usage != salvagedUsage || s.Billed.Generations != 1 || *s.Billed.Cost != salvagedCost {
				t.Fatalf("completed orphan billed %+v, Salvaged told %d times; want %+v costing %v once", s.Billed, told.Load(), salvagedUsage, salvagedCost)
			}
		})
	}
}

// TestSweepSparesLiveOwners: a sweeper leaves alone a generation whose
// owner renews its lease, for as long as it does.
func TestSweepSparesLiveOwners(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	store := newStore(t)
	owner := newManager(t, store, "owner-a", lease, nil)
	_, settled := startSweep(t, newManager(t, store, "owner-b", lease, nil), store, 0)
	req := request("live", "body")
	renewals := make(chan struct{}, 64)
	ctx, stop := context.WithCancel(waitCtx(t))
	defer stop()
	if _, err := store.WatchRecords(ctx, func(id string, _ []byte, _ uint64) {
		if id == req.ID {
			renewals <- struct{}{}
		}
	}); err != nil {
		t.Fatal(err)
	}
	l := mustStart(t, owner, req)
	for range 8 { // the start and seven renewals: over two leases
		select {
		case <-renewals:
		case <-time.After(waitTimeout):
			t.Fatal("the owner stopped renewing")
		}
	}
	notSettled(t, settled, "after two leases of renewals")
	select {
	case <-l.Lost():
		t.Fatal("the owner lost its lease")
	default:
	}
	if s := stored(t, store, req.ID); s.State != resume.InProgress || s.Owner != "owner-a" {
		t.Fatalf("stored %+v, want in progress under owner-a", s)
	}
}

// TestSweepWaitsForALeaseOfContact: a sweeper judges a lease as a reader
// does: only once it has seen the store answer for a whole lease. Through
// an outage every lease runs out by the clock while the owners cannot
// renew: a sweeper whose store failed settles nothing until it has seen
// it answer for a lease again — its watch told of the record long before
// — and then settles what did not renew.
func TestSweepWaitsForALeaseOfContact(t *testing.T) {
	t.Parallel()
	const lease = 40 * time.Second
	store := newStore(t)
	clk := newClock()
	owner := newManager(t, store, "owner-a", lease, clk.Now)
	req := request("contact", "body")
	mustStart(t, owner, req)
	fs := &flakyStore{Store: store}
	fs.down.Store(true)
	ls := lookStore{Store: fs, looks: make(chan struct{}, 1)}
	m, err := resume.New(resume.Config{Store: ls, Owner: "owner-b", Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	sw, settled := startSweep(t, m, store, 10*time.Millisecond)
	eventually(t, "the sweeper to know of the record", func() bool { return sw.Held() == 1 })
	for range 12 { // the lease runs out by the clock, and a lease more, the store away
		clk.Advance(lease / 4)
		waitLooks(t, ls, 2)
	}
	notSettled(t, settled, "while the store failed")
	fs.down.Store(false)
	back := clk.Now()
	for range 3 {
		waitLooks(t, ls, 2)
		notSettled(t, settled, "before a lease of contact")
		clk.Advance(lease / 4)
	}
	waitLooks(t, ls, 2)
	notSettled(t, settled, "three quarters of a lease after the store came back")
	clk.Advance(lease / 4)
	got := waitSettled(t, settled)
	if got.id != req.ID || got.rec.State != resume.Failed || got.rec.Error != resume.OwnerLost {
		t.Fatalf("settled %s %+v, want %s failed owner_lost", got.id, got.rec, req.ID)
	}
	if after := got.rec.UpdatedAt.Sub(back); after < lease {
		t.Fatalf("settled %s after the store came back, want a lease at least", after)
	}
	eventually(t, "the sweeper to forget the settled record", func() bool { return sw.Held() == 0 })
}

// TestSweepWaitsOutALateRenewal: a record the sweeper sees change is
// judged from the change on. A renewal written before an outage and
// stored after it carries a lease already run out, yet shows its owner
// alive: it is settled only a lease after it was stored, though this
// instance has been in contact with the store all along.
func TestSweepWaitsOutALateRenewal(t *testing.T) {
	t.Parallel()
	const lease = 40 * time.Second
	store := newStore(t)
	clk := newClock()
	ls := lookStore{Store: store, looks: make(chan struct{}, 1)}
	m, err := resume.New(resume.Config{Store: ls, Owner: "owner-b", Lease: lease, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	sw, settled := startSweep(t, m, store, 10*time.Millisecond)
	waitLooks(t, ls, 2)
	for range 5 { // a lease and more of contact
		clk.Advance(lease / 4)
		waitLooks(t, ls, 2)
	}
	req := request("late", "body")
	now := clk.Now()
	late, err := json.Marshal(resume.Record{Key: req.Key, State: resume.InProgress, Fingerprint: req.Fingerprint, Generation: 1,
		Owner: "owner-a", Attempt: "a1", LeaseUntil: now.Add(-lease), Path: req.Path, Stream: true, CreatedAt: now.Add(-3 * lease), UpdatedAt: now.Add(-2 * lease)})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.Create(waitCtx(t), req.ID, late); err != nil || !ok {
		t.Fatalf("storing the late renewal: %v, %v", ok, err)
	}
	eventually(t, "the sweeper to know of the record", func() bool { return sw.Held() == 1 })
	for range 3 {
		waitLooks(t, ls, 2)
		notSettled(t, settled, "less than a lease after the record changed")
		clk.Advance(lease / 4)
	}
	waitLooks(t, ls, 2)
	notSettled(t, settled, "three quarters of a lease after the record changed")
	clk.Advance(lease / 4)
	got := waitSettled(t, settled)
	if got.id != req.ID || got.rec.State != resume.Failed {
		t.Fatalf("settled %s %+v, want %s failed", got.id, got.rec, req.ID)
	}
	if after := got.rec.UpdatedAt.Sub(now); after < lease {
		t.Fatalf("settled %s after the record changed, want a lease at least", after)
	}
}

// TestSweepConfig: the records are required, and a sweep at least every
// half lease (the contact rule needs a look within every lease); Stop is
// idempotent and waits for the sweeper, as does the end of its context.
func TestSweepConfig(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	m := newManager(t, store, "owner-b", time.Second, nil)
	for _, cfg := range []resume.SweepConfig{
		{},
		{Records: store, Every: 600 * time.Millisecond},
		{Records: store, Every: -time.Second},
	} {
		if _, err := m.Sweep(context.Background(), cfg); !errors.Is(err, resume.ErrInvalidOption) {
			t.Errorf("Sweep(every %s, records %v) = %v, want ErrInvalidOption", cfg.Every, cfg.Records != nil, err)
		}
	}
	s, err := m.Sweep(context.Background(), resume.SweepConfig{Records: store})
	if err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	s, err = m.Sweep(ctx, resume.SweepConfig{Records: store})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	s.Stop()
}

// TestSweepTellsOfAWatchFailureOnce: a watch that ends (its connection
// closed) is opened again by each sweep; a run of failures to open it is
// told of once, and the sweeps go on.
func TestSweepTellsOfAWatchFailureOnce(t *testing.T) {
	t.Parallel()
	nc := journaltest.Connect(t, journaltest.Server(t, ""))
	store := journaltest.Open(t, nc, journal.Config{Memory: true})
	ls := lookStore{Store: store, looks: make(chan struct{}, 1)}
	m, err := resume.New(resume.Config{Store: ls, Owner: "owner-b", Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var watchFailures atomic.Int32
	s, err := m.Sweep(context.Background(), resume.SweepConfig{Records: store, Every: 10 * time.Millisecond,
		Failed: func(id string, err error) {
			if id == "" {
				watchFailures.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	waitLooks(t, ls, 2)
	nc.Close()
	eventually(t, "the watch's failure to be told of", func() bool { return watchFailures.Load() > 0 })
	waitLooks(t, ls, 5) // five sweeps more, each trying the watch again
	if n := watchFailures.Load(); n != 1 {
		t.Fatalf("told of %d watch failures, want 1", n)
	}
}
