package stream

import (
	"sync"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// tail is the in-memory copy of a live generation on the instance that runs
// it. Readers on this instance follow it instead of the journal: an event is
// in the tail only after JetStream acknowledged it, so what a reader sees
// here is exactly what any other instance can read back.
type tail struct {
	mu      sync.Mutex
	events  []journal.Event // offsets 1..n; the end marker last, once done
	changed chan struct{}   // closed and replaced on every append
	done    bool

	head     chan struct{} // closed once the upstream answered
	headResp *upstreamResponse
}

// upstreamResponse is a non-streamed upstream answer (an error before any
// event, or a non-streaming result) that the initiating client receives.
type upstreamResponse struct {
	status      int
	contentType string
	body        []byte
	streaming   bool
	attempts    int           // upstream requests made
	retryAfter  time.Duration // known wait, for the client's Retry-After
}

func newTail() *tail {
	return &tail{changed: make(chan struct{}), head: make(chan struct{})}
}

func (t *tail) append(ev journal.Event) {
	t.mu.Lock()
	t.events = append(t.events, ev)
	if ev.IsEnd() {
		t.done = true
	}
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// last is the offset of the last event in the tail.
func (t *tail) last() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return uint64(len(t.events))
}

// since returns the events after offset and a channel closed on the next
// append. The slice is shared: callers must not modify it.
func (t *tail) since(after uint64) ([]journal.Event, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if after >= uint64(len(t.events)) {
		return nil, t.changed
	}
	return t.events[after:], t.changed
}

func (t *tail) answer(r *upstreamResponse) {
	t.headResp = r
	close(t.head)
}

// registry maps live generations on this instance to their tails, and
// each stream id to the lease of its generation running here.
type registry struct {
	mu     sync.Mutex
	tails  map[journal.Ref]*tail
	leases map[string]*resume.Lease
}

func (r *registry) add(ref journal.Ref, t *tail, l *resume.Lease) {
	r.mu.Lock()
	if r.tails == nil {
		r.tails, r.leases = map[journal.Ref]*tail{}, map[string]*resume.Lease{}
	}
	r.tails[ref] = t
	r.leases[ref.ID] = l
	r.mu.Unlock()
}

func (r *registry) get(ref journal.Ref) *tail {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tails[ref]
}

// owned returns the record of id as this instance, its owner, last wrote
// it, while the generation runs here and its lease holds.
func (r *registry) owned(id string) (resume.Record, bool) {
	r.mu.Lock()
	l := r.leases[id]
	r.mu.Unlock()
	if l == nil {
		return resume.Record{}, false
	}
	select {
	case <-l.Lost():
		return resume.Record{}, false
	default:
	}
	return l.Record(), true
}

func (r *registry) remove(ref journal.Ref) {
	r.mu.Lock()
	delete(r.tails, ref)
	if l := r.leases[ref.ID]; l != nil && l.Record().Generation == ref.Gen { // not a newer one's
		delete(r.leases, ref.ID)
	}
	r.mu.Unlock()
}
