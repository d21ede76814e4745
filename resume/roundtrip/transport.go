package roundtrip

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for Transport.
const (
	// DefaultMaxAttempts is how many reconnections in a row may get no
	// event before the body's Read fails.
	DefaultMaxAttempts = 8
	// DefaultRetryDelay is the wait before the first reconnection until
	// the stream's retry: field says otherwise (reprise sends one).
	DefaultRetryDelay = time.Second
	// DefaultMaxDelay caps the wait between reconnections (it doubles
	// from the retry delay with each one that gets no event).
	DefaultMaxDelay = 10 * time.Second
	// CancelTimeout bounds the cancel of a generation the caller stopped
	// reading: it is sent on a context of its own, the caller's being done.
	CancelTimeout = 5 * time.Second
)

// ErrResume is wrapped by the error a resumed body's Read returns when the
// stream cannot go on: the reconnections ran out, the Location answered a
// status a retry cannot change, or the generation being read failed and
// the key started another (event: reset).
var ErrResume = errors.New("roundtrip: the stream could not be resumed")

// Transport adds an Idempotency-Key to the streaming POSTs it sends and
// resumes their broken event streams from the Location (see the package
// comment). The zero value is ready to use; it is safe for concurrent use.
type Transport struct {
	// Base sends the requests. Default http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts: reconnections in a row without an event before Read
	// fails. Default DefaultMaxAttempts (8).
	MaxAttempts int
	// RetryDelay is the first reconnection's wait until the stream's
	// retry: field sets it. Default DefaultRetryDelay (1 s).
	RetryDelay time.Duration
	// MaxDelay caps the wait between reconnections. Default
	// DefaultMaxDelay (10 s).
	MaxDelay time.Duration
	// NoCancelOnAbort leaves the generation running when the caller
	// stops before the terminal event (its context is done, or it closes
	// the body), as a broken connection does. By default the transport
	// cancels it then (a POST to the Location + /cancel), so that the
	// same request again generates anew: a stop is not a drop.
	NoCancelOnAbort bool

	mu     sync.Mutex
	recent map[[32]byte]recentKey // the keys of the last requests, for their SDK retries
}

type recentKey struct {
	key string
	at  time.Time
}

const (
	recentMax = 256
	recentTTL = 10 * time.Minute
)

var streamingPath = regexp.MustCompile(`/v1/(chat/completions|responses|messages|audio/speech)/?$`)

// kept are the request headers a reconnection sends again: the
// credential (to the POST's origin only) and the API version.
var kept = []string{"Authorization", "X-Api-Key", "Anthropic-Version", "Anthropic-Beta", "Openai-Organization", "Openai-Project"}

// credentials are the request headers that carry the caller's credential:
// a reconnection to a Location on another origin than the POST's sends
// none of them (the Location's capability token is its access).
var credentials = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "X-Api-Key": true, "Api-Key": true, "Cookie": true}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost || !streamingPath.MatchString(req.URL.Path) {
		return t.base().RoundTrip(req)
	}
	if req.Header.Get("Idempotency-Key") == "" {
		key, err := t.key(req)
		if err != nil {
			return nil, err
		}
		req = req.Clone(req.Context()) // a RoundTripper must not change its request
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := t.base().RoundTrip(req)
	if err != nil {
		if req.Context().Err() != nil && !t.NoCancelOnAbort {
			// The caller stopped before the answer: the generation may have started.
			t.cancel(req.Context(), keyCancelURL(req.URL, req.Header.Get("Idempotency-Key")), keptHeaders(req.Header, true))
		}
		return nil, err
	}
	if resp.StatusCode/100 != 2 || !isEventStream(resp.Header) {
		return resp, nil
	}
	raw := resp.Header.Get("Location")
	if raw == "" {
		return resp, nil // not reprise's stream: nothing to resume
	}
	loc, err := req.URL.Parse(raw)
	if err != nil {
		return resp, nil //nolint:nilerr // a Location that is no URL: nothing to resume
	}
	header := keptHeaders(req.Header, sameOrigin(req.URL, loc))
	b := &body{t: t, ctx: req.Context(), cur: resp.Body, url: loc.String(), header: header, delay: t.retryDelay()}
	if !t.NoCancelOnAbort {
		b.cancelURL = locationCancelURL(loc)
		b.unwatch = context.AfterFunc(b.ctx, b.abandon)
	}
	resp.Body = b
	return resp, nil
}

// keyCancelURL is the cancel of key on the POST's origin: the streaming
// path's /v1/… replaced by /v1/streams/{key}/cancel.
func keyCancelURL(post *url.URL, key string) string {
	u := *post
	u.RawQuery, u.Fragment = "", ""
	esc := streamingPath.ReplaceAllLiteralString(u.EscapedPath(), "/v1/streams/"+url.PathEscape(key)+"/cancel")
	p, err := url.PathUnescape(esc)
	if err != nil {
		return ""
	}
	u.Path, u.RawPath = p, esc
	return u.String()
}

// locationCancelURL is the cancel of a Location: its path + /cancel, its
// query (the ?token= capability) kept.
func locationCancelURL(loc *url.URL) string {
	u := *loc
	u.Fragment = ""
	u.Path = strings.TrimSuffix(u.Path, "/") + "/cancel"
	if u.RawPath != "" {
		u.RawPath = strings.TrimSuffix(u.RawPath, "/") + "/cancel"
	}
	return u.String()
}

// cancel asks reprise to cancel a generation, best-effort, on a context
// of its own (ctx's values, not its end) for at most CancelTimeout; header
// is what a reconnection would send (keptHeaders). No redirect is
// followed.
func (t *Transport) cancel(ctx context.Context, target string, header http.Header) {
	if target == "" {
		return
	}
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), CancelTimeout)
	defer stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
	if err != nil {
		return
	}
	req.Header = header.Clone()
	req.Header.Set("Accept", "application/json")
	resp, err := t.base().RoundTrip(req)
	if err != nil {
		return // the generation runs on, as for a disconnect
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
	_ = resp.Body.Close()
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) retryDelay() time.Duration {
	if t.RetryDelay > 0 {
		return t.RetryDelay
	}
	return DefaultRetryDelay
}

// key is a new key for req, or the one its first try got when req is an
// SDK's retry of a request sent lately (same URL and body).
func (t *Transport) key(req *http.Request) (string, error) {
	var id [32]byte
	remember := req.GetBody != nil || req.Body == nil || req.Body == http.NoBody
	if remember {
		h := sha256.New()
		_, _ = io.WriteString(h, req.URL.String()+"\n")
		if req.GetBody != nil {
			b, err := req.GetBody()
			if err != nil {
				return "", fmt.Errorf("roundtrip: reading the request body: %w", err)
			}
			_, err = io.Copy(h, b)
			_ = b.Close()
			if err != nil {
				return "", fmt.Errorf("roundtrip: reading the request body: %w", err)
			}
		}
		h.Sum(id[:0])
	}
	retry, _ := strconv.Atoi(req.Header.Get("X-Stainless-Retry-Count"))
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, ok := t.recent[id]; remember && retry > 0 && ok && now.Sub(r.at) < recentTTL {
		return r.key, nil
	}
	key := rand.Text()
	if remember {
		if t.recent == nil || len(t.recent) >= recentMax {
			t.recent = make(map[[32]byte]recentKey, recentMax) // start afresh: retries come within seconds
		}
		t.recent[id] = recentKey{key: key, at: now}
	}
	return key, nil
}

func isEventStream(h http.Header) bool {
	mt, _, err := mime.ParseMediaType(h.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// keptHeaders are the headers a reconnection sends: the kept ones of the
// POST's, without its credentials unless the Location is of its origin.
func keptHeaders(h http.Header, withCredentials bool) http.Header {
	out := http.Header{"Accept": {"text/event-stream"}}
	for _, k := range kept {
		if credentials[k] && !withCredentials {
			continue
		}
		if v := h.Values(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

// sameOrigin reports whether a and b have one origin: the same scheme,
// host and port (a scheme's default port when none is written).
func sameOrigin(a, b *url.URL) bool {
	return a.Host != "" && strings.EqualFold(a.Scheme, b.Scheme) &&
		strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "ws":
		return "80"
	case "https", "wss":
		return "443"
	}
	return ""
}

// body is a resumed event stream: the POST's answer, then each
// reconnection's, whole events only. A caller that stops before the
// terminal event — its context done, or Close — cancels the generation
// (abandon), unless the transport has NoCancelOnAbort.
type body struct {
	t      *Transport
	ctx    context.Context
	cur    io.ReadCloser // nil once the stream is over
	url    string        // the Location
	header http.Header   // what a reconnection sends
	p      parser
	out    []byte // events parsed, not yet read
	delay  time.Duration
	tries  int  // reconnections since the last event
	done   bool // a terminal or final error event was read
	err    error
	buf    [4 << 10]byte

	cancelURL string      // the Location's cancel; "" with NoCancelOnAbort
	unwatch   func() bool // stops watching the caller's context; nil with NoCancelOnAbort
	over      atomic.Bool // the stream ended by itself: its terminal event, its end, or the helper's error
	cancelled sync.Once   // the cancel, sent at most once; a second caller waits for the first's
}

// abandon cancels the generation, unless the stream ended by itself; it
// returns once reprise answered (or CancelTimeout passed).
func (b *body) abandon() {
	if b.cancelURL == "" || b.over.Load() {
		return
	}
	b.cancelled.Do(func() { b.t.cancel(b.ctx, b.cancelURL, b.header) })
}

// end marks the stream ended by itself: nothing to cancel any more.
func (b *body) end() {
	b.over.Store(true)
	if b.unwatch != nil {
		b.unwatch()
	}
}

func (b *body) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.err != nil {
			return 0, b.err
		}
		b.fill()
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

// fill reads the current stream once, or reconnects when it ended.
func (b *body) fill() {
	n, err := b.cur.Read(b.buf[:])
	if n > 0 && b.take(b.buf[:n]) {
		err = io.EOF // reprise cut this reader: resume
	}
	if err == nil {
		return
	}
	_ = b.cur.Close()
	if b.done || b.err != nil {
		b.end()
		b.cur = io.NopCloser(bytes.NewReader(nil))
		if b.err == nil {
			b.err = io.EOF
		}
		return
	}
	if cerr := b.ctx.Err(); cerr != nil {
		b.err = cerr
		b.abandon() // the caller's stop, not the network's
		return
	}
	b.p.dropPartial() // a cut event is read again whole
	b.cur, b.err = b.reconnect()
	if b.cur == nil {
		b.cur = io.NopCloser(bytes.NewReader(nil))
		if b.ctx.Err() != nil {
			b.abandon()
		} else {
			b.end() // complete (204), or the helper's error
		}
	}
}

// take passes whole events on; it reports whether the stream must be
// resumed now (an error event without an id: reprise cut the reader, its
// cursor stays).
func (b *body) take(chunk []byte) (resume bool) {
	for _, ev := range b.p.push(chunk) {
		if ev.retry > 0 {
			b.delay = ev.retry
		}
		switch {
		case ev.typ == "error" && !ev.hasID:
			return true
		case ev.typ == "reset":
			b.err = fmt.Errorf("%w: the generation this stream read failed and the key started another", ErrResume)
			b.end()
			return false
		}
		if ev.isData {
			b.tries = 0
		}
		b.out = append(b.out, ev.raw...)
		if ev.final {
			b.done = true
			b.end()
		}
	}
	return false
}

// reconnect asks the Location for what follows the cursor; a nil body and
// io.EOF when nothing does (204: the stream is complete).
func (b *body) reconnect() (io.ReadCloser, error) {
	maxTries, maxDelay := b.t.MaxAttempts, b.t.MaxDelay
	if maxTries <= 0 {
		maxTries = DefaultMaxAttempts
	}
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	for {
		b.tries++
		if b.tries > maxTries {
			return nil, fmt.Errorf("%w: %d reconnections got no event", ErrResume, maxTries)
		}
		wait := min(maxDelay, b.delay<<(b.tries-1))
		timer := time.NewTimer(wait)
		select {
		case <-b.ctx.Done():
			timer.Stop()
			return nil, b.ctx.Err()
		case <-timer.C:
		}
		req, err := http.NewRequestWithContext(b.ctx, http.MethodGet, b.url, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrResume, err)
		}
		req.Header = b.header.Clone()
		if b.p.lastID != "" {
			req.Header.Set("Last-Event-ID", b.p.lastID)
		}
		resp, err := b.t.base().RoundTrip(req)
		if err != nil {
			if b.ctx.Err() != nil {
				return nil, b.ctx.Err()
			}
			continue // the network again: next attempt
		}
		switch {
		case resp.StatusCode == http.StatusNoContent:
			_ = resp.Body.Close()
			return nil, io.EOF
		case resp.StatusCode == http.StatusOK && isEventStream(resp.Header):
			return resp.Body, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
			continue
		}
		return nil, fmt.Errorf("%w: the Location answered %s", ErrResume, resp.Status)
	}
}

// Close before the terminal event is the caller's stop: it cancels the
// generation (unless NoCancelOnAbort) and returns once reprise answered.
func (b *body) Close() error {
	b.abandon()
	b.end()
	if b.err == nil {
		b.err = errors.New("roundtrip: read on a closed body")
	}
	return b.cur.Close()
}
