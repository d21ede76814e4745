package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestPassThroughFullDuplex: the bench's pass-through streams an answer
// while the client is still sending its request body, and the answer
// arrives whole. Without full duplex, net/http's HTTP/1 server consumes the
// rest of the body as the answer starts, from under the reverse proxy: the
// answer stalls, or is cut.
func TestPassThroughFullDuplex(t *testing.T) {
	const lines = 5
	// The upstream answers each line of the body with an event as it
	// arrives, the first before the second is sent, and ends at the body's end.
	up, upURL, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.EnableFullDuplex(); err != nil {
			t.Errorf("upstream: %v", err)
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		sc := bufio.NewScanner(r.Body)
		for sc.Scan() {
			fmt.Fprintf(w, "data: got %s\n\n", sc.Text())
			_ = rc.Flush()
		}
		if sc.Err() != nil {
			fmt.Fprintf(w, "data: body error %v\n\n", sc.Err())
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = up.Close() }()
	u, _ := url.Parse(upURL)
	pass, passURL, err := serve(passThrough(u))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pass.Close() }()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pr, pw := io.Pipe()
	defer func() { _ = pw.Close() }()
	// The transport waits for its read of the body to end before it gives
	// up on the request: end it at the deadline.
	context.AfterFunc(ctx, func() { pw.CloseWithError(ctx.Err()) })
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, passURL+"/", pr)
	go func() { _, _ = fmt.Fprintln(pw, "line 0") }() // the rest is sent as the answer streams
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatalf("no answer while the body is still being sent: %v", err)
	}
	defer resp.Body.Close()
	r := newSSEReader(resp.Body)
	var got []string
	next := func() string {
		for {
			l, err := r.line()
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			if d, ok := dataOf(l); ok {
				got = append(got, string(d))
				return string(d)
			}
		}
	}
	for i := range lines {
		if d, want := next(), fmt.Sprintf("got line %d", i); d != want {
			t.Fatalf("event %d is %q, want %q (all: %q)", i, d, want, got)
		}
		if i+1 < lines {
			if _, err := fmt.Fprintf(pw, "line %d\n", i+1); err != nil {
				t.Fatalf("sending line %d after %d events: %v", i+1, len(got), err)
			}
		}
	}
	_ = pw.Close() // the body's end
	if d := next(); d != "[DONE]" {
		t.Fatalf("the answer ends with %q, want [DONE] (all: %q)", d, got)
	}
	if rest, err := io.ReadAll(r.br); err != nil || strings.TrimSpace(string(rest)) != "" {
		t.Errorf("after [DONE]: %q, %v", rest, err)
	}
}
