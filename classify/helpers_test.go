package classify_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
)

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// rawServer is a TCP listener on 127.0.0.1 whose every accepted connection
// is given to handle; it counts connections and full requests read.
type rawServer struct {
	URL      string
	done     chan struct{} // closed when the test ends
	conns    atomic.Int64
	requests atomic.Int64
}

// newRawServer listens on 127.0.0.1:0 and serves each connection with
// handle until the test ends.
func newRawServer(tb testing.TB, handle func(s *rawServer, c *net.TCPConn)) *rawServer {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &rawServer{URL: "http://" + ln.Addr().String(), done: make(chan struct{})}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(s, c.(*net.TCPConn))
			}()
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		close(s.done)
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// readRequest reads one whole request (head and body) from c.
func (s *rawServer) readRequest(c net.Conn) bool {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return false
	}
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		return false
	}
	s.requests.Add(1)
	return true
}

// reset aborts c with a TCP RST: linger 0, then close.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// resetAfterRequest reads the whole request, then resets the connection:
// the request was delivered, no response head will come.
func resetAfterRequest(s *rawServer, c *net.TCPConn) {
	s.readRequest(c)
	reset(c)
}

// silentAfterRequest reads the whole request and never answers; it holds
// the connection until the client goes away.
func silentAfterRequest(s *rawServer, c *net.TCPConn) {
	if s.readRequest(c) {
		_, _ = io.Copy(io.Discard, c)
	}
	_ = c.Close()
}

// holdOpen reads whatever comes and keeps the connection open, never
// answering, until the test ends.
func holdOpen(s *rawServer, c *net.TCPConn) {
	_, _ = io.Copy(io.Discard, c)
	<-s.done
	_ = c.Close()
}

// refusedURL returns a loopback URL nothing listens on.
func refusedURL(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// newClient returns a client with its own transport, closed at test end.
func newClient(tb testing.TB, tr *http.Transport) *http.Client {
	tb.Helper()
	if tr == nil {
		tr = &http.Transport{}
	}
	tb.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// roundTrip makes one POST to url with a classify.Trace (and extra hooks,
// if any) and returns the outcome and the trace.
func roundTrip(tb testing.TB, client *http.Client, url string, extra *httptrace.ClientTrace) (*http.Response, *classify.Trace, error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	tb.Cleanup(cancel)
	var tr classify.Trace
	ctx = httptrace.WithClientTrace(ctx, tr.ClientTrace())
	if extra != nil {
		ctx = httptrace.WithClientTrace(ctx, extra) // composed with tr's hooks
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"model":"m"}`))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if resp != nil {
		tb.Cleanup(func() { resp.Body.Close() })
	}
	return resp, &tr, err
}

// wantKind fails tb unless err is a *classify.Error of kind want (by
// errors.Is) with status and code.
func wantKind(tb testing.TB, err error, want error, status int, code string) *classify.Error {
	tb.Helper()
	var e *classify.Error
	if !errors.As(err, &e) {
		tb.Fatalf("err = %v (%T), want *classify.Error", err, err)
	}
	if !errors.Is(err, want) {
		tb.Errorf("errors.Is(%v, %v) = false", err, want)
	}
	for _, other := range allKinds {
		if other != want && errors.Is(err, other) {
			tb.Errorf("errors.Is(%v, %v) = true, want only %v", err, other, want)
		}
	}
	if e.Status != status {
		tb.Errorf("Status = %d, want %d", e.Status, status)
	}
	if e.Code != code {
		tb.Errorf("Code = %q, want %q", e.Code, code)
	}
	return e
}

var allKinds = []error{classify.ErrRetryable, classify.ErrFatal, classify.ErrAmbiguous, classify.ErrInterrupted, classify.ErrUnavailable}

// newUpstream starts an httptest server with handler h.
func newUpstream(tb testing.TB, h http.HandlerFunc) *httptest.Server {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv
}
