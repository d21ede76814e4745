package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/reprise-dev/reprise/journal"
)

// ErrUnread is the cause a streamed generation that nobody read for
// Limits.CancelUnread ends with: a cancel (the key is cancelled, and may
// generate again), decided by its owner.
var ErrUnread = fmt.Errorf("%w: nobody read it", ErrCancelled)

// unread keeps when each streamed generation running here was last read,
// on any instance: every instance with readers of a key says so over NATS
// (Server's reading signals, heard by Reading). Its clock starts when its
// upstream answered (answered): until then its initiating client waits,
// and nothing can be read however long the upstream takes. A generation
// adopted from an owner that died starts it at once.
type unread struct {
	after time.Duration
	mu    sync.Mutex
	last  map[journal.Ref]time.Time // zero: not answered yet
}

// add tracks ref's generation; its clock starts now if started is set,
// else when answered is called.
func (u *unread) add(ref journal.Ref, started bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var at time.Time
	if started {
		at = time.Now()
	}
	u.last[ref] = at
}

// answered starts ref's clock: its upstream answered (a read, as far as
// the clock goes: its initiating client gets the answer now).
func (u *unread) answered(ref journal.Ref) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.last[ref]; ok {
		u.last[ref] = time.Now()
	}
}

func (u *unread) remove(ref journal.Ref) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.last, ref)
}

// read records a reader of id's generations.
func (u *unread) read(id string) {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	for ref, t := range u.last {
		if ref.ID == id && !t.IsZero() {
			u.last[ref] = now
		}
	}
}

// stale returns the generations nobody read for u.after.
func (u *unread) stale() []journal.Ref {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []journal.Ref
	for ref, t := range u.last {
		if !t.IsZero() && now.Sub(t) > u.after {
			out = append(out, ref)
		}
	}
	return out
}

// Reading records that a reader of key id is connected on some instance.
func (e *Engine) Reading(id string) {
	if e.unread != nil {
		e.unread.read(id)
	}
}

// cancelUnread cancels, every quarter of Limits.CancelUnread, the streamed
// generations nobody read for it, until the engine shuts down.
func (e *Engine) cancelUnread() {
	tick := time.NewTicker(e.unread.after / 4)
	defer tick.Stop()
	for {
		select {
		case <-e.pumpCtx.Done():
			return
		case <-tick.C:
		}
		for _, ref := range e.unread.stale() {
			if e.live.cancel(ref, ErrUnread) {
				e.cfg.Logger.Info("generation cancelled: nobody read it", "key_id", ref.ID, "gen", ref.Gen, "for", e.unread.after)
			}
			e.unread.remove(ref)
		}
	}
}
