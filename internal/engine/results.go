package engine

import (
	"math"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// DefaultResultsCache is Config.ResultsCache's default: 64 MiB of events.
const DefaultResultsCache = 64 << 20

// results keeps the tails of streamed generations that completed on this
// instance lately, with their records as their owner finished them, up to
// a number of bytes (their events' Size), least recently read out first: a
// resume or a replay of one of them here reads memory, neither the key's
// record nor the journal.
//
// Why that is the key's answer: a completed key's generation is its result
// until the key is gone (resume.Manager.Begin), and Kept finds no key gone
// before half the TTL after its record was made (a new key's events are all
// younger than that). So an entry serves only until then; what a reader
// takes of the record (its generation, path, state and events) does not
// change before. The counts a status shows do (Billed, Saved): a status is
// read from the store.
type results struct {
	mu    sync.Mutex
	max   int64
	fresh time.Duration // an entry serves while its key is younger
	now   func() time.Time
	bytes int64
	lru   *simplelru.LRU[string, result] // by stream id
}

type result struct {
	rec  *resume.Record // never changed once kept
	tail *Tail
	size int64
}

// newResults keeps up to max bytes of results that serve for fresh after
// their key was made; nil (none kept) when max is not positive.
func newResults(max int64, fresh time.Duration) *results {
	if max <= 0 {
		return nil
	}
	r := &results{max: max, fresh: fresh, now: time.Now}
	r.lru, _ = simplelru.NewLRU(math.MaxInt, func(_ string, v result) { r.bytes -= v.size }) // only a non-positive size fails
	return r
}

// add keeps t, the tail of ref's generation, which completed here as rec
// says: only a tail that holds the whole generation, events 1 to
// rec.Events and its completed end marker, and no larger than an eighth of
// the cache (one long answer does not push out a hundred short ones).
func (r *results) add(ref journal.Ref, rec resume.Record, t *Tail) {
	if r == nil || rec.State != resume.Completed || rec.Generation != ref.Gen || r.now().Sub(rec.CreatedAt) >= r.fresh {
		return
	}
	size, whole := t.size(rec.Events)
	if !whole || size > r.max/8 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lru.Remove(ref.ID)
	r.lru.Add(ref.ID, result{rec: &rec, tail: t, size: size})
	r.bytes += size
	for r.bytes > r.max {
		r.lru.RemoveOldest()
	}
}

// get returns the record and tail kept for id, while they serve (nil, nil
// otherwise). The record is shared: callers copy it, never change it.
func (r *results) get(id string) (*resume.Record, *Tail) {
	if r == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.lru.Get(id)
	if !ok {
		return nil, nil
	}
	if r.now().Sub(v.rec.CreatedAt) >= r.fresh {
		r.lru.Remove(id)
		return nil, nil
	}
	return v.rec, v.tail
}

// held is the bytes kept.
func (r *results) held() int64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bytes
}

// size is the bytes t's events hold (their Size), and whether t is a whole
// completed generation of events events: its events 1..events, then its
// completed end marker.
func (t *Tail) size(events uint64) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n != events+1 || t.at(t.n).End != journal.EndCompleted || t.unplaced != 0 {
		return 0, false
	}
	var n int64
	for _, c := range t.chunks {
		for _, ev := range c {
			n += int64(ev.Size())
		}
	}
	return n, true
}

// Finished returns the record and the tail of id's generation when it
// completed on this instance lately and is kept (Config.ResultsCache):
// what a reader of a completed key takes, without a journal round trip.
// nil, nil otherwise. The record is shared: callers copy it, never change
// it (a pointer keeps a reader's stack shallow: see stream's record).
func (e *Engine) Finished(id string) (*resume.Record, *Tail) { return e.results.get(id) }

// ResultsHeld is the bytes of events of the results kept (Finished).
func (e *Engine) ResultsHeld() int64 { return e.results.held() }
