package engine

import (
	"context"
	"sync"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Tail is the in-memory copy of a live generation on the instance that runs
// it. Readers on this instance follow it instead of the journal.
//
// An ordinary event of a streamed generation is shown to them as soon as
// it is handed to the journal, before JetStream acknowledged it (preview):
// the live path does not wait for the journal's round trip — its first
// one, the writer's fence, included. Everything that decides the
// generation's outcome waits for the acknowledgement: the format's
// terminal event, an error event, a non-streamed answer's body and the end
// marker are shown only once stored, and after every event before them.
// So a reader sees [DONE] only when the whole result is stored; when an
// append is finally lost, the events shown but not stored are followed by
// the error event that fails the generation (fail); and an id shown early
// is still a cursor on every instance (docs/design/live-path.md).
type Tail struct {
	mu sync.Mutex
	// chunks hold what readers get, offsets 1..n in order, the end marker
	// last once done: tailChunk events a chunk, the last filling (events).
	chunks [][]journal.Event
	n      uint64 // events held
	failed bool   // fail ended it: no more previews
	// unplaced is the offset of the error event unsettled gave readers
	// when where it stands in the journal is unknown (0: none).
	unplaced uint64
	stored   uint64 // offset of the last event JetStream acknowledged
	// changed is closed and replaced by the first event added after Since
	// handed it out (watched): an event nobody waits for makes no channel.
	changed  chan struct{}
	watched  bool
	storedAt time.Time // when the last event was stored

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

// tailChunk is how many events a chunk of a Tail holds. A long generation
// grows by a chunk at a time: its events are never copied to a larger
// array, and what readers were given stays as it is. The first chunk
// grows by doubling up to it, so a short generation holds little.
const tailChunk = 512

// more is a channel closed for good: Since's answer when events past
// the slice it returns are held already.
var more = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newTail() *Tail {
	return &Tail{changed: make(chan struct{}), head: make(chan struct{})}
}

// preview shows ev, handed to the journal but not yet stored, and reports
// whether it did: not when an event before it waits to be stored (it is
// then added by store, after them), nor after fail.
func (t *Tail) preview(ev journal.Event) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed || ev.Offset != t.n+1 {
		return false
	}
	t.add(ev)
	return true
}

// store records that JetStream acknowledged ev, and adds it unless it was
// previewed. Events are stored in order.
func (t *Tail) store(ev journal.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stored, t.storedAt = ev.Offset, time.Now()
	if ev.Offset == t.n+1 {
		t.add(ev)
	}
}

func (t *Tail) add(ev journal.Event) {
	last := len(t.chunks) - 1
	switch {
	case last < 0:
		t.chunks = append(t.chunks, make([]journal.Event, 0, 8))
		last = 0
	case len(t.chunks[last]) == tailChunk:
		t.chunks = append(t.chunks, make([]journal.Event, 0, tailChunk))
		last++
	case len(t.chunks[last]) == cap(t.chunks[last]): // the first, growing
		c := make([]journal.Event, len(t.chunks[last]), min(2*cap(t.chunks[last]), tailChunk))
		copy(c, t.chunks[last])
		t.chunks[last] = c
	}
	t.chunks[last] = append(t.chunks[last], ev)
	t.n++
	if t.watched {
		close(t.changed)
		t.changed, t.watched = make(chan struct{}), false
	}
}

// at returns the event at offset off (1..n).
func (t *Tail) at(off uint64) journal.Event {
	return t.chunks[(off-1)/tailChunk][(off-1)%tailChunk]
}

// fail ends the tail with the error event data after its last event (stored
// or only previewed): the reason its readers get for a generation the
// journal could not end (its writer lost or fenced). Nothing is added after.
func (t *Tail) fail(data []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(data)
}

func (t *Tail) failLocked(data []byte) {
	t.failed = true
	last := t.n
	t.storedAt = time.Now()
	t.add(journal.Event{Offset: last + 1, Type: TypeError, Data: data})
	t.add(journal.Event{Offset: last + 2, End: journal.EndFailed})
}

// unsettled ends the tail as fail does, for a generation whose journal
// could not be settled: what it holds, and where its end will be, is
// unknown (messages held through a NATS stall may still be stored). The
// reason readers get is unplaced: sent without an id, so a reader's cursor
// stays on the last event it got, and its resume reads what the journal
// holds once it is settled — an offset of this reason's may name another
// event there.
func (t *Tail) unsettled(data []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failLocked(data)
	t.unplaced = t.n - 1 // before a reader woken by failLocked looks (it waits for t.mu)
}

// Unplaced reports whether ev is the reason unsettled gave: it goes to
// readers without an id.
func (t *Tail) Unplaced(ev journal.Event) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unplaced != 0 && ev.Offset == t.unplaced && !ev.IsEnd()
}

// Completed reports whether the generation's end marker, completed, is in
// the tail (its record may not say so yet).
func (t *Tail) Completed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n > 0 && t.at(t.n).End == journal.EndCompleted
}

// Last is the offset of the last event in the tail.
func (t *Tail) Last() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// Progress is how many events are stored, the end marker not counted, and
// when the last one (or the end marker) was stored; zero before any.
// Readers of the key's status get it live, not as of the lease's last
// heartbeat.
func (t *Tail) Progress() (events uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := min(t.stored, t.n)
	if n > 0 && t.at(n).IsEnd() {
		n--
	}
	return n, t.storedAt
}

// Since returns events after offset, in order, and a channel closed on the
// next one: closed already when it holds more than the slice (events of
// the chunks after), so a caller that waits on it after the slice asks
// again at once. The slice is shared: callers must not modify it.
func (t *Tail) Since(after uint64) ([]journal.Event, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if after >= t.n {
		if t.n > 0 && t.at(t.n).IsEnd() { // nothing follows a position past the end
			c := t.chunks[len(t.chunks)-1]
			t.watched = true
			return c[len(c)-1:], t.changed
		}
		t.watched = true
		return nil, t.changed
	}
	i := after / tailChunk
	evs := t.chunks[i][after%tailChunk:]
	if int(i) < len(t.chunks)-1 {
		return evs, more
	}
	t.watched = true
	return evs, t.changed
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
