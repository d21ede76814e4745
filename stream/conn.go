package stream

import (
	"context"
	"net"
	"net/http"

	"github.com/reprise-dev/reprise/stream/detach"
)

type connKey struct{}

// ConnContext is the http.Server's ConnContext reprise serves with: it
// keeps each connection in its requests' contexts, so that a keyless
// request's answer counts as received only if its client did not reset
// the connection (delivered).
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// clientReset reports whether r's client reset its connection (a TCP RST):
// it closed its socket with bytes of the answer unread, or the answer
// reached a socket it had closed. A write into the socket's buffer
// succeeds all the same, so a handler that wrote an answer's rest after
// its client left (starved on a busy box until then, before net/http's
// reading goroutine saw the close) would take it for delivered. Only
// HTTP/1: an HTTP/2 client leaves a stream with RST_STREAM, which cancels
// the request.
func clientReset(r *http.Request) bool {
	if r.ProtoMajor != 1 {
		return false
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	rc := detach.RawConn(c)
	if rc == nil {
		return false
	}
	return socketReset(rc)
}
