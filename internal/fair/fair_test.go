package fair

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func newScheduler(tb testing.TB, turns int, quantum time.Duration) *Scheduler {
	tb.Helper()
	s, err := New(Config{Turns: turns, Quantum: quantum})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// take has st take a turn, failing the test if it cannot.
func take(tb testing.TB, st *Stream) {
	tb.Helper()
	if err := st.Wait(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// settled fails the test unless s holds no turn, has nobody waiting and
// keeps no tenant: everything given back was forgotten.
func settled(tb testing.TB, s *Scheduler) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.holders.n != 0 || s.waiting != 0 || len(s.tenants) != 0 || s.ring.head != nil {
		tb.Errorf("scheduler not idle: %d holding, %d waiting, %d tenants kept", s.holders.n, s.waiting, len(s.tenants))
	}
}

// TestTurnsGoRoundTheTenants: with every turn held, the turns given back
// go to the waiting tenants in rotation, and to each tenant's streams in
// the order they asked: tenant B's one stream, asking after tenant A's
// three, gets the second turn, not the fourth.
func TestTurnsGoRoundTheTenants(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, 1, -1)
		holder := s.Stream("a")
		take(t, holder)
		var mu sync.Mutex
		var order []string
		for _, name := range []string{"a1", "a2", "a3", "b1"} {
			st := s.Stream(name[:1])
			go func() {
				take(t, st)
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				st.Done()
			}()
			synctest.Wait() // it waits: the next asks after it
		}
		if got := s.Waiting(); got != 4 {
			t.Fatalf("Waiting() = %d, want 4", got)
		}
		holder.Done()
		synctest.Wait()
		if want := []string{"a1", "b1", "a2", "a3"}; !slices.Equal(order, want) {
			t.Errorf("turns went to %v, want %v", order, want)
		}
		settled(t, s)
	})
}

// TestTurnsBoundHolders: no more streams hold a turn than there are
// turns; one given back goes to a waiter at once.
func TestTurnsBoundHolders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, 2, -1)
		a, b, c := s.Stream("t"), s.Stream("t"), s.Stream("u")
		take(t, a)
		if !b.TryWait() {
			t.Fatal("the second turn was not free")
		}
		if c.TryWait() {
			t.Fatal("a third stream took a turn of two")
		}
		got := make(chan struct{})
		go func() {
			take(t, c)
			close(got)
		}()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a third stream took a turn while two were held")
		default:
		}
		a.Done()
		synctest.Wait()
		select {
		case <-got:
		default:
			t.Fatal("the turn given back did not go to the waiter")
		}
		b.Done()
		c.Done()
		settled(t, s)
	})
}

// TestCancelledWaitHoldsNoTurn: a stream whose context ends while it waits
// leaves the queue with ctx's error; the turn given back later goes to the
// next waiter, and then nothing is held or kept.
func TestCancelledWaitHoldsNoTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, 1, -1)
		holder, gone, next := s.Stream("a"), s.Stream("b"), s.Stream("c")
		take(t, holder)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- gone.Wait(ctx) }()
		synctest.Wait()
		got := make(chan struct{})
		go func() {
			take(t, next)
			close(got)
		}()
		synctest.Wait()
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}
		if w := s.Waiting(); w != 1 {
			t.Errorf("Waiting() = %d after the cancel, want 1", w)
		}
		holder.Done()
		synctest.Wait()
		select {
		case <-got:
		default:
			t.Fatal("the turn went to the stream that left, not to the next")
		}
		next.Done()
		settled(t, s)
	})
}

// TestCancelMeetingTheTurnPassesItOn: a turn given to a stream whose
// context ends at the same moment is either taken (Wait returns nil) or
// passed on to the next waiter (Wait returns ctx's error): never lost.
// The rounds alternate which comes first.
func TestCancelMeetingTheTurnPassesItOn(t *testing.T) {
	var taken, passed int
	for round := range 100 {
		synctest.Test(t, func(t *testing.T) {
			s := newScheduler(t, 1, -1)
			holder, racer, next := s.Stream("a"), s.Stream("b"), s.Stream("c")
			take(t, holder)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- racer.Wait(ctx) }()
			synctest.Wait()
			got := make(chan struct{})
			go func() {
				take(t, next)
				close(got)
			}()
			synctest.Wait()
			if round%2 == 0 {
				holder.Done() // the turn goes to racer …
				cancel()      // … whose context ends before it runs
			} else {
				cancel()      // racer's context ends …
				holder.Done() // … and the turn goes to it before it runs
			}
			err := <-errc
			synctest.Wait()
			switch {
			case err == nil:
				taken++
				select {
				case <-got:
					t.Fatal("two streams hold the one turn")
				default:
				}
				racer.Done()
				synctest.Wait()
			case errors.Is(err, context.Canceled):
				passed++
			default:
				t.Fatalf("Wait = %v", err)
			}
			select {
			case <-got:
			default:
				t.Fatal("the turn was lost: the next waiter never got it")
			}
			next.Done()
			settled(t, s)
		})
	}
	if taken == 0 || passed == 0 {
		t.Logf("of 100 rounds, %d took the turn and %d passed it on: one order was not exercised", taken, passed)
	}
}

// TestOverdueTurnLetsTheNextGo: a turn held past the quantum (its holder
// blocked) stops counting: a waiter gets a turn then, not when the holder
// wakes; the overdue turn given back frees no second place.
func TestOverdueTurnLetsTheNextGo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const quantum = 10 * time.Millisecond
		s := newScheduler(t, 1, quantum)
		stuck, waiter, third := s.Stream("a"), s.Stream("b"), s.Stream("c")
		take(t, stuck)
		start := time.Now()
		take(t, waiter)
		if waited := time.Since(start); waited != quantum {
			t.Errorf("the waiter got its turn after %v, want the quantum %v", waited, quantum)
		}
		stuck.Done() // overdue: its place was given already
		if third.TryWait() {
			t.Fatal("the overdue turn given back freed a second place")
		}
		waiter.Done()
		if !third.TryWait() {
			t.Fatal("the turn given back was not free")
		}
		third.Done()
		settled(t, s)
	})
}

// TestTurnsWithoutQuantumCountUntilGivenBack: with a negative quantum a
// held turn never expires.
func TestTurnsWithoutQuantumCountUntilGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t, 1, -1)
		holder, waiter := s.Stream("a"), s.Stream("b")
		take(t, holder)
		got := make(chan struct{})
		go func() {
			take(t, waiter)
			close(got)
		}()
		time.Sleep(time.Hour)
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("a turn without a quantum expired")
		default:
		}
		holder.Done()
		<-got
		waiter.Done()
		settled(t, s)
	})
}

// TestNilSchedulerTakesNoTurns: a nil Scheduler's streams never wait.
func TestNilSchedulerTakesNoTurns(t *testing.T) {
	var s *Scheduler
	st := s.Stream("a")
	if !st.TryWait() || st.Wait(context.Background()) != nil || s.Waiting() != 0 {
		t.Fatal("a nil scheduler's stream waited")
	}
	st.Done()
}

// TestNewRejectsNegativeTurns: negative turns are ErrInvalidOption; zero
// takes one turn fewer than GOMAXPROCS, at least one.
func TestNewRejectsNegativeTurns(t *testing.T) {
	if _, err := New(Config{Turns: -1}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New(Turns: -1) = %v, want ErrInvalidOption", err)
	}
	s, err := New(Config{})
	if err != nil || s.turns != max(1, runtime.GOMAXPROCS(0)-1) || s.quantum != DefaultQuantum {
		t.Errorf("New(Config{}) = %+v, %v: want GOMAXPROCS-1 turns (at least 1) and the default quantum", s, err)
	}
}

// BenchmarkUncontendedTurn is what a replay alone pays per batch: a turn
// taken and given back with nobody else asking.
func BenchmarkUncontendedTurn(b *testing.B) {
	st := newScheduler(b, 0, 0).Stream("a")
	ctx := context.Background()
	for b.Loop() {
		if err := st.Wait(ctx); err != nil {
			b.Fatal(err)
		}
		st.Done()
	}
}
