package tests

import (
	"bufio"
	"context"
	"fmt"
	"iter"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// SSE readers on HTTP/1 are served on connections taken over from net/http
// (stream/detach.go). These tests talk raw HTTP/1 to see the wire.

// rawRequest sends req on a new connection to base and returns the
// connection and a reader positioned after the response head, with the head
// parsed.
func rawRequest(t *testing.T, base, req string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := conn.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return conn, br, resp
}

// TestDetachedResponse: the head of a taken-over SSE response (a GET of
// the Location) carries the handler's headers and Connection: close, the
// body is plain SSE up to [DONE], and the server then closes the
// connection; HTTP/1.0 gets an HTTP/1.0 status line. The POST's own answer
// stays with net/http and keeps its connection.
func TestDetachedResponse(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=4]")
	key := "k-detached"
	post := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key)
	if post.Close || post.Header.Get("Connection") != "" {
		t.Fatalf("the POST's answer closes its connection: %v", post.Header)
	}
	checkComplete(t, readEvents(t, post, -1), prompt, 4)
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		_, br, resp := rawRequest(t, e.URL, fmt.Sprintf("GET /v1/streams/%s %s\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n", key, proto))
		if resp.Proto != proto || resp.StatusCode != 200 {
			t.Fatalf("%s: answered %s %d", proto, resp.Proto, resp.StatusCode)
		}
		h := resp.Header
		if h.Get("Content-Type") != "text/event-stream" || h.Get("Cache-Control") != "no-cache" || h.Get("X-Accel-Buffering") != "no" ||
			h.Get("Idempotency-Key") != key || h.Get("Date") == "" ||
			!resp.Close || h.Get("Transfer-Encoding") != "" || resp.ContentLength != -1 {
			t.Fatalf("%s: head %v (close %v, length %d)", proto, h, resp.Close, resp.ContentLength)
		}
		var evs []event
		for ev, err := range sse.Read(br, nil) {
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data})
		}
		checkComplete(t, evs, prompt, 4) // the body ended with the connection, after [DONE]
	}
}

// TestDetachedClientLeaves: a reader that hangs up gives its place back at
// once (the connection is watched, not found dead at the next write), and
// a later reader of the key gets the rest.
func TestDetachedClientLeaves(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.HTTP.MaxReadersPerKey = 1; c.HTTP.Heartbeat = time.Minute }))
	prompt := uniquePrompt(t, "[tokens=40] [delay=50ms]")
	key := "k-leaves"
	post := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key)
	first := readEvents(t, post, 1)
	post.Body.Close() // the POSTing client leaves; a GET reader takes the place
	var (
		conn net.Conn
		br   *bufio.Reader
		head *http.Response
	)
	testutil.Eventually(t, 10*time.Second, "the POSTing client's reader place to come back (429 until then)", func() bool {
		conn, br, head = rawRequest(t, e.URL, fmt.Sprintf("GET /v1/streams/%s HTTP/1.1\r\nHost: x\r\nLast-Event-ID: %s\r\n\r\n", key, lastID(first)))
		if head.StatusCode != http.StatusOK {
			conn.Close()
			return false
		}
		return true
	})
	if !head.Close {
		t.Fatal("the GET reader was not detached")
	}
	got := first
	for ev, err := range sse.Read(br, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if got = append(got, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data}); len(got) == 3 {
			break
		}
	}
	conn.Close()
	left := time.Now()
	var resp *http.Response
	// Well within the 2s the generation still runs.
	testutil.Eventually(t, time.Second, "the reader that left to give its place back (429 until then)", func() bool {
		resp = do(t, "GET", e.URL+"/v1/streams/k-leaves", "", "Last-Event-ID", lastID(got))
		if resp.StatusCode == http.StatusTooManyRequests {
			readBody(t, resp)
			return false
		}
		return true
	})
	t.Logf("place back after %s", time.Since(left).Round(time.Millisecond))
	rest := readEvents(t, resp, -1)
	checkComplete(t, append(got, rest...), prompt, 40)
}

// TestDetachedClose: Shutdown lets readers of finishing generations end on
// their own, and cuts the rest when its context ends (the long generation
// is cancelled then: its reader ends without [DONE]).
func TestDetachedClose(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAbandon()) // the long generation is still running at the end
	short := uniquePrompt(t, "[tokens=5] [delay=20ms]")
	long := uniquePrompt(t, "[tokens=1000] [delay=50ms]")
	for key, prompt := range map[string]string{"k-close-short": short, "k-close-long": long} {
		readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key), 1) // and leave
	}
	a := do(t, "GET", e.URL+"/v1/streams/k-close-short", "")
	b := do(t, "GET", e.URL+"/v1/streams/k-close-long", "")
	defer a.Body.Close()
	defer b.Body.Close()
	if !a.Close || !b.Close {
		t.Fatal("the readers were not detached")
	}
	shutdownPastLong(t, e)
	checkComplete(t, readEvents(t, a, -1), short, 5) // finished on its own
	evs := readEvents(t, b, -1)                      // cut: no [DONE]
	if len(evs) == 0 || evs[len(evs)-1].Data == "[DONE]" {
		t.Fatalf("the long reader got %d events ending %+v, want a cut stream", len(evs), evs[len(evs)-1])
	}
}

// shutdownPastLong shuts e's proxy down with a 5 s context — long enough
// for a short generation to end on a loaded machine (CI saw appends stall
// for more than a second), far shorter than a long one's 50 s — and checks
// that Shutdown waited for its context and said it had to cut.
func shutdownPastLong(t *testing.T, e *env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := e.p.Shutdown(ctx); err == nil {
		t.Fatal("Shutdown returned no error with a generation still running at the end of its context")
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("Shutdown returned after %s, before its context ended, with a reader of a long generation", took)
	}
}

// TestDetachedNotOverHTTP2: HTTP/2 cannot be taken over; the stream is
// served by net/http itself.
func TestDetachedNotOverHTTP2(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs := httptest.NewUnstartedServer(e.p)
	hs.EnableHTTP2 = true
	hs.StartTLS()
	t.Cleanup(hs.Close)
	client := hs.Client()
	prompt := uniquePrompt(t, "[tokens=3]")
	req, err := http.NewRequestWithContext(waitCtx(t, 20*time.Second), "POST", hs.URL+chatPath, strings.NewReader(chatBody(prompt, true)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-h2")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ProtoMajor != 2 || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "h2" {
		t.Fatalf("proto %s (tls %v)", resp.Proto, resp.TLS != nil)
	}
	checkComplete(t, readEvents(t, resp, -1), prompt, 3)
}

// TestHTTP2ReaderWaitsOutsideItsHandlerChain: a reader of a Location over HTTP/2, which
// net/http cannot let go of, waits for its events with nothing of the
// handler chain that decided its request under it (the runtime halves an
// idle goroutine's stack only while it uses under a quarter of it), and
// gets its stream: a live one from its start, and a completed one whole.
func TestHTTP2ReaderWaitsOutsideItsHandlerChain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAbandon()) // the long generation ends once its reader left
	hs := httptest.NewUnstartedServer(e.p)
	hs.EnableHTTP2 = true
	hs.StartTLS()
	t.Cleanup(hs.Close)
	get := func(ctx context.Context, key string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", hs.URL+"/v1/streams/"+key, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hs.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 2 {
			t.Fatalf("%s over %s", resp.Status, resp.Proto)
		}
		return resp
	}

	// A live generation (the POST on HTTP/1, so that the only HTTP/2
	// handler is the reader's), long enough to be found waiting.
	long := uniquePrompt(t, "[tokens=1000] [delay=20ms]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(long, true), "Idempotency-Key", "k-h2-live"), 1)
	ctx, cancel := context.WithCancel(waitCtx(t, 60*time.Second))
	defer cancel()
	resp := get(ctx, "k-h2-live")
	next, stop := iter.Pull2(sse.Read(resp.Body, nil))
	defer stop()
	var evs []event
	read := func() {
		t.Helper()
		ev, err, ok := next()
		if !ok || err != nil {
			t.Fatalf("the HTTP/2 reader's stream ended after %d events: %v", len(evs), err)
		}
		evs = append(evs, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data})
	}
	read()
	var waiting string
	for waiting == "" {
		buf := make([]byte, 8<<20)
		for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*http2serverConn).runHandler") && strings.Contains(g, "(*Server).followTail") {
				waiting = g
			}
		}
		if waiting == "" {
			select {
			case <-ctx.Done():
				t.Fatal("no HTTP/2 reader found waiting for its events")
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	if strings.Contains(waiting, "(*Server).handleStream") || !strings.Contains(waiting, "(*Server).ServeHTTP") {
		t.Fatalf("the HTTP/2 reader waits on top of the handler chain that decided its request:\n%s", waiting)
	}
	for range 5 {
		read()
	}
	checkUnique(t, evs)
	if text := content(t, evs); text == "" {
		t.Fatalf("no content in %d events", len(evs))
	}
	cancel()

	// A completed generation, read whole.
	short := uniquePrompt(t, "[tokens=5]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(short, true), "Idempotency-Key", "k-h2-done"), -1)
	checkComplete(t, readEvents(t, get(waitCtx(t, 20*time.Second), "k-h2-done"), -1), short, 5)
}

// TestDetachedPipelined: a request pipelined behind a stream's GET is not
// answered on that connection (Connection: close says so); the stream is.
func TestDetachedPipelined(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=3]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-pipe"), -1)
	_, br, resp := rawRequest(t, e.URL, "GET /v1/streams/k-pipe HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("%d, close %v", resp.StatusCode, resp.Close)
	}
	var evs []event
	for ev, err := range sse.Read(br, nil) {
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data})
	}
	checkComplete(t, evs, prompt, 3)
}

// TestDetachedChattyClient: a client that keeps sending on a detached
// stream's connection is cut once it sent more than a pipelined request
// could need, instead of being read forever.
func TestDetachedChattyClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAbandon())
	prompt := uniquePrompt(t, "[tokens=1000] [delay=50ms]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-chatty"), 1)
	conn, br, resp := rawRequest(t, e.URL, "GET /v1/streams/k-chatty HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("%d, close %v", resp.StatusCode, resp.Close)
	}
	if _, err := conn.Write(make([]byte, 16<<10)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, err := range sse.Read(br, nil) {
		if err != nil {
			break
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("the chatty client's stream ran on for %s", took)
	}
}

// TestCanceledStreamIsBroken: when a stream's request is canceled while
// its connection is still open (seen behind Caddy: the balancer's client
// still reading), the answer must not end like a complete response: the
// client sees a broken stream, which it resumes, never a clean end without
// [DONE].
func TestCanceledStreamIsBroken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		time.AfterFunc(200*time.Millisecond, cancel)
		e.p.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(hs.Close)
	prompt := uniquePrompt(t, "[tokens=100] [delay=20ms]")
	resp, err := send(waitCtx(t, 30*time.Second), "POST", hs.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-canceled")
	if err != nil {
		// Canceled before the upstream's head came (a loaded machine):
		// the answer is broken before it began, which clients retry too.
		t.Logf("broken before its head: %v", err)
		return
	}
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("%d, close %v", resp.StatusCode, resp.Close)
	}
	var n int
	var readErr error
	for ev, err := range sse.Read(resp.Body, nil) {
		if err != nil {
			readErr = err
			break
		}
		if ev.Data == "[DONE]" {
			t.Fatal("the stream completed within the 200 ms before its request was canceled")
		}
		n++
	}
	resp.Body.Close()
	if readErr == nil {
		t.Fatalf("the canceled stream ended cleanly after %d events, without [DONE] or an error", n)
	}
	t.Logf("after %d events: %v", n, readErr)
}
