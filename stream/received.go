package stream

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/stream/tcpack"
)

// Received means acknowledged. A keyless request's answer written whole
// into its connection has not reached its client yet: a write succeeds once
// the bytes are in the socket's send buffer, and a link that drops the
// last segments, then the connection, leaves the client without the
// answer's tail while reprise counted it given — its identical retry would
// generate again. So on Linux, over HTTP/1, the answer counts as received
// once the client's TCP acknowledged its last byte (package tcpack): the
// handler ends at once (its client is not kept waiting for the peer's
// delayed ACK), and the request stays in flight until its client's TCP
// answered. A retry that meanwhile finds it waits for that verdict
// (flight.gone). Over HTTP/2 (many requests on one connection), on a
// connection reprise does not know (a caller's own http.Server), and
// outside Linux, the answer counts as received once written.

// ackStall is how long an answer's client's TCP may acknowledge nothing
// more before the answer counts as not received: a connection whose link
// went silent. It outlasts the TCP retransmissions of a short outage.
const ackStall = 5 * time.Second

// ackTimeout bounds the wait for an answer's acknowledgement, progress or
// not: within decisionTimeout, which bounds a retry that waits for it.
const ackTimeout = 20 * time.Second

// finishKeyless ends the keyless request f, of r, as its handler ends;
// returned says whether the handler returned (rather than panicked). What
// it leaves a retry to attach to (flight.attachable) is left behind
// unless its result reached this client — or a retry claimed it in
// flight, or it was left as its client went. When its result was handed
// over on a connection whose acknowledgements can be told, the verdict
// waits for them on a goroutine the detach group tracks (Close ends it);
// the request is in flight until then.
func (s *Server) finishKeyless(w http.ResponseWriter, r *http.Request, f *flight, returned bool) {
	attachable := f.attachable()
	end := func(received bool) {
		f.rc.decide(received)
		s.flights.done(f, func() {
			if attachable && !received {
				s.leaveBehind(f.k)
			}
		})
	}
	if !attachable || !f.rc.delivered(r, returned) {
		end(false)
		return
	}
	m, ok := markAnswer(w, r)
	switch {
	case !ok:
		end(false)
		return
	case m == nil:
		end(true)
		return
	}
	f.rc.ended.Store(true)
	verdict := func(ctx context.Context) {
		defer func() { _ = m.Close() }()
		ctx, cancel := context.WithTimeout(ctx, ackTimeout)
		defer cancel()
		end(m.Wait(ctx, ackStall) == tcpack.Acked)
	}
	if !s.detached.Track(verdict) {
		verdict(context.Background()) // Close has begun: the handler waits
	}
}

// markAnswer sends what r's answer still buffers and marks its end on r's
// connection. ok is false when the answer could not be sent whole (the
// flush failed: the client is gone, or takes nothing). The mark is nil
// when the client's acknowledgement cannot be told: HTTP/2, a connection
// reprise does not know, a system other than Linux.
func markAnswer(w http.ResponseWriter, r *http.Request) (m *tcpack.Mark, ok bool) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if r.ProtoMajor != 1 || c == nil {
		return nil, true
	}
	if err := http.NewResponseController(w).Flush(); err != nil {
		return nil, false
	}
	m, err := tcpack.Take(c)
	if err != nil {
		return nil, true
	}
	return m, true
}
