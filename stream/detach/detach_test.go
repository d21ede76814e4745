package detach

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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
