package stream

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// An SSE reader of a stream's Location (GET) on HTTP/1.x is served on a
// connection taken over from net/http: the handler returns, and with it net/http's state for the
// connection — its 4 KiB read buffer, its 4 + 2 KiB write buffers, the
// request, and the handler goroutine with the stack it grew deciding the
// request. What an idle reader keeps is its socket, one goroutine following
// the stream, one blocked in a one-byte read to notice the client leave,
// and nothing else: the write buffer is borrowed from a pool while events
// are written and given back at each flush.
//
// The response is delimited by closing the connection (Connection: close, no
// chunking), which every HTTP/1 client and EventSource understands; a
// client reconnects for its next request, as it does to resume anyway. The
// answer to a POST is not detached: its client (an SDK) sends its next
// request on the same kept-alive connection, and a new TCP (and TLS)
// handshake per request would cost more than the memory saved.
// HTTP/2 connections cannot be taken over and are served by net/http.

// detached readers, tracked so Close can end them: http.Server's Shutdown
// and Close do not know connections taken over from them.
type detached struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	ctx    context.Context
	cut    context.CancelFunc
}

func newDetached() *detached {
	d := &detached{}
	d.ctx, d.cut = context.WithCancel(context.Background())
	return d
}

// add registers a reader; false once Close has begun.
func (d *detached) add() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.wg.Add(1)
	return true
}

// Close ends the SSE readers served on connections taken over from
// net/http: it lets them finish on their own until ctx ends (readers of
// generations that completed write their last events and leave), then cuts
// the rest, and returns once all are gone. Call it after http.Server's
// Shutdown, which does not see them; readers that arrive meanwhile are
// served by net/http.
func (s *Server) Close(ctx context.Context) {
	d := s.detached
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	done := waited(&d.wg)
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	d.cut()
	<-done
}

// detach takes w's connection over from net/http for an SSE response; nil
// when it cannot (HTTP/2, a writer that cannot hijack, Close begun). The
// response head is w's headers, written with the first flush.
func (s *Server) detach(w http.ResponseWriter, r *http.Request) *connWriter {
	if r.ProtoMajor != 1 || !s.detached.add() {
		return nil
	}
	header := w.Header().Clone()
	// A request pipelined behind this one (bytes in net/http's read
	// buffer, dropped here) goes unanswered: Connection: close tells its
	// client to send it again, as HTTP/1.1 asks of it.
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.detached.wg.Done()
		return nil
	}
	proto := "HTTP/1.1"
	if r.ProtoMinor == 0 {
		proto = "HTTP/1.0"
	}
	return &connWriter{conn: conn, header: header, proto: proto, left: make(chan struct{})}
}

// serveDetached follows a stream for a reader on c until it ends, the
// client leaves or Close cuts it; it owns c and the reader's place.
func (s *Server) serveDetached(c *connWriter, follow func(ctx context.Context, out eventWriter) error, release func()) {
	defer s.detached.wg.Done()
	defer release()
	ctx, cancel := context.WithCancel(s.detached.ctx)
	defer cancel()
	go c.watch(cancel)
	defer func() { _ = c.conn.Close(); <-c.left }()
	out, err := newSSEWriter(c, detachedRequest, s.cfg.WriteTimeout)
	if err != nil {
		return
	}
	if err := follow(ctx, out); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Debug("client stream ended", "err", err)
	}
	_ = c.FlushError()
}

// detachedRequest stands for the request go-sse's Upgrade reads (it only
// looks at Last-Event-ID, which the stream was already positioned by).
var detachedRequest = &http.Request{}

// connWriter is the http.ResponseWriter of a detached SSE response.
type connWriter struct {
	conn     net.Conn
	header   http.Header
	proto    string
	status   int
	headSent bool
	buf      *bufio.Writer // borrowed between a write and the next flush
	left     chan struct{} // closed when watch returns
}

var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

// maxTalk is how much a client may send on a detached connection (a
// request pipelined behind the GET, ignored) before it is cut.
const maxTalk = 8 << 10

// watch reads until the client closes the connection, or the connection is
// closed here, or the client sent more than maxTalk; then it calls gone.
func (c *connWriter) watch(gone func()) {
	defer close(c.left)
	var b [512]byte
	for talked := 0; talked <= maxTalk; {
		n, err := c.conn.Read(b[:])
		if err != nil {
			break
		}
		talked += n
	}
	gone()
}

func (c *connWriter) Header() http.Header { return c.header }

func (c *connWriter) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *connWriter) Write(p []byte) (int, error) {
	c.borrow()
	return c.buf.Write(p)
}

// FlushError sends what was written, the response head first, and gives
// the buffer back (go-sse and http.ResponseController find it by name).
func (c *connWriter) FlushError() error {
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
func (c *connWriter) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

func (c *connWriter) borrow() {
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

func (c *connWriter) writeHead() {
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	b := c.buf
	b.WriteString(c.proto + " " + strconv.Itoa(status) + " " + http.StatusText(status) + "\r\n")
	c.header.Set("Connection", "close")
	if c.header.Get("Date") == "" {
		c.header.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	}
	_ = c.header.Write(b)
	b.WriteString("\r\n")
}
