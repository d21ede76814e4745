package stream

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-dev/reprise/resume"
)

// Keyless requests in flight. A keyless request whose client leaves before
// its result is left behind in the keyless index (leaveBehind), for its
// retry — as soon as its request's context ends (net/http ends it when the
// connection closes), not when its handler, perhaps starved on a busy
// instance, unwinds. That record still takes a write to the index: a retry
// that comes before it (a script's timeout, then the same call at once)
// would find nothing and generate again. So the instance keeps its keyless
// requests in flight by content, and a retry that finds nothing left in
// the index looks here for one of its content whose client is already
// gone: it claims that one, which is then left behind nowhere. A retry on
// another instance relies on the index alone.

// flights are an instance's keyless requests in flight, by ContentID.
type flights struct {
	mu sync.Mutex
	by map[string][]*flight
}

// flight is one keyless request in flight.
type flight struct {
	k       *keyless
	r       *http.Request // its request: whether its client is gone
	rc      *receipt      // whether its result was written, and reached its client
	state   atomic.Int32  // flightDeciding, flightRunning, then flightClaimed or flightLeaving
	decided chan struct{} // closed once it left flightDeciding
	left    chan struct{} // closed once it is left behind (or found needing nothing)
	stop    func() bool   // stops the watch on its client (nil while deciding)
	once    sync.Once     // closes decided
}

const (
	flightDeciding int32 = iota // its key and generation are being decided
	flightRunning               // decided: its handler serves it
	flightClaimed               // a retry claimed it: it is left behind nowhere
	flightLeaving               // left behind as its client went or its handler ended (if it left)
)

// add registers the keyless request k of r, with its receipt rc, while its
// key and generation are decided: a retry that comes meanwhile waits for
// that (run) if its client is already gone.
func (fs *flights) add(k *keyless, r *http.Request, rc *receipt) *flight {
	f := &flight{k: k, r: r, rc: rc, decided: make(chan struct{}), left: make(chan struct{})}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.by == nil {
		fs.by = map[string][]*flight{}
	}
	fs.by[k.cid] = append(fs.by[k.cid], f)
	return f
}

// run marks f decided: it has a key and a generation to attach to. The
// moment its client goes (its context ends) before its result, leave runs
// — the index learns of it then, for a retry on any instance, not when the
// handler ends — unless a retry here claimed it first.
func (fs *flights) run(f *flight, leave func()) {
	f.state.CompareAndSwap(flightDeciding, flightRunning)
	f.stop = context.AfterFunc(f.r.Context(), func() {
		if !f.rc.got.Load() {
			f.leave(leave)
		}
	})
	f.once.Do(func() { close(f.decided) })
}

// done ends f as its handler ends: unless a retry claimed it or its client
// was seen leaving, leave runs (leaving it behind when its client left),
// and f is no longer in flight.
func (fs *flights) done(f *flight, leave func()) {
	if f.stop != nil {
		f.stop()
	}
	f.leave(leave)
	if f.state.Load() == flightLeaving {
		<-f.left // left as its client went, perhaps still being written: in flight until the index has it
	}
	f.once.Do(func() { close(f.decided) })
	fs.mu.Lock()
	defer fs.mu.Unlock()
	list := fs.by[f.k.cid]
	for i, g := range list {
		if g == f {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(fs.by, f.k.cid)
	} else {
		fs.by[f.k.cid] = list
	}
}

// attachable reports, as f's handler ends, whether f leaves something a
// retry can attach to: it was decided (run) — a generation it started,
// attached to or replayed —, or it is a fallback, and leaves the stream it
// claimed. Until then (done) only run moves f out of flightDeciding.
func (f *flight) attachable() bool {
	return f.k.fallback || f.state.Load() != flightDeciding
}

// leave runs leave once for f, unless a retry claimed it: whoever moves it
// from running to leaving, as its client goes or as its handler ends.
func (f *flight) leave(leave func()) {
	if !f.state.CompareAndSwap(flightRunning, flightLeaving) && !f.state.CompareAndSwap(flightDeciding, flightLeaving) {
		return
	}
	leave()
	close(f.left)
}

// take claims, for the keyless request k (of content k.cid, fingerprint
// k.fp), a request in flight that it retries whose client is gone before
// its result: of the same fingerprint, or, when fallback, a streamed one
// for k not streamed. It returns what that request would have left behind.
// A request being left behind at that moment is waited for: wait reports
// that, and the index then holds it. Ask the index after take, not before:
// a request leaves flight only once the index holds it.
func (fs *flights) take(ctx context.Context, k *keyless, fallback bool) (left resume.Leaving, ok, wait bool) {
	fs.mu.Lock()
	list := append([]*flight(nil), fs.by[k.cid]...)
	fs.mu.Unlock()
	for i, f := range list {
		if f.k == k { // what came before k only: what k retries came first, and no two wait for each other
			list = list[:i]
			break
		}
	}
	var leaving []*flight
	for i := len(list) - 1; i >= 0; i-- {
		f := list[i]
		if f.k.fp != k.fp && (!fallback || k.stream || !f.k.stream) { // neither k's fingerprint nor a stream k falls back from
			continue
		}
	look:
		for {
			switch f.state.Load() {
			case flightDeciding:
				if gone, _ := f.gone(); !gone {
					break look
				}
				select { // its client went while it was decided: its decision first
				case <-f.decided:
				case <-ctx.Done():
					return resume.Leaving{}, false, false
				}
			case flightRunning:
				gone, known := f.gone()
				if !known { // its answer was written: whether it reached its client first
					select {
					case <-f.rc.verdict:
						continue look
					case <-ctx.Done():
						return resume.Leaving{}, false, false
					}
				}
				if !gone {
					break look
				}
				if f.state.CompareAndSwap(flightRunning, flightClaimed) {
					return f.k.leaving(), true, false
				}
				// Left as its client went, a moment ago: look again.
			case flightLeaving:
				leaving = append(leaving, f)
				break look
			default: // claimed by another retry
				break look
			}
		}
	}
	for _, f := range leaving {
		select {
		case <-f.left:
		case <-ctx.Done():
			return resume.Leaving{}, false, false
		}
	}
	return resume.Leaving{}, false, len(leaving) > 0
}

// reachable reports whether anyone can be waiting for the generation the
// keyless request f started, once its lease ran out at since (the owner
// cut off from the store, or paused: engine.Generation.Reachable): its
// client is still here, or a retry here claimed it, or the keyless index
// held it before since — a retry elsewhere then found it and attached,
// rather than starting another. A request whose client left and that the
// index did not hold in time is no longer: its retry, if it came, found
// nothing and started the generation it needed.
func (f *flight) reachable(since time.Time) bool {
	switch f.state.Load() {
	case flightClaimed:
		return true
	case flightLeaving:
		at := f.k.leftAt.Load()
		return at != 0 && at < since.UnixNano()
	}
	gone, known := f.gone()
	return !gone || !known // an answer written, its receipt not yet known: perhaps received
}

// gone reports whether f's client left before its result: its request's
// context ended (net/http ends it when the connection closes) or its
// client closed or reset the connection, and no result was written to it;
// or its result was written and did not reach it (the verdict: its
// client's TCP did not acknowledge it). known is false while that verdict
// is to come for a result written to a client that is gone, or whose
// handler ended: wait for f.rc.verdict, then ask again. A result being
// written to a client still there is not gone.
func (f *flight) gone() (gone, known bool) {
	select {
	case <-f.rc.verdict:
		return !f.rc.received, true
	default:
	}
	left := f.r.Context().Err() != nil || clientClosed(f.r)
	switch {
	case !f.rc.got.Load():
		return left, true
	case !left && !f.rc.ended.Load():
		return false, true
	}
	return false, false
}
