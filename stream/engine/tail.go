package engine

import (
	"context"
	"sync"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Tail is the in-memory copy of a live generation on the instance that runs
// it. Readers on this instance follow it instead of the journal: an event is
// in the tail only after JetStream acknowledged it, so what a reader sees
// here is exactly what any other instance can read back.
type Tail struct {
	mu      sync.Mutex
	events  []journal.Event // offsets 1..n; the end marker last, once done
	changed chan struct{}   // closed and replaced on every append
	at      time.Time       // when the last event was appended

	head     chan struct{} // closed once the upstream answered
	headResp *Head
}

// Head is how the upstream first answered a generation, for its initiating
// client: an event stream, or a whole answer (an error before any event, or
// a non-streamed result) to pass on as it is.
type Head struct {
	Status      int
	ContentType string
	Body        []byte // the whole answer, unless Streaming or Progressive
	Streaming   bool
	// Progressive: a whole answer (raw audio) journaled as it arrives, in
	// TypeBody chunks readers follow in the tail; Body is nil. Length is
	// the upstream's Content-Length, -1 when it gave none.
	Progressive bool
	Length      int64
	Attempts    int           // upstream requests made
	Upstream    string        // the name of the upstream that answered
	RetryAfter  time.Duration // known wait, for the client's Retry-After
	// Code names the failure when the proxy made the answer (a classify
	// code); "" for the upstream's own answer.
	Code string
}

func newTail() *Tail {
	return &Tail{changed: make(chan struct{}), head: make(chan struct{})}
}

func (t *Tail) append(ev journal.Event) {
	t.mu.Lock()
	t.events = append(t.events, ev)
	t.at = time.Now()
	close(t.changed)
	t.changed = make(chan struct{})
	t.mu.Unlock()
}

// fail ends the tail with the error event data after its last event: the
// reason its readers get for a generation the journal could not end (its
// writer lost or fenced).
func (t *Tail) fail(data []byte) {
	last := t.Last()
	t.append(journal.Event{Offset: last + 1, Type: TypeError, Data: data})
	t.append(journal.Event{Offset: last + 2, End: journal.EndFailed})
}

// Completed reports whether the generation's end marker, completed, is in
// the tail (its record may not say so yet).
func (t *Tail) Completed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.events)
	return n > 0 && t.events[n-1].End == journal.EndCompleted
}

// Last is the offset of the last event in the tail.
func (t *Tail) Last() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return uint64(len(t.events))
}

// Progress is how many events the tail holds, its end marker not counted,
// and when the last one (or the end marker) was appended; zero before any.
// Readers of the key's status get it live, not as of the lease's last
// heartbeat.
func (t *Tail) Progress() (events uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := uint64(len(t.events))
	if n > 0 && t.events[n-1].IsEnd() {
		n--
	}
	return n, t.at
}

// Since returns the events after offset and a channel closed on the next
// append. The slice is shared: callers must not modify it.
func (t *Tail) Since(after uint64) ([]journal.Event, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := uint64(len(t.events)); after >= n {
		if n > 0 && t.events[n-1].IsEnd() { // nothing follows a position past the end
			return t.events[n-1:], t.changed
		}
		return nil, t.changed
	}
	return t.events[after:], t.changed
}

func (t *Tail) answer(h *Head) {
	t.headResp = h
	close(t.head)
}

// Answered returns how the upstream answered, once it has; it does not
// wait.
func (t *Tail) Answered() (*Head, bool) {
	select {
	case <-t.head:
		return t.headResp, true
	default:
		return nil, false
	}
}

// Head waits until the upstream answered, or ctx ends.
func (t *Tail) Head(ctx context.Context) (*Head, error) {
	select {
	case <-t.head:
		return t.headResp, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// registry maps live generations on this instance to their tails, and
// each stream id to the lease of its generation running here.
type registry struct {
	mu      sync.Mutex
	tails   map[journal.Ref]*Tail
	cancels map[journal.Ref]context.CancelCauseFunc
	leases  map[string]*resume.Lease
}

func (r *registry) add(ref journal.Ref, t *Tail, l *resume.Lease, cancel context.CancelCauseFunc) {
	r.mu.Lock()
	if r.tails == nil {
		r.tails, r.cancels, r.leases = map[journal.Ref]*Tail{}, map[journal.Ref]context.CancelCauseFunc{}, map[string]*resume.Lease{}
	}
	r.tails[ref] = t
	r.cancels[ref] = cancel
	r.leases[ref.ID] = l
	r.mu.Unlock()
}

// cancel cancels ref's generation with cause, if it runs here.
func (r *registry) cancel(ref journal.Ref, cause error) bool {
	r.mu.Lock()
	c := r.cancels[ref]
	r.mu.Unlock()
	if c != nil {
		c(cause)
	}
	return c != nil
}

func (r *registry) get(ref journal.Ref) *Tail {
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
	delete(r.cancels, ref)
	if l := r.leases[ref.ID]; l != nil && l.Record().Generation == ref.Gen { // not a newer one's
		delete(r.leases, ref.ID)
	}
	r.mu.Unlock()
}
