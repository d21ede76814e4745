package stream

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/reprise-dev/reprise/resume"
)

// Keyless requests in flight. A keyless request whose client leaves is
// left behind in the keyless index by its handler once the handler sees it
// (leaveBehind) — a write that fails, a context that ends — and that record
// takes a write to the index. A retry that comes before it (a script's
// timeout, then the same call at once, on a busy instance) would find
// nothing and generate again. So the instance keeps its keyless requests in
// flight by content, and a retry that finds nothing left in the index
// looks here for one of its content whose client is already gone: it
// claims that one, and its handler then leaves nothing behind.

// flights are an instance's keyless requests in flight, by ContentID.
type flights struct {
	mu sync.Mutex
	by map[string][]*flight
}

// flight is one keyless request in flight.
type flight struct {
	k     *keyless
	r     *http.Request // its request: whether its client is gone
	rc    *receipt      // whether its result was written
	state atomic.Int32  // flightRunning, then flightClaimed or flightLeaving
	left  chan struct{} // closed once its handler is done leaving it behind
}

const (
	flightRunning int32 = iota // its handler runs
	flightClaimed              // a retry claimed it: its handler leaves nothing behind
	flightLeaving              // its handler ended: it is in the index if its client left
)

// add registers the keyless request k of r, with its receipt rc.
func (fs *flights) add(k *keyless, r *http.Request, rc *receipt) *flight {
	f := &flight{k: k, r: r, rc: rc, left: make(chan struct{})}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.by == nil {
		fs.by = map[string][]*flight{}
	}
	fs.by[k.cid] = append(fs.by[k.cid], f)
	return f
}

// done ends f as its handler ends: unless a retry claimed it, leave runs
// (leaving it behind when its client left), and f is no longer in flight.
func (fs *flights) done(f *flight, leave func()) {
	if f.state.CompareAndSwap(flightRunning, flightLeaving) {
		leave()
	}
	close(f.left)
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

// take claims, for the keyless request k (of content k.cid, fingerprint
// k.fp), a request in flight that it retries whose client is gone before
// its result: of the same fingerprint, or, when fallback, a streamed one
// for k not streamed. It returns what that request would have left behind.
// A request whose handler is leaving it behind at that moment is waited
// for: wait reports that, and the index then holds it.
func (fs *flights) take(ctx context.Context, k *keyless, fallback bool) (left resume.Leaving, ok, wait bool) {
	fs.mu.Lock()
	list := append([]*flight(nil), fs.by[k.cid]...)
	fs.mu.Unlock()
	var leaving []*flight
	for i := len(list) - 1; i >= 0; i-- {
		f := list[i]
		if f.k == k || !(f.k.fp == k.fp || fallback && !k.stream && f.k.stream) {
			continue
		}
		switch f.state.Load() {
		case flightLeaving:
			leaving = append(leaving, f)
			continue
		case flightClaimed:
			continue
		}
		if !f.gone() || !f.state.CompareAndSwap(flightRunning, flightClaimed) {
			continue
		}
		return f.k.leaving(), true, false
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

// gone reports whether f's client left before its result: its request's
// context ended (net/http ends it when the connection closes) or its
// client reset the connection, and no result was written to it.
func (f *flight) gone() bool {
	return !f.rc.got.Load() && (f.r.Context().Err() != nil || clientReset(f.r))
}
