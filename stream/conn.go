package stream

import (
	"context"
	"net"
	"net/http"
	"syscall"

	"github.com/reprise-dev/reprise/stream/detach"
)

type connKey struct{}

// ConnContext is the http.Server's ConnContext reprise serves with: it
// keeps each connection in its requests' contexts, so that a keyless
// request's answer counts as received only if its client did not reset
// the connection (delivered) and, on Linux, once its client's TCP
// acknowledged it (received.go).
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
	rc := rawConn(r)
	return rc != nil && socketReset(rc)
}

// clientClosed reports whether r's client closed or reset its connection:
// an HTTP/1 client that closes its end while it waits for an answer has
// left (it does not half-close), which TCP knows before net/http's reading
// goroutine — starved on a busy instance — ends the request's context.
// Only HTTP/1, as clientReset.
func clientClosed(r *http.Request) bool {
	rc := rawConn(r)
	return rc != nil && socketClosed(rc)
}

// rawConn is r's connection's socket, nil when it has none to ask (HTTP/2,
// or a connection reprise does not know).
func rawConn(r *http.Request) syscall.RawConn {
	if r.ProtoMajor != 1 {
		return nil
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	return detach.RawConn(c)
}
