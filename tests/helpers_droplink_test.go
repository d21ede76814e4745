package tests

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// cutFirst is a toxic that cuts each of the first Times connections
// through a link once it carried Bytes bytes (limit_data, Times times):
// a stream through the link, which reconnects after each cut, is dropped
// exactly Times times, wherever its events fall.
type cutFirst struct {
	Bytes int64        `json:"bytes"`
	Times int64        `json:"times"`
	cuts  atomic.Int64 // connections it decided to cut, the ones past Times included

	mu  sync.Mutex
	cut []time.Time // when it cut each connection it cut
}

type cutFirstState struct {
	sent    int64
	passing bool // past Times: this connection is not cut
}

const cutFirstType = "cut_first"

func init() { toxics.Register(cutFirstType, new(cutFirst)) }

func (t *cutFirst) NewState() any { return new(cutFirstState) }

func (t *cutFirst) Pipe(stub *toxics.ToxicStub) {
	st := stub.State.(*cutFirstState)
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			left := t.Bytes - st.sent
			if st.passing || int64(len(c.Data)) < left {
				st.sent += int64(len(c.Data))
				stub.Output <- c
				continue
			}
			if t.cuts.Add(1) > t.Times {
				st.passing = true
				stub.Output <- c
				continue
			}
			if left > 0 {
				stub.Output <- &stream.StreamChunk{Timestamp: c.Timestamp, Data: c.Data[:left]}
			}
			t.mu.Lock()
			t.cut = append(t.cut, time.Now())
			t.mu.Unlock()
			stub.Close()
			return
		}
	}
}

// endAtHead is a toxic that ends each of the first Times chunked answers
// through a link cleanly right after its head: it passes the head, then
// the chunked body's last chunk (0 CRLF CRLF), and closes the connection.
// The client reads a complete, empty
// answer — an event stream that ended before its first event, as a
// middlebox that times out a quiet answer makes it.
type endAtHead struct {
	Times int64        `json:"times"`
	ended atomic.Int64 // answers it ended, the ones past Times included
}

type endAtHeadState struct {
	head    []byte // the head so far, until its blank line
	passing bool   // past Times, or no chunked answer: passed as it is
}

const endAtHeadType = "end_at_head"

func init() { toxics.Register(endAtHeadType, new(endAtHead)) }

func (t *endAtHead) NewState() any { return new(endAtHeadState) }

func (t *endAtHead) Pipe(stub *toxics.ToxicStub) {
	st := stub.State.(*endAtHeadState)
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if st.passing {
				stub.Output <- c
				continue
			}
			st.head = append(st.head, c.Data...)
			i := bytes.Index(st.head, []byte("\r\n\r\n"))
			if i < 0 {
				continue
			}
			head := st.head[:i+4]
			chunked := bytes.Contains(bytes.ToLower(head), []byte("transfer-encoding: chunked"))
			if !chunked || t.ended.Add(1) > t.Times {
				st.passing = true
				stub.Output <- &stream.StreamChunk{Timestamp: c.Timestamp, Data: st.head}
				continue
			}
			stub.Output <- &stream.StreamChunk{Timestamp: c.Timestamp, Data: append(append([]byte(nil), head...), "0\r\n\r\n"...)}
			stub.Close() // the connection ends with it: nothing else on it is answered
			return
		}
	}
}

// dropLink is a link to addr whose first times connections are cut after
// bytes bytes of the answer each.
type dropLink struct {
	URL  string
	toxi *cutFirst
}

// newDropLink starts a dropLink in front of addr (host:port), stopped
// with the test.
func newDropLink(tb testing.TB, addr string, bytes, times int64) *dropLink {
	tb.Helper()
	l, err := newToxi().link(addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(l.close)
	if err := l.addCloser("cut", cutFirstType, "downstream", map[string]any{"bytes": bytes, "times": times}); err != nil {
		tb.Fatal(err)
	}
	if err := l.seal(); err != nil {
		tb.Fatal(err)
	}
	toxic, ok := l.p.Toxics.GetToxic("cut").Toxic.(*cutFirst)
	if !ok {
		tb.Fatal("the cut toxic is not a cutFirst")
	}
	return &dropLink{URL: "http://" + l.addr, toxi: toxic}
}

// cuts is how many connections the link cut.
func (d *dropLink) cuts() int64 { return min(d.toxi.cuts.Load(), d.toxi.Times) }

// cutAt is when the toxic cut each connection it cut, in order.
func (t *cutFirst) cutAt() []time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]time.Time(nil), t.cut...)
}
