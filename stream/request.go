package stream

import (
	"context"
	"net/http"
	"time"
)

// The request's lifecycle. ServeHTTP, reprise's outermost frame, gives each
// request a lifecycle that rides in its context: when it came in, what the
// access log notes of it (access.go), whether it started its key's
// generation (the latencies its client sees: timing.go), and what the
// handler hands back to be run later.
//
// That last part makes the lifecycle a scheduler. A handler may hand the
// rest of its request back to ServeHTTP, to run once the handler chain has
// returned and the access line is written (serveLater); and it may have
// work run once its stream first wrote to its client (thenFlushed). The
// first is for idle readers: an HTTP/2 reader, which net/http cannot let go
// of, waits for its stream's events in ServeHTTP's frame, without the frames
// of the handler chain that decided it (the record's read, its JSON). The
// runtime halves an idle goroutine's stack at a GC only while it uses under
// a quarter of it, so a shallow wait halves each idle reader's stack. The
// second keeps the work a reader causes (a record write) from competing
// with the write that matters most to its client.

// lifecycle is one request's note and schedule, from ServeHTTP.
type lifecycle struct {
	at            time.Time
	key, decision string // for the access log (noteKey, noteDecision)
	name, model   string // for the access log (noteCaller, noteModel)
	started       bool   // the request started its key's generation (startedHere)
	flushed       func() // runs once the first write to the client went out (thenFlushed)
	rest          func() // what the handler left to serve (serveLater)
}

type lifecycleKey struct{}

// ServeHTTP implements http.Handler: r is served through the handler chain
// and logged (logAccess); then what its handler left to serve runs, here,
// with the chain's frames gone (serveLater).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l := &lifecycle{at: time.Now()}
	s.logAccess(w, withLifecycle(r, l), l, s.handler)
	if l.rest != nil {
		l.rest()
	}
}

// withLifecycle is r with l as its lifecycle.
func withLifecycle(r *http.Request, l *lifecycle) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), lifecycleKey{}, l))
}

// lifecycleOf returns r's lifecycle, nil outside ServeHTTP.
func lifecycleOf(r *http.Request) *lifecycle {
	l, _ := r.Context().Value(lifecycleKey{}).(*lifecycle)
	return l
}

// serveLater has serve run once r's handler chain has returned and r's
// access line is written, in ServeHTTP, and reports whether it will; false
// outside ServeHTTP, where the caller serves at once, and for a second
// serve of one request.
func serveLater(r *http.Request, serve func()) bool {
	l := lifecycleOf(r)
	if l == nil || l.rest != nil {
		return false
	}
	l.rest = serve
	return true
}

// thenFlushed has f run once r's stream has written to its client (its
// first event, or anything it flushed), not before: work a reader causes
// (a record write) does not compete with the write that matters most. A
// stream that never flushes (its client left first) never runs it. Outside
// ServeHTTP, f runs at once.
func thenFlushed(r *http.Request, f func()) {
	if l := lifecycleOf(r); l != nil {
		l.flushed = f
	} else {
		f()
	}
}

// startedHere marks r as the request that started its key's generation:
// its first event is its client's time to first token (timed).
func startedHere(r *http.Request) {
	if l := lifecycleOf(r); l != nil {
		l.started = true
	}
}
