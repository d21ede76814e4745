package resume

import (
	"context"
	"sync"
	"time"
)

// An owner's lease is the safety net for every way it can stop: it runs
// out a lease after the owner's last renewal. An owner whose process died
// is known sooner when the store can tell (Config.Gone: its connection
// closed), and a reader whose generation went quiet asks (Check): then the
// generation is settled at once, as if its lease had run out — adopted by
// an Adopter that can continue it, completed when the Salvager finds its
// terminal event stored, else failed OwnerLost with its journal sealed —
// by the same look and under the same compare-and-set as any lapsed
// lease. An owner found gone that was in fact only cut off is fenced so:
// its next renewal finds the record moved on, and its journal is sealed.
// Only a positive answer counts: an owner that does not answer (paused,
// slow, the store away) is left to its lease.

// ownerFresh is how long an answer about an owner serves every reader of
// this instance: one ask per owner, not one per reader or generation.
const ownerFresh = 250 * time.Millisecond

// maxOwners bounds the answers kept.
const maxOwners = 1024

// owners shares Config.Gone's answers among this instance's readers.
type owners struct {
	mu   sync.Mutex
	seen map[string]*ownerAnswer
}

// ownerAnswer is one ask about an owner: done is closed once gone and at
// are set.
type ownerAnswer struct {
	done chan struct{}
	gone bool
	at   time.Time
}

// gone reports whether owner is gone, asking ask unless an answer fresher
// than ownerFresh is known or one is being asked for already. An error
// (ask's, or ctx's) says nothing of the owner.
func (o *owners) gone(ctx context.Context, owner string, now func() time.Time, ask func(context.Context, string) (bool, error)) (bool, error) {
	o.mu.Lock()
	if o.seen == nil {
		o.seen = map[string]*ownerAnswer{}
	}
	a, ok := o.seen[owner]
	if ok {
		select {
		case <-a.done:
			if now().Sub(a.at) >= ownerFresh {
				ok = false
			}
		default: // being asked
		}
	}
	if !ok {
		if len(o.seen) >= maxOwners {
			for k, v := range o.seen {
				select {
				case <-v.done:
					delete(o.seen, k)
				default:
				}
			}
		}
		a = &ownerAnswer{done: make(chan struct{})}
		o.seen[owner] = a
		o.mu.Unlock()
		gone, err := ask(ctx, owner)
		o.mu.Lock()
		a.gone, a.at = gone && err == nil, now()
		if err != nil {
			delete(o.seen, owner) // nothing learnt: the next reader asks again
		}
		close(a.done)
		o.mu.Unlock()
		return a.gone, err
	}
	o.mu.Unlock()
	select {
	case <-a.done:
		return a.gone, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// Checked is Check's answer.
type Checked struct {
	// Gone: the owner asked about is gone. Record is then the key's
	// record, as the check left it.
	Gone   bool
	Record Record
	// Settled: this check settled the generation itself (adopted,
	// completed or failed it), not another reader or instance before it.
	Settled bool
}

// Check is for a reader whose generation, run by owner on another
// instance, went quiet: when owner is gone (Config.Gone), id's generation
// in progress under it is settled at once, as a lapsed lease is (see
// above). When owner is not found gone (or is this instance, or no
// Config.Gone is set) it reads no record: a quiet generation of a live
// owner costs an ask, shared by every reader here, and no store
// operation.
func (m *Manager) Check(ctx context.Context, id, owner string) (Checked, error) {
	if m.cfg.Gone == nil || owner == "" || owner == m.cfg.Owner {
		return Checked{}, nil
	}
	if gone, err := m.owners.gone(ctx, owner, m.cfg.Now, m.cfg.Gone); !gone || err != nil {
		return Checked{}, err
	}
	rec, settled, err := m.look(ctx, id, owner)
	return Checked{Gone: true, Record: rec, Settled: settled}, err
}

// Owner is the name this instance writes in the records of the
// generations it runs (Config.Owner).
func (m *Manager) Owner() string { return m.cfg.Owner }

// ownerGone reports whether rec is a generation in progress under gone,
// an owner found gone (Check) — never this instance.
func (m *Manager) ownerGone(rec Record, gone string) bool {
	return gone != "" && gone != m.cfg.Owner && rec.State == InProgress && rec.Owner == gone
}
