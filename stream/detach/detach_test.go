package detach

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"
)

// TestGroup: a taken connection carries the handler's headers (a change
// after the head is sent has no effect) and what serve writes, delimited
// by closing; Close cuts a response still running
// once its context ends; after Close nothing more is taken.
func TestGroup(t *testing.T) {
	g := NewGroup()
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Test", "kept")
		c := g.Take(w, r)
		if c == nil {
			w.WriteHeader(http.StatusTeapot) // net/http serves it
			return
		}
		g.Go(c, func(ctx context.Context, w http.ResponseWriter) {
			_, _ = io.WriteString(w, "first\n")
			_ = w.(interface{ FlushError() error }).FlushError()
			w.Header().Set("X-Test", "changed after the head") // no effect, as on net/http
			if r.URL.Path == "/forever" {
				<-ctx.Done()
				return
			}
			<-release
			_, _ = io.WriteString(w, "second\n")
		}, func() {})
	}))
	defer hs.Close()

	resp, err := http.Get(hs.URL + "/short")
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close || resp.Header.Get("X-Test") != "kept" || resp.StatusCode != 200 {
		t.Fatalf("head: close %v, X-Test %q, status %d", resp.Close, resp.Header.Get("X-Test"), resp.StatusCode)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(rest), "second") {
		t.Fatalf("rest %q", rest)
	}

	forever, err := http.Get(hs.URL + "/forever")
	if err != nil {
		t.Fatal(err)
	}
	defer forever.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	g.Close(ctx)
	if took := time.Since(start); took < 150*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Close took %s with a response that never ends: want its context's 200ms", took)
	}
	if b, _ := io.ReadAll(forever.Body); string(b) != "first\n" {
		t.Fatalf("the cut response carried %q", b)
	}
	after, err := http.Get(hs.URL + "/short")
	if err != nil {
		t.Fatal(err)
	}
	after.Body.Close()
	if after.StatusCode != http.StatusTeapot || after.Close {
		t.Fatalf("after Close: %d, close %v; want net/http's own answer", after.StatusCode, after.Close)
	}
}

// TestGroupTrack: a tracked response runs on its own goroutine; Close
// waits for one that ends on its own, cuts one still running once its
// context ends (serve sees ctx end, and Close returns only after serve
// has), and after Close nothing more is tracked.
func TestGroupTrack(t *testing.T) {
	g := NewGroup()
	finish := make(chan struct{})
	finished := make(chan struct{})
	cut := make(chan struct{})
	var cutReturned bool
	if !g.Track(func(ctx context.Context) {
		defer close(finished)
		select {
		case <-finish: // ends on its own, before Close's context ends
		case <-ctx.Done():
			t.Error("a response that ends on its own was cut")
		}
	}) {
		t.Fatal("Track refused before Close")
	}
	if !g.Track(func(ctx context.Context) {
		<-ctx.Done()
		close(cut)
		time.Sleep(50 * time.Millisecond) // Close waits for serve to return
		cutReturned = true
	}) {
		t.Fatal("Track refused before Close")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	go func() { time.Sleep(50 * time.Millisecond); close(finish) }()
	start := time.Now()
	g.Close(ctx)
	took := time.Since(start)
	select {
	case <-finished:
	default:
		t.Fatal("Close returned before the finishing response did")
	}
	select {
	case <-cut:
	default:
		t.Fatal("the running response's ctx did not end")
	}
	if !cutReturned {
		t.Fatal("Close returned before the cut response's serve did")
	}
	if took < 250*time.Millisecond || took > 5*time.Second {
		t.Fatalf("Close took %s: want its context's 300ms, then the cut", took)
	}
	if g.Track(func(context.Context) { t.Error("served after Close") }) {
		t.Fatal("Track took a response after Close")
	}
	time.Sleep(20 * time.Millisecond) // a wrongly started serve would report by now
}

// TestGroupHearsLeave: an idle detached reader has no goroutine reading
// its connection (on Linux the Group's poller watches it); a client that
// sends bytes (a request pipelined behind the GET) starts one and keeps
// its response, and a client that leaves ends serve's context, over plain
// TCP and TLS; once Close returns, the poller is gone too.
func TestGroupHearsLeave(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(map[bool]string{false: "tcp", true: "tls"}[tlsOn], func(t *testing.T) {
			g := NewGroup()
			served, gone := make(chan struct{}, 1), make(chan struct{}, 1)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c := g.Take(w, r)
				if c == nil {
					t.Error("not taken")
					return
				}
				g.Go(c, func(ctx context.Context, w http.ResponseWriter) {
					_, _ = io.WriteString(w, "first\n")
					_ = w.(interface{ FlushError() error }).FlushError()
					served <- struct{}{}
					<-ctx.Done()
					gone <- struct{}{}
				}, func() {})
			})
			hs := httptest.NewUnstartedServer(h)
			if tlsOn {
				hs.StartTLS()
			} else {
				hs.Start()
			}
			defer hs.Close()
			var conn net.Conn
			var err error
			if tlsOn {
				conn, err = tls.Dial("tcp", hs.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
			} else {
				conn, err = net.Dial("tcp", hs.Listener.Addr().String())
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			<-served
			readers := func() int { return strings.Count(goroutines(), "detach.(*Conn).watch") }
			if runtime.GOOS == "linux" && readers() != 0 {
				t.Fatalf("an idle reader has %d goroutines reading its connection, want 0:\n%s", readers(), goroutines())
			}
			// A pipelined request: read (and ignored), the response goes on.
			if _, err := io.WriteString(conn, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			for readers() != 1 {
				runtime.Gosched() // the poller starts the reading goroutine
			}
			select {
			case <-gone:
				t.Fatal("a client that sent bytes was taken for gone")
			default:
			}
			_ = conn.Close()
			<-gone // the test's deadline bounds it
			g.Close(context.Background())
			// Close returns once run did; its goroutine may still be on
			// its way out (a deferred close) for a moment.
			for deadline := time.Now().Add(10 * time.Second); strings.Contains(goroutines(), "detach.(*poller).run"); {
				if time.Now().After(deadline) {
					t.Fatalf("a poller left 10 s after Close:\n%s", goroutines())
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}

// goroutines is every goroutine's stack.
func goroutines() string {
	var b strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}
