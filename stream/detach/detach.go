// Package detach serves long responses on HTTP/1 connections taken over
// from net/http, so that an idle reader costs its socket and one goroutine
// and nothing of net/http's per-connection state.
//
// An SSE reader of a stream's Location (GET) on HTTP/1.x is served on a
// connection taken over from net/http: the handler returns, and with it
// net/http's state for the connection — its 4 KiB read buffer, its 4 + 2 KiB write buffers, the
// request, and the handler goroutine with the stack it grew deciding the
// request. What an idle reader keeps is its socket and one goroutine
// following the stream, and nothing else: the Group's poller (one
// goroutine for all its readers, poll_linux.go) notices the client leave,
// and the write buffer is borrowed from a pool while events are written
// and given back at each flush.
//
// The response is delimited by closing the connection (Connection: close, no
// chunking), which every HTTP/1 client and EventSource understands; a
// client reconnects for its next request, as it does to resume anyway. The
// answer to a POST is not detached: its client (an SDK) sends its next
// request on the same kept-alive connection, and a new TCP (and TLS)
// handshake per request would cost more than the memory saved.
// HTTP/2 connections cannot be taken over and are served by net/http.
// A WebSocket reader, whose connection its library takes over, is served
// the same way, on a goroutine the Group tracks (Track).
//
// It owns the connections it takes and their response framing; it knows
// nothing of what is streamed on them.
package detach

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Group tracks the connections taken over, so Close can end them:
// http.Server's Shutdown and Close do not know connections taken over from
// them.
type Group struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	ctx    context.Context
	cut    context.CancelFunc
	poll   *poller
}

// NewGroup returns an empty Group.
func NewGroup() *Group {
	d := &Group{poll: newPoller()}
	d.ctx, d.cut = context.WithCancel(context.Background())
	return d
}

// add registers a reader; false once Close has begun.
func (d *Group) add() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

// Close ends the responses served on connections taken over: it lets them
// finish on their own until ctx ends (readers of generations that completed
// write their last events and leave), then cuts the rest, and returns once
// all are gone. Take refuses from then on. It is idempotent.
func (d *Group) Close(ctx context.Context) {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
		d.poll.stop()
		return
	case <-ctx.Done():
	}
	d.cut()
	<-done
	d.poll.stop()
}

// Take takes w's connection over from net/http for a response; nil when it
// cannot (HTTP/2, a writer that cannot hijack, Close begun). The response
// head is w's headers, written with the first flush. Serve the response
// with Go.
func (d *Group) Take(w http.ResponseWriter, r *http.Request) *Conn {
	if r.ProtoMajor != 1 || !d.add() {
		return nil
	}
	header := w.Header().Clone()
	// A request pipelined behind this one (bytes in net/http's read
	// buffer, dropped here) goes unanswered: Connection: close tells its
	// client to send it again, as HTTP/1.1 asks of it.
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		d.wg.Done()
		return nil
	}
	proto := "HTTP/1.1"
	if r.ProtoMinor == 0 {
		proto = "HTTP/1.0"
	}
	return &Conn{conn: conn, header: header, proto: proto, left: make(chan struct{})}
}

// Go serves a response on c in a goroutine of its own: serve writes it
// (c is its http.ResponseWriter) until it returns, the client leaves or
// Close cuts it (ctx ends); then c is flushed and closed, and done is
// called. The goroutine owns c from then on.
func (d *Group) Go(c *Conn, serve func(ctx context.Context, w http.ResponseWriter), done func()) {
	go func() {
		defer d.wg.Done()
		defer done()
		ctx, cancel := context.WithCancel(d.ctx)
		defer cancel()
		stop := d.poll.watch(c.conn, func() { c.watch(cancel) })
		defer func() {
			if stop() { // never heard: no goroutine reads c
				close(c.left)
			}
			_ = c.conn.Close()
			<-c.left
		}()
		serve(ctx, c)
		if !c.aborted {
			_ = c.FlushError()
		}
	}()
}

// Track serves, in a goroutine of its own, a response on a connection
// taken over by someone else (a WebSocket its library hijacked), or the
// end of one that outlives its handler (the wait for a client's TCP to
// acknowledge an answer), so that Close ends it too: Close waits for serve
// to return and, once Close's own context ends, cuts it by ending ctx, the
// Group's (one for all, so a reader pays nothing for it). serve must then
// return promptly: it closes its connection, which ends any goroutine
// reading it. False, and serve is not run, once Close has begun: then the
// caller serves the response itself.
func (d *Group) Track(serve func(ctx context.Context)) bool {
	if !d.add() {
		return false
	}
	go func() {
		defer d.wg.Done()
		serve(d.ctx)
	}()
	return true
}

// WhenReadable calls ready, on a goroutine of its own, once conn has
// something to read: bytes, its client's close, a reset. Until then no
// goroutine waits on conn: the Group's poller watches it with all the
// others (outside Linux, or on a connection without a socket, ready is
// called at once). Call stop before closing conn: it reports whether ready
// was not called and never will be. Use it for a connection served under
// Track whose reading only notices its client (a WebSocket's control
// frames); it must not outlive Close.
func (d *Group) WhenReadable(conn net.Conn, ready func()) (stop func() bool) {
	return d.poll.watch(conn, ready)
}

// Abort ends the response as broken: the connection is reset (a TCP RST,
// no TLS close_notify) instead of closed, so the client cannot take what
// it got for a whole response, which a clean close would delimit. What was
// not sent yet is dropped. Use it when a write failed (the client did not
// take it within its deadline): nothing more can reach the client to tell
// it the response is incomplete.
func (c *Conn) Abort() {
	c.aborted = true
	nc := c.conn
	if t, ok := nc.(interface{ NetConn() net.Conn }); ok { // TLS
		nc = t.NetConn()
	}
	if t, ok := nc.(*net.TCPConn); ok {
		_ = t.SetLinger(0)
	}
	_ = nc.Close()
}

// Conn is the http.ResponseWriter of a response on a connection taken
// over.
type Conn struct {
	conn     net.Conn
	header   http.Header
	proto    string
	status   int
	headSent bool
	buf      *bufio.Writer // borrowed between a write and the next flush
	left     chan struct{} // closed when watch returns
	aborted  bool
}

var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

// maxTalk is how much a client may send on a detached connection (a
// request pipelined behind the GET, ignored) before it is cut.
const maxTalk = 8 << 10

// watch reads until the client closes the connection, or the connection is
// closed here, or the client sent more than maxTalk; then it calls gone.
// The poller starts it once the client has sent something (or left).
func (c *Conn) watch(gone func()) {
	defer close(c.left)
	var b [16]byte // it escapes (an interface's Read): a reader holds it while idle
	for talked := 0; talked <= maxTalk; {
		n, err := c.conn.Read(b[:])
		if err != nil {
			break
		}
		talked += n
	}
	gone()
}

// Header is the response's header until the head is sent; after that,
// as http.ResponseWriter says, changing it has no effect.
func (c *Conn) Header() http.Header {
	if c.header == nil {
		return http.Header{}
	}
	return c.header
}

func (c *Conn) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *Conn) Write(p []byte) (int, error) {
	c.borrow()
	return c.buf.Write(p)
}

// FlushError sends what was written, the response head first, and gives
// the buffer back (go-sse and http.ResponseController find it by name).
func (c *Conn) FlushError() error {
	if c.headSent && c.buf == nil {
		return nil
	}
	c.borrow()
	err := c.buf.Flush()
	c.buf.Reset(nil)
	writeBufs.Put(c.buf)
	c.buf = nil
	return err
}

// SetWriteDeadline is found by http.ResponseController.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

func (c *Conn) borrow() {
	if c.buf != nil {
		return
	}
	c.buf = writeBufs.Get().(*bufio.Writer)
	c.buf.Reset(c.conn)
	if !c.headSent {
		c.headSent = true
		c.writeHead()
	}
}

func (c *Conn) writeHead() {
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	b := c.buf
	_, _ = b.WriteString(c.proto + " " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	c.header.Set("Connection", "close")
	if c.header.Get("Date") == "" {
		c.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	_ = c.header.Write(b)
	_, _ = b.WriteString("\r\n") // a write error shows at the flush
	c.header = nil               // sent: an idle reader does not keep it
}

// RawConn is conn's socket, under TLS if any; nil when it has none.
func RawConn(conn net.Conn) syscall.RawConn {
	if t, ok := conn.(interface{ NetConn() net.Conn }); ok { // TLS
		conn = t.NetConn()
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
