package resume

import (
	"context"
	"errors"
	"sync"
	"time"
)

// A lease runs out by the clock, but a clock runs while nobody can write:
// through a NATS pause every owner's renewals fail, and when NATS returns
// every lease looks expired, though the owners are alive and still hold
// their upstream streams. So a lease that ran out is only judged lost by an
// instance that has itself seen the store answer, without a break, for a
// whole lease: then its owner had every chance to renew, and did not.
// Through an outage, and for a lease after it, nothing is taken over; an
// owner that lived through it renews within Lease/3 of the store's return.
// And a record this instance saw change is judged from the change on: a
// renewal that reached the store late (written before an outage, applied
// after it) carries a lease already run out by the clock, yet shows its
// owner alive.

// contact is what this instance saw of the store: the current run of
// operations that all succeeded, with no gap longer than gap between them
// (a gap is a time nobody here looked: the store may have been away).
type contact struct {
	gap time.Duration

	mu          sync.Mutex
	since, last time.Time // the run's first success and its last; zero: no run
	seen        map[string]sighting
}

// sighting is when this instance first saw a record at its revision.
type sighting struct {
	rev uint64
	at  time.Time
}

// sighted returns since when id's record has been seen at rev: its first
// sight here, or — for a record first seen now — the current run of
// contact's start (it cannot have changed unseen: a renewal in the run
// would carry a lease that has not run out).
func (c *contact) sighted(id string, rev uint64, now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[string]sighting{}
	}
	s, ok := c.seen[id]
	switch {
	case ok && s.rev == rev:
		return s.at
	case ok && rev < s.rev:
		// A read older than one seen already (requests race): the record
		// has moved on, and whatever is decided on this read is written
		// against its revision and refused. It must not undo the sighting.
		return time.Time{}
	case ok: // it changed: its owner wrote, seen from here
		s = sighting{rev: rev, at: now}
	default:
		s = sighting{rev: rev, at: now}
		if !c.since.IsZero() {
			s.at = c.since
		}
	}
	if len(c.seen) >= 4096 { // forget records nobody here looked at for a while
		for k, v := range c.seen {
			if now.Sub(v.at) > 4*c.gap {
				delete(c.seen, k)
			}
		}
	}
	c.seen[id] = s
	return s.at
}

// forget drops id's sighting (its record is no longer in progress).
func (c *contact) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, id)
}

// saw records the outcome of one store operation at now. An operation the
// caller gave up on says nothing of the store.
func (c *contact) saw(now time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case errors.Is(err, context.Canceled):
	case err != nil:
		c.since, c.last = time.Time{}, time.Time{}
	case c.since.IsZero() || now.Sub(c.last) > c.gap:
		c.since, c.last = now, now
	default:
		c.last = now
	}
}

// span is how long, until now, the store has been seen answering without a
// break.
func (c *contact) span(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() || now.Sub(c.last) > c.gap {
		return 0
	}
	return c.last.Sub(c.since)
}

// watchedStore is the Manager's Store, each operation's outcome seen by
// contact.
type watchedStore struct {
	Store
	c   *contact
	now func() time.Time
}

func (s watchedStore) Get(ctx context.Context, id string) ([]byte, uint64, bool, error) {
	v, rev, found, err := s.Store.Get(ctx, id)
	s.c.saw(s.now(), err)
	return v, rev, found, err
}

func (s watchedStore) Create(ctx context.Context, id string, value []byte) (uint64, bool, error) {
	rev, created, err := s.Store.Create(ctx, id, value)
	s.c.saw(s.now(), err)
	return rev, created, err
}

func (s watchedStore) Update(ctx context.Context, id string, value []byte, rev uint64) (uint64, bool, error) {
	nrev, updated, err := s.Store.Update(ctx, id, value, rev)
	s.c.saw(s.now(), err)
	return nrev, updated, err
}

// lapsed reports whether the generation of id's record rec, at revision
// rev, has lost its owner: in progress, its lease run out by the clock, the
// store seen answering here for a whole lease, and the record seen
// unchanged for a whole lease of it (see above).
func (m *Manager) lapsed(id string, rec Record, rev uint64, now time.Time) bool {
	if rec.State != InProgress {
		m.contact.forget(id)
		m.gaveUp.forget(id)
		return false
	}
	if rec.Owner == m.cfg.Owner && m.gaveUp.has(id, rec) {
		return true
	}
	if !rec.Expired(now) {
		m.contact.sighted(id, rev, now)
		return false
	}
	at := m.contact.sighted(id, rev, now)
	return m.contact.span(now) >= m.cfg.Lease && now.Sub(at) >= m.cfg.Lease
}
