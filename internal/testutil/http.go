package testutil

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// RequestTimeout bounds each request [Do] sends.
const RequestTimeout = 30 * time.Second

// Send sends a request (with a JSON Content-Type when there is a body);
// header holds name, value pairs. It returns its errors instead of failing
// a test, so it may run in any goroutine.
func Send(ctx context.Context, method, url, body string, header ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return http.DefaultClient.Do(req)
}

// Do sends a request as [Send] does, within [RequestTimeout] (the body may
// be read until the test ends), and fails the test if it gets no answer.
func Do(tb testing.TB, method, url, body string, header ...string) *http.Response {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	tb.Cleanup(cancel)
	resp, err := Send(ctx, method, url, body, header...)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// ReadBody reads and closes resp's body.
func ReadBody(tb testing.TB, resp *http.Response) string {
	tb.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}
