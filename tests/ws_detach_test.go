package tests

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reprise-dev/reprise/internal/proxy"
)

// A WebSocket reader is served, once upgraded, on a goroutine the server's
// detach group tracks (stream/get.go serveWS): the net/http handler
// returns, and Shutdown cuts the reader as it cuts a detached SSE one.

// dialWS opens a WebSocket reader of key on e, which does not answer
// pings and close frames.
func dialWS(t *testing.T, e *env, key string) *websocket.Conn {
	t.Helper()
	url := "ws" + strings.TrimPrefix(e.URL, "http") + "/v1/streams/" + key
	conn, resp, err := websocket.DefaultDialer.DialContext(waitCtx(t, 10*time.Second), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	t.Cleanup(func() { conn.Close() })
	// A reader that reads late gets pings and the close frame after the
	// server closed the connection: answering them would fail and hide the
	// close frame.
	conn.SetPingHandler(func(string) error { return nil })
	conn.SetCloseHandler(func(int, string) error { return nil })
	return conn
}

// readWS reads frames until the connection ends and returns their data
// and the error that ended it (a *websocket.CloseError for a close frame).
func readWS(t *testing.T, conn *websocket.Conn, within time.Duration) ([]string, error) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	var data []string
	for {
		var f struct{ ID, Event, Data string }
		if err := conn.ReadJSON(&f); err != nil {
			return data, err
		}
		data = append(data, f.Data)
	}
}

// TestWebSocketShutdownCut: Shutdown lets a WebSocket reader of a
// finishing generation end on its own (a normal closure after [DONE]) and
// ends one whose generation runs past Shutdown's context without [DONE],
// at once: the generation's end or the cut reaches it first.
func TestWebSocketShutdownCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAbandon()) // the long generation is still running at the end
	short := uniquePrompt(t, "[tokens=5] [delay=20ms]")
	long := uniquePrompt(t, "[tokens=1000] [delay=50ms]")
	for key, prompt := range map[string]string{"k-ws-close-short": short, "k-ws-close-long": long} {
		readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key), 1) // and leave
	}
	a := dialWS(t, e, "k-ws-close-short")
	b := dialWS(t, e, "k-ws-close-long")
	shutdownPastLong(t, e)
	data, err := readWS(t, a, 10*time.Second)
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) || len(data) == 0 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("the short reader: %d frames ending %q, then %v; want [DONE] and a normal closure", len(data), last(data), err)
	}
	// Shutdown has returned: the long reader has ended (its generation
	// would run for 50 s more), told so either by the generation's end
	// (the engine stopped it: a proxy_shutdown error frame) or, when the
	// detach group cut the reader first, by a going-away close frame.
	data, err = readWS(t, b, 3*time.Second)
	stopped := strings.Contains(last(data), "proxy_shutdown") && websocket.IsCloseError(err, websocket.CloseNormalClosure)
	if !stopped && !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("the long reader: %d frames ending %q, then %v; want a going-away close frame or a proxy_shutdown error", len(data), last(data), err)
	}
	if last(data) == "[DONE]" {
		t.Fatal("the cut reader got [DONE]")
	}
	t.Logf("the long reader was cut by the generation's end: %v", stopped)
}

func last(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}

// TestWebSocketHandlerReturns: an idle WebSocket reader keeps no net/http
// handler goroutine (one parked in serveWS under net/http's conn.serve),
// while the goroutine following its stream is there.
func TestWebSocketHandlerReturns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAbandon()) // the generation is still running at the end
	key := "k-ws-idle"
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=400] [delay=50ms]"), true), "Idempotency-Key", key), 1)
	conn := dialWS(t, e, key)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := conn.ReadMessage(); err != nil { // it is being served
		t.Fatal(err)
	}
	// Other tests run in parallel: one of their handlers may be in serveWS
	// for a moment, not for seconds.
	var handlers, followers int
	for deadline := time.Now().Add(5 * time.Second); ; {
		handlers, followers = wsGoroutines()
		if handlers == 0 && followers > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if followers == 0 {
		t.Fatal("no goroutine follows the WebSocket reader's stream")
	}
	if handlers != 0 {
		t.Fatalf("%d net/http handler goroutines parked in serveWS for an idle WebSocket reader", handlers)
	}
}

// wsGoroutines counts the goroutines in serveWS under net/http's
// conn.serve (handlers), and those following a WebSocket reader's stream.
func wsGoroutines() (handlers, followers int) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte("stream.(*Server).serveWS")) && bytes.Contains(g, []byte("net/http.(*conn).serve(")) {
			handlers++
		}
		if bytes.Contains(g, []byte("stream.(*Server).follow(")) && bytes.Contains(g, []byte("stream.(*Server).serveWS")) {
			followers++
		}
	}
	return handlers, followers
}

// TestWebSocketPlaceHeld: a detached WebSocket reader holds its reader
// place until it ends, and gives it back when its client closes.
func TestWebSocketPlaceHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAbandon(), withConfig(func(c *proxy.Config) { c.HTTP.MaxReadersPerKey = 1 }))
	key := "k-ws-place"
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=400] [delay=50ms]"), true), "Idempotency-Key", key), 1)
	url := "ws" + strings.TrimPrefix(e.URL, "http") + "/v1/streams/" + key
	// The POSTing client left: its place comes back once its handler saw it
	// go (a moment, on a loaded machine).
	var first *websocket.Conn
	for deadline := time.Now().Add(5 * time.Second); first == nil; time.Sleep(20 * time.Millisecond) {
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		switch {
		case err == nil:
			first = conn
			t.Cleanup(func() { conn.Close() })
		case resp == nil || resp.StatusCode != 429 || time.Now().After(deadline):
			t.Fatalf("the first reader: %v, %v", err, resp)
		}
	}
	_ = first.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := first.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	if _, resp, err := websocket.DefaultDialer.Dial(url, nil); err == nil || resp == nil || resp.StatusCode != 429 {
		t.Fatalf("a second reader while the first is served: %v, %v; want 429", err, resp)
	}
	_ = first.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		conn, resp, err := websocket.DefaultDialer.Dial(url, nil)
		if err == nil {
			conn.Close()
			return
		}
		if resp == nil || resp.StatusCode != 429 || time.Now().After(deadline) {
			t.Fatalf("after the first reader's client closed: %v, %v; want its place back", err, resp)
		}
	}
}
