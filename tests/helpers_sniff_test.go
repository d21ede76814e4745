package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2/toxics"
)

// sniffRequests is a toxic for a link's upstream direction (client →
// server) that passes every byte on unchanged and records each HTTP/1.x
// request it carries: when it was whole, on which connection, its method,
// target, headers and body. It watches what a real client sends without
// adding a hop of its own, and records a request before passing on the
// bytes that complete it: before the server can answer it.
type sniffRequests struct {
	conns atomic.Int64 // connections seen, numbering them from 1

	mu   sync.Mutex
	reqs []sniffed
}

// sniffed is one request a client sent through the link.
type sniffed struct {
	At     time.Time
	Conn   int64 // the connection it came on, from 1 in the order they opened
	Method string
	Target string // path and query, as on the request line
	Header http.Header
	Body   []byte
}

type sniffState struct {
	conn int64
	buf  []byte // the start of a request not yet whole
	lost bool   // bytes it could not parse: it passes the rest on unread
}

const sniffType = "sniff_requests"

func init() { toxics.Register(sniffType, new(sniffRequests)) }

func (t *sniffRequests) NewState() any { return new(sniffState) }

func (t *sniffRequests) Pipe(stub *toxics.ToxicStub) {
	st := stub.State.(*sniffState)
	if st.conn == 0 {
		st.conn = t.conns.Add(1)
	}
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if !st.lost {
				st.buf = append(st.buf, c.Data...)
				t.take(st)
			}
			stub.Output <- c
		}
	}
}

// take records the whole requests at the front of st.buf and drops them
// from it.
func (t *sniffRequests) take(st *sniffState) {
	for len(st.buf) > 0 {
		r := bytes.NewReader(st.buf)
		br := bufio.NewReader(r)
		req, err := http.ReadRequest(br)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(req.Body)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return // not whole yet
		}
		if err != nil {
			st.lost, st.buf = true, nil
			return
		}
		t.mu.Lock()
		t.reqs = append(t.reqs, sniffed{At: time.Now(), Conn: st.conn, Method: req.Method, Target: req.RequestURI, Header: req.Header, Body: body})
		t.mu.Unlock()
		st.buf = st.buf[len(st.buf)-r.Len()-br.Buffered():]
	}
}

// requests returns what was recorded so far, in arrival order.
func (t *sniffRequests) requests() []sniffed {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]sniffed(nil), t.reqs...)
}

// canonicalJSON is body with its objects' keys sorted and no insignificant
// whitespace (numbers kept as written), or body itself if it is no JSON:
// two bodies that differ only in key order compare equal.
func canonicalJSON(body []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return body
	}
	b, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return b
}
