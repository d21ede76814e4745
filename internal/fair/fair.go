package fair

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
)

// ErrInvalidOption is returned by New for negative Config.Turns.
var ErrInvalidOption = errors.New("fair: invalid option")

// DefaultQuantum is Config.Quantum's default: far longer than a batch
// takes to write (tens of microseconds), far shorter than a reader
// notices.
const DefaultQuantum = 5 * time.Millisecond

// Config configures a Scheduler.
type Config struct {
	// Turns is how many turns may be held at once. Default (0): one
	// less than runtime.GOMAXPROCS (the goroutines that can run at
	// once), and at least one. The processor left over runs what takes
	// no turns: on a runtime whose every processor always has a holder
	// ready to run, a goroutine the network wakes (a new request, a
	// reply) waits for the runtime's look at the network, up to 10 ms,
	// at each step.
	Turns int
	// Quantum is how long a turn counts: one held longer (its holder
	// blocked on a slow client, or descheduled) no longer holds others
	// up — the next waiter takes a turn of its own. 0 takes the default;
	// negative: a turn counts until it is given back. Default
	// DefaultQuantum (5 ms).
	Quantum time.Duration
}

// Scheduler hands out an instance's turns: a waiting stream gets one when
// fewer than Config.Turns are held, the tenants that wait in rotation, and
// each tenant's streams in the order they asked. Safe for concurrent use.
type Scheduler struct {
	turns   int
	quantum time.Duration

	mu      sync.Mutex
	holders streams            // the streams holding a turn that counts, oldest first
	tenants map[string]*tenant // the tenants with streams waiting
	ring    tenants            // the same, in the order their next turn comes
	waiting int                // streams waiting
	timer   *time.Timer        // expires the oldest holder's turn (expire)
	armed   bool               // timer is set
}

// New returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	if cfg.Turns < 0 {
		return nil, fmt.Errorf("%w: negative turns", ErrInvalidOption)
	}
	if cfg.Turns == 0 {
		cfg.Turns = max(1, runtime.GOMAXPROCS(0)-1)
	}
	if cfg.Quantum == 0 {
		cfg.Quantum = DefaultQuantum
	}
	return &Scheduler{turns: cfg.Turns, quantum: cfg.Quantum, tenants: map[string]*tenant{}}, nil
}

// Stream returns the handle one replay of tenant takes its turns with. A
// nil Scheduler returns a nil Stream, whose turns are free: no scheduling.
func (s *Scheduler) Stream(tenant string) *Stream {
	if s == nil {
		return nil
	}
	return &Stream{s: s, tenant: tenant}
}

// Waiting is how many streams wait for a turn now.
func (s *Scheduler) Waiting() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// state is where a Stream stands.
type state uint8

const (
	idle    state = iota
	waiting       // in its tenant's queue
	holding       // in the holders
	overdue       // holding a turn that no longer counts
)

// Stream takes the turns of one replay. It is used by one goroutine, which
// calls Wait and Done in alternation.
type Stream struct {
	s      *Scheduler
	tenant string

	// Guarded by s.mu.
	state      state
	since      time.Time     // when its quantum started: when it got its turn, or when the first stream waited after
	granted    chan struct{} // a turn given while it waits (made at its first wait)
	prev, next *Stream       // in its tenant's queue, or in the holders
	t          *tenant       // whose queue it waits in
}

// TryWait takes a turn if one is free and nobody waits, and reports
// whether it did. A nil Stream always has one.
func (st *Stream) TryWait() bool {
	if st == nil {
		return true
	}
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free(st)
}

// free gives st a turn if one is free and nobody waits. Its quantum
// starts when somebody does (enqueue): the clock is not read while
// nobody waits.
func (s *Scheduler) free(st *Stream) bool {
	if s.waiting == 0 && s.holders.n < s.turns {
		s.hold(st, time.Time{})
		return true
	}
	return false
}

// Wait takes a turn: at once when one is free and nobody waits, else when
// the stream's turn comes. It fails with ctx's error once ctx ends, and
// then holds no turn.
func (st *Stream) Wait(ctx context.Context) error {
	if st == nil {
		return nil
	}
	s := st.s
	s.mu.Lock()
	if s.free(st) {
		s.mu.Unlock()
		return nil
	}
	if st.granted == nil {
		st.granted = make(chan struct{}, 1)
	}
	s.enqueue(st)
	s.arm()
	s.mu.Unlock()
	select {
	case <-st.granted:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if st.state == waiting {
		s.dequeue(st)
		s.mu.Unlock()
		return ctx.Err()
	}
	s.mu.Unlock()
	<-st.granted // given meanwhile: it is passed on
	st.Done()
	return ctx.Err()
}

// Done gives the stream's turn back; the next waiter gets it.
func (st *Stream) Done() {
	if st == nil {
		return
	}
	s := st.s
	s.mu.Lock()
	defer s.mu.Unlock()
	switch st.state {
	case holding:
		s.holders.remove(st)
	case overdue: // replaced already
	default:
		return
	}
	st.state = idle
	s.grant()
}

// hold gives st a turn that counts, from now.
func (s *Scheduler) hold(st *Stream, now time.Time) {
	st.state, st.since = holding, now
	s.holders.push(st)
}

// enqueue puts st at the back of its tenant's queue, and the tenant at the
// back of the ring if it had nobody waiting. The first to wait starts the
// quantum of the turns taken while nobody did.
func (s *Scheduler) enqueue(st *Stream) {
	if s.waiting == 0 && s.quantum >= 0 {
		now := time.Now()
		for h := s.holders.head; h != nil; h = h.next {
			if h.since.IsZero() {
				h.since = now
			}
		}
	}
	t := s.tenants[st.tenant]
	if t == nil {
		t = &tenant{name: st.tenant}
		s.tenants[st.tenant] = t
		s.ring.push(t)
	}
	st.state, st.t = waiting, t
	t.queue.push(st)
	s.waiting++
}

// dequeue takes st out of its tenant's queue, and the tenant out of the
// ring once nobody of it waits.
func (s *Scheduler) dequeue(st *Stream) {
	t := st.t
	t.queue.remove(st)
	st.state, st.t = idle, nil
	s.waiting--
	if t.queue.n == 0 {
		s.ring.remove(t)
		delete(s.tenants, t.name)
	}
}

// grant gives the free turns to the waiters: the first of the tenant at
// the front of the ring, which then goes to the back.
func (s *Scheduler) grant() {
	var now time.Time
	for s.holders.n < s.turns && s.ring.head != nil {
		t := s.ring.head
		st := t.queue.head
		s.dequeue(st)
		if s.tenants[t.name] == t { // it has others waiting: its next turn after the other tenants'
			s.ring.remove(t)
			s.ring.push(t)
		}
		if now.IsZero() {
			now = time.Now()
		}
		s.hold(st, now)
		st.granted <- struct{}{}
	}
	s.arm()
}

// arm sets the timer for the oldest holder's quantum, when streams wait
// and every turn is held.
func (s *Scheduler) arm() {
	if s.armed || s.waiting == 0 || s.holders.n < s.turns || s.quantum < 0 {
		return
	}
	d := time.Until(s.holders.head.since.Add(s.quantum))
	if s.timer == nil {
		s.timer = time.AfterFunc(d, s.expire)
	} else {
		s.timer.Reset(d)
	}
	s.armed = true
}

// expire ends the turns held longer than the quantum: they stop counting,
// and their places go to the waiters.
func (s *Scheduler) expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	now := time.Now()
	for s.waiting > 0 {
		h := s.holders.head
		if h == nil || now.Sub(h.since) < s.quantum {
			break
		}
		s.holders.remove(h)
		h.state = overdue
		s.grant()
	}
	s.arm()
}

// tenant is one tenant's queue of waiting streams.
type tenant struct {
	name       string
	queue      streams
	prev, next *tenant // in the ring
}

// streams is a list of Streams linked through them: a Stream is in one
// list at most (its tenant's queue or the holders).
type streams struct {
	head, tail *Stream
	n          int
}

func (l *streams) push(st *Stream) {
	st.prev, st.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = st
	} else {
		l.head = st
	}
	l.tail = st
	l.n++
}

func (l *streams) remove(st *Stream) {
	if st.prev != nil {
		st.prev.next = st.next
	} else {
		l.head = st.next
	}
	if st.next != nil {
		st.next.prev = st.prev
	} else {
		l.tail = st.prev
	}
	st.prev, st.next = nil, nil
	l.n--
}

// tenants is the ring of tenants waiting, linked through them.
type tenants struct {
	head, tail *tenant
}

func (l *tenants) push(t *tenant) {
	t.prev, t.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = t
	} else {
		l.head = t
	}
	l.tail = t
}

func (l *tenants) remove(t *tenant) {
	if t.prev != nil {
		t.prev.next = t.next
	} else {
		l.head = t.next
	}
	if t.next != nil {
		t.next.prev = t.prev
	} else {
		l.tail = t.prev
	}
	t.prev, t.next = nil, nil
}
