package stream

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/gorilla/websocket"
	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
)

// sseWriter writes events as SSE through go-sse. Each write and flush has
// the whole write timeout: a reader idle between events (up to a heartbeat
// apart) is not cut, one that does not take what is written is.
type sseWriter struct {
	w       http.ResponseWriter // what sess writes to: the pings' raw lines go there too
	sess    *sse.Session
	rc      *http.ResponseController
	timeout time.Duration
	// failed is set once a write or flush failed (the client gone, or
	// not taking what was written within the timeout): nothing more can
	// reach the client, an error event included.
	failed bool
	until  time.Time // the connection's write deadline
	// retry goes with the first message, then is zero: a message of its
	// own would be an event without data, which some SDKs' decoders
	// dispatch and fail to parse.
	retry time.Duration
	sends int // events sent, for deadlineEvery
}

// deadlineEvery is how many events a writer sends per look at its write
// deadline; each look renews it when less than half the timeout is left.
const deadlineEvery = 8

func newSSEWriter(w http.ResponseWriter, r *http.Request, timeout, retry time.Duration) (*sseWriter, error) {
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	sess, err := sse.Upgrade(w, r)
	if err != nil {
		return nil, err
	}
	sw := &sseWriter{w: w, sess: sess, rc: http.NewResponseController(w), timeout: timeout, retry: retry}
	return sw, sw.flush() // send the headers now: the client knows it is attached
}

// batchWriter buffers an event stream that net/http serves (a POST's
// answer, any reader over HTTP/2) between flushes in a pooled 32 KiB
// buffer, so that a replay reaches net/http in large writes — one chunk
// and one write to the socket per 32 KiB, not per 4 KiB, net/http's own
// buffer. The buffer is borrowed at the first write after a flush and
// given back at the flush: an idle stream holds none. (A detached
// connection buffers the same way itself.)
type batchWriter struct {
	http.ResponseWriter
	rc  *http.ResponseController
	buf *bufio.Writer
}

var batchBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

func batched(w http.ResponseWriter) *batchWriter {
	return &batchWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
}

func (b *batchWriter) Write(p []byte) (int, error) {
	if b.buf == nil {
		b.buf = batchBufs.Get().(*bufio.Writer)
		b.buf.Reset(b.ResponseWriter)
	}
	return b.buf.Write(p)
}

// FlushError writes out what is buffered, gives the buffer back, and
// flushes net/http's response (go-sse and http.ResponseController find it
// by name).
func (b *batchWriter) FlushError() error {
	if b.buf != nil {
		err := b.buf.Flush()
		b.buf.Reset(nil)
		batchBufs.Put(b.buf)
		b.buf = nil
		if err != nil {
			return err
		}
	}
	return b.rc.Flush()
}

// Unwrap lets http.ResponseController reach net/http's writer (deadlines).
func (b *batchWriter) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// deadline gives the write that follows at least half the write timeout,
// renewing the connection's deadline only when less is left: renewing it
// for every event of a busy stream would cost more than the event's write.
func (w *sseWriter) deadline() {
	now := time.Now()
	if w.until.Sub(now) >= w.timeout/2 {
		return
	}
	w.until = now.Add(w.timeout)
	_ = w.rc.SetWriteDeadline(w.until)
}

// withRetry gives m the pending reconnection time.
func (w *sseWriter) withRetry(m *sse.Message) *sse.Message {
	m.Retry, w.retry = w.retry, 0
	return m
}

// check records a failed write.
func (w *sseWriter) check(err error) error {
	if err != nil {
		w.failed = true
	}
	return err
}

func (w *sseWriter) send(id string, ev journal.Event) error {
	m := &sse.Message{}
	if id != "" { // an event without a position leaves the client's cursor
		m.ID = sse.ID(id)
	}
	if ev.Type != "" {
		t, err := sse.NewType(ev.Type)
		if err == nil {
			m.Type = t
		}
	}
	// One data line per line of the data, an empty one included: go-sse
	// writes none for empty data and drops a last empty line, so an event
	// with empty data would never be dispatched (EventSource dispatches
	// only an event with a data line) and data that ends with a newline
	// would lose it. The newline added is the last line's end.
	// Most data neither is empty nor ends with a newline: it is written as
	// it is, without a copy: m lives only through this Send, which reads
	// the bytes exactly when a copy would have.
	if n := len(ev.Data); n == 0 || ev.Data[n-1] == '\n' {
		m.AppendData(string(ev.Data) + "\n")
	} else {
		m.AppendData(unsafe.String(unsafe.SliceData(ev.Data), n)) //nolint:gosec // audited above: the string does not outlive the bytes' read
	}
	// The send may write (a full buffer goes out): it needs a deadline. One
	// look at the clock per deadlineEvery sends, not per event: the write
	// that follows still has nearly half the timeout.
	if w.sends++; w.sends%deadlineEvery == 1 {
		w.deadline()
	}
	return w.check(w.sess.Send(w.withRetry(m)))
}

func (w *sseWriter) reset(id string, gen uint64) error {
	m := &sse.Message{ID: sse.ID(id), Type: sse.Type(engine.TypeReset)}
	m.AppendData(`{"generation":` + strconv.FormatUint(gen, 10) + `}`)
	w.deadline()
	if err := w.check(w.sess.Send(w.withRetry(m))); err != nil {
		return err
	}
	return w.flush()
}

// pingLine is the heartbeat: a comment line with no blank line after it.
// A blank line would end an event block with no data, and the OpenAI and
// Anthropic Python SDKs' decoders dispatch such a block once an id was
// seen, as an event whose empty data they fail to parse; a comment line
// alone is part of the next event's block, which every parser skips.
var pingLine = []byte(": ping\n")

func (w *sseWriter) ping() error {
	w.deadline()
	if _, err := w.w.Write(pingLine); err != nil {
		return w.check(err)
	}
	return w.flush()
}

func (w *sseWriter) flush() error {
	w.deadline()
	return w.check(w.sess.Flush())
}

// wsWriter writes one JSON text frame per event.
type wsWriter struct {
	conn    *websocket.Conn
	timeout time.Duration
}

type wsFrame struct {
	ID    string `json:"id"` // "" on an error without a position (keep your cursor)
	Event string `json:"event"`
	Data  string `json:"data"`
}

func (w *wsWriter) write(f wsFrame) error {
	b, _ := json.Marshal(f)
	_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
	return w.conn.WriteMessage(websocket.TextMessage, b)
}

func (w *wsWriter) send(id string, ev journal.Event) error {
	typ := ev.Type
	if typ == "" {
		typ = "message"
	}
	return w.write(wsFrame{ID: id, Event: typ, Data: string(ev.Data)})
}

func (w *wsWriter) reset(id string, gen uint64) error {
	return w.write(wsFrame{ID: id, Event: engine.TypeReset, Data: `{"generation":` + strconv.FormatUint(gen, 10) + `}`})
}

func (w *wsWriter) ping() error {
	return w.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(w.timeout))
}

func (w *wsWriter) flush() error { return nil }
