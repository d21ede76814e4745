package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// target is one server the load client drives.
type target struct {
	name  string
	base  string
	keyed bool // send an Idempotency-Key (reprise)
}

// loadClient is the same plain net/http client for every target.
type loadClient struct {
	hc *http.Client
}

func newLoadClient() *loadClient {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:   8192,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
	}
	return &loadClient{hc: &http.Client{Transport: tr}}
}

func (c *loadClient) closeIdle() { c.hc.CloseIdleConnections() }

func chatBody(prompt string) []byte {
	b, _ := json.Marshal(map[string]any{
		"model": "bench", "stream": true,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	return b
}

// reqOpts are the per-request headers.
type reqOpts struct {
	key         string // Idempotency-Key (only sent to keyed targets)
	bearer      string // Authorization: Bearer …; reprise derives the tenant from it
	agent       string // User-Agent
	lastEventID string
	accept      string
}

func (o reqOpts) apply(req *http.Request, keyed bool) {
	if o.key != "" && keyed {
		req.Header.Set("Idempotency-Key", o.key)
	}
	if o.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+o.bearer)
	}
	ua := o.agent
	if ua == "" {
		ua = "reprise-bench"
	}
	req.Header.Set("User-Agent", ua)
	if o.lastEventID != "" {
		req.Header.Set("Last-Event-ID", o.lastEventID)
	}
	accept := o.accept
	if accept == "" {
		accept = "text/event-stream"
	}
	req.Header.Set("Accept", accept)
}

// post starts a streamed chat completion on t; the caller closes the body.
func (c *loadClient) post(ctx context.Context, t target, prompt string, o reqOpts) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+"/v1/chat/completions", bytes.NewReader(chatBody(prompt)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	o.apply(req, t.keyed)
	return c.ok(c.hc.Do(req))
}

// get opens url (a reprise Location) as an event stream.
func (c *loadClient) get(ctx context.Context, url string, o reqOpts) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	o.apply(req, true)
	return c.ok(c.hc.Do(req))
}

func (c *loadClient) ok(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, &statusError{status: resp.StatusCode, body: strings.TrimSpace(string(b))}
	}
	return resp, nil
}

// statusError is an answer other than 200.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d: %s", e.status, e.body) }

// shed reports whether err is reprise refusing a new generation while it
// is behind (429 overloaded): load shed, not a stream that failed.
func shed(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.status == http.StatusTooManyRequests && strings.Contains(se.body, `"overloaded"`)
}

// sseReader reads an event stream line by line, without allocating per line.
type sseReader struct {
	br  *bufio.Reader
	buf []byte
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{br: bufio.NewReaderSize(r, 32<<10)} }

// line returns the next line without its line ending; valid until the next call.
func (r *sseReader) line() ([]byte, error) {
	l, err := r.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		r.buf = append(r.buf[:0], l...)
		for errors.Is(err, bufio.ErrBufferFull) {
			l, err = r.br.ReadSlice('\n')
			r.buf = append(r.buf, l...)
		}
		l = r.buf
	}
	if err != nil {
		return nil, err
	}
	l = l[:len(l)-1]
	if n := len(l); n > 0 && l[n-1] == '\r' {
		l = l[:n-1]
	}
	return l, nil
}

var (
	prefixData = []byte("data:")
	prefixID   = []byte("id:")
	doneData   = []byte("[DONE]")
)

// dataOf returns the payload of a data line and whether it is one.
func dataOf(l []byte) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(l, prefixData)
	if !ok {
		return nil, false
	}
	return bytes.TrimPrefix(rest, []byte(" ")), true
}

// idOf returns the value of an id line and whether it is one.
func idOf(l []byte) (string, bool) {
	rest, ok := bytes.CutPrefix(l, prefixID)
	if !ok {
		return "", false
	}
	return string(bytes.TrimPrefix(rest, []byte(" "))), true
}

// isContent reports whether a chat chunk carries content text (not the
// first, role-only chunk with "content":"").
func isContent(data []byte) bool {
	i := bytes.Index(data, []byte(`"content":"`))
	return i >= 0 && i+len(`"content":"`) < len(data) && data[i+len(`"content":"`)] != '"'
}

// readEvents reads a stream to its end and counts data events; onData, when
// set, sees each payload. done reports whether the last data was [DONE].
func readEvents(body io.Reader, onData func(n int, data []byte)) (n int, done bool, err error) {
	r := newSSEReader(body)
	for {
		l, err := r.line()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return n, done, nil
			}
			return n, done, err
		}
		d, ok := dataOf(l)
		if !ok {
			continue
		}
		n++
		done = bytes.Equal(d, doneData)
		if onData != nil {
			onData(n, d)
		}
	}
}

// streamOnce posts prompt to t and reads the whole stream; it checks that
// want data events arrived, the last one [DONE].
func (c *loadClient) streamOnce(ctx context.Context, t target, prompt string, o reqOpts, want int) (int, error) {
	resp, err := c.post(ctx, t, prompt, o)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, done, err := readEvents(resp.Body, nil)
	if err != nil {
		return n, err
	}
	if n != want || !done {
		return n, fmt.Errorf("%s: %d events (done %v), want %d", t.name, n, done, want)
	}
	return n, nil
}
