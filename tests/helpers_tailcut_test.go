//go:build linux

package tests

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// swallowLink is a loopback TCP link in front of reprise that swallows an
// answer's tail, as a network that drops a connection's last segments and
// then the connection: it passes the request on, and the answer until pass
// says it passed enough; then it reads nothing more. Its socket toward
// reprise has the smallest receive buffer, so its TCP acknowledges about a
// kilobyte more (never passed on either) and the rest of the answer stays
// unacknowledged in reprise's socket, though reprise wrote it whole. cut
// then drops the connection: reprise's end is reset (the link closes with
// bytes unread), the client's closed mid-answer.
type swallowLink struct {
	URL     string
	target  string
	pass    func(answer []byte) bool // true once enough of the answer was passed on
	stopped chan struct{}            // closed once the link stopped reading the answer
	mu      sync.Mutex
	client  net.Conn     // the client's connection to the link
	up      *net.TCPConn // the link's connection to reprise
}

// newSwallowLink listens on a loopback port for one connection to target.
func newSwallowLink(tb testing.TB, target string, pass func(answer []byte) bool) *swallowLink {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	l := &swallowLink{URL: "http://" + ln.Addr().String(), target: target, pass: pass, stopped: make(chan struct{})}
	go func() {
		defer func() { _ = ln.Close() }()
		client, err := ln.Accept()
		if err != nil {
			return
		}
		l.relay(client)
	}()
	tb.Cleanup(func() { _ = ln.Close(); l.cut() })
	return l
}

// smallReceiveBuffer dials with SO_RCVBUF at its least, set before the
// handshake so that the window is small from the start.
var smallReceiveBuffer = net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1) }); cerr != nil {
		return cerr
	}
	return err
}}

func (l *swallowLink) relay(client net.Conn) {
	up, err := smallReceiveBuffer.DialContext(context.Background(), "tcp", l.target)
	if err != nil {
		_ = client.Close()
		return
	}
	l.mu.Lock()
	l.client, l.up = client, up.(*net.TCPConn)
	l.mu.Unlock()
	go func() { _, _ = io.Copy(up, client) }()
	// Small reads, so that the link stops close to where pass says.
	var answer []byte
	buf := make([]byte, 64)
	for !l.pass(answer) {
		n, err := up.Read(buf)
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
			answer = append(answer, buf[:n]...)
		}
		if err != nil {
			return
		}
	}
	close(l.stopped)
}

// cut drops the link's connections: reprise's end is reset, the client's
// closed.
func (l *swallowLink) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.up != nil {
		_ = l.up.SetLinger(0)
		_ = l.up.Close()
		_ = l.client.Close()
	}
}

// passWhole says a whole (Content-Length) answer was passed on but for its
// last tail bytes.
func passWhole(tail int) func(answer []byte) bool {
	return func(answer []byte) bool {
		end := bytes.Index(answer, []byte("\r\n\r\n"))
		if end < 0 {
			return false
		}
		for _, line := range bytes.Split(answer[:end], []byte("\r\n")) {
			if name, v, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(name, []byte("Content-Length")) {
				n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
				return err == nil && len(answer) >= end+4+n-tail
			}
		}
		return false
	}
}

// passEvents says n events of an event stream were passed on.
func passEvents(n int) func(answer []byte) bool {
	return func(answer []byte) bool { return bytes.Count(answer, []byte("\n\n")) >= n }
}

// handlerEnds returns a logger for a proxy that logs as testLogger does and
// tells on the channel each time a handler of path ended: the proxy logs
// its access line once the request's handler chain returned.
func handlerEnds(path string) (*slog.Logger, <-chan struct{}) {
	ended := make(chan struct{}, 16)
	return slog.New(&endHook{Handler: testLogger().Handler(), path: path, ended: ended}), ended
}

type endHook struct {
	slog.Handler
	path  string
	ended chan struct{}
}

func (h *endHook) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.Handler.Enabled(ctx, l)
}

func (h *endHook) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "request" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "path" && a.Value.String() == h.path {
				select {
				case h.ended <- struct{}{}:
				default:
				}
				return false
			}
			return true
		})
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func (h *endHook) WithAttrs(as []slog.Attr) slog.Handler {
	return &endHook{Handler: h.Handler.WithAttrs(as), path: h.path, ended: h.ended}
}

func (h *endHook) WithGroup(name string) slog.Handler {
	return &endHook{Handler: h.Handler.WithGroup(name), path: h.path, ended: h.ended}
}
