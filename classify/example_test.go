package classify_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/reprise-dev/reprise/classify"
)

// ExamplePolicy_Do calls an upstream that is briefly overloaded, then one
// that refuses the request.
func ExamplePolicy_Do() {
	var n atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/bad":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"message":"unknown model"}}`)
		case n.Add(1) == 1:
			w.Header().Set("Retry-After-Ms", "10")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			io.WriteString(w, `{"id":"chatcmpl-1"}`)
		}
	}))
	defer upstream.Close()

	p, err := classify.New(classify.Config{MaxAttempts: 3, BaseDelay: time.Millisecond}, upstream.Client())
	if err != nil {
		panic(err)
	}
	newRequest := func(path string) func(context.Context) (*http.Request, error) {
		return func(ctx context.Context) (*http.Request, error) {
			return http.NewRequestWithContext(ctx, http.MethodPost, upstream.URL+path, strings.NewReader(`{"model":"m"}`))
		}
	}

	resp, attempts, err := p.Do(context.Background(), newRequest("/v1/chat/completions"))
	if err != nil {
		panic(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, attempts, string(body))

	_, attempts, err = p.Do(context.Background(), newRequest("/bad"))
	var e *classify.Error
	if errors.Is(err, classify.ErrFatal) && errors.As(err, &e) {
		fmt.Println(e.Status, attempts, string(e.Body))
	}
	// Output:
	// 200 2 {"id":"chatcmpl-1"}
	// 400 1 {"error":{"message":"unknown model"}}
}

// ExamplePolicy_Acquire holds a place under the concurrency limit for the
// length of a generation.
func ExamplePolicy_Acquire() {
	p, err := classify.New(classify.Config{MaxConcurrent: 1, QueueTimeout: 10 * time.Millisecond}, http.DefaultClient)
	if err != nil {
		panic(err)
	}
	release, err := p.Acquire(context.Background())
	if err != nil {
		panic(err)
	}
	_, err = p.Acquire(context.Background())
	var e *classify.Error
	if errors.As(err, &e) && errors.Is(err, classify.ErrUnavailable) {
		fmt.Println(e.Status, e.Code)
	}
	release()
	release, err = p.Acquire(context.Background())
	fmt.Println(err)
	release()
	// Output:
	// 503 upstream_saturated
	// <nil>
}

func ExampleStatus() {
	for _, code := range []int{200, 400, 429, 501, 503} {
		fmt.Println(code, classify.Status(code))
	}
	// Output:
	// 200 <nil>
	// 400 classify: fatal upstream answer
	// 429 classify: retryable upstream failure
	// 501 classify: fatal upstream answer
	// 503 classify: retryable upstream failure
}

func ExampleParseRetryAfter() {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"120", "Sun, 01 Jun 2025 12:00:30 GMT", "Sat, 31 May 2025 12:00:00 GMT", "999999", "soon"} {
		d, ok := classify.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 0s true
	// 24h0m0s true
	// 0s false
}

func ExampleRetryAfter() {
	now := time.Now()
	h := http.Header{}
	h.Set("Retry-After", "3")
	fmt.Println(classify.RetryAfter(h, nil, now))
	h.Set("Retry-After-Ms", "1500")
	fmt.Println(classify.RetryAfter(h, nil, now))
	fmt.Println(classify.RetryAfter(http.Header{}, []byte(`{"error":{"message":"slow down","retry_after":2}}`), now))
	// Output:
	// 3s true
	// 1.5s true
	// 2s true
}

// ExampleTransport classifies a request that never reached the upstream.
func ExampleTransport() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more

	var t classify.Trace
	ctx := httptrace.WithClientTrace(context.Background(), t.ClientTrace())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{}`))
	_, err = http.DefaultClient.Do(req)
	e := classify.Transport(err, &t)
	fmt.Println(errors.Is(e, classify.ErrRetryable), e.Status, e.Code)
	// Output:
	// true 502 upstream_unreachable
}

func ExampleInterrupted() {
	e := classify.Interrupted(io.ErrUnexpectedEOF)
	fmt.Println(errors.Is(e, classify.ErrInterrupted), errors.Is(e, io.ErrUnexpectedEOF), e.Code)
	// Output:
	// true true upstream_interrupted
}
