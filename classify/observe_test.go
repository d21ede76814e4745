package classify_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/reprise-dev/reprise/classify"
)

// TestObserver: the observer hears every attempt of a call, in order, with
// its status, kind and timings; a connect failure has no status and no
// first byte.
func TestObserver(t *testing.T) {
	t.Parallel()
	up := newScripted(t, reply{status: http.StatusServiceUnavailable}, reply{status: http.StatusTooManyRequests}, okReply)
	p := newPolicy(t, fastRetries(classify.Config{}), nil)
	var got []classify.Attempt
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, n, err := p.Do(classify.WithObserver(ctx, func(a classify.Attempt) { got = append(got, a) }), post(up.URL))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := []struct {
		status int
		kind   string
	}{{503, "retryable"}, {429, "retryable"}, {200, "ok"}}
	if n != 3 || len(got) != len(want) {
		t.Fatalf("%d attempts, observed %+v; want %d", n, got, len(want))
	}
	for i, a := range got {
		if a.N != i+1 || a.Status != want[i].status || a.KindName() != want[i].kind {
			t.Errorf("attempt %d = N %d status %d kind %s; want N %d status %d kind %s", i, a.N, a.Status, a.KindName(), i+1, want[i].status, want[i].kind)
		}
		if a.FirstByte <= 0 || a.Duration < a.FirstByte {
			t.Errorf("attempt %d: first byte %s, duration %s; want 0 < first byte <= duration", i+1, a.FirstByte, a.Duration)
		}
	}

	got = nil
	_, _, err = p.Do(classify.WithObserver(ctx, func(a classify.Attempt) { got = append(got, a) }), post(refusedURL(t)))
	if !errors.Is(err, classify.ErrRetryable) || len(got) != classify.DefaultMaxAttempts {
		t.Fatalf("refused: err %v, observed %+v; want %d retryable attempts", err, got, classify.DefaultMaxAttempts)
	}
	for _, a := range got {
		if a.Status != 0 || a.FirstByte != 0 || a.KindName() != "retryable" || a.Code != classify.CodeUnreachable {
			t.Errorf("refused attempt %+v: want no status, no first byte, retryable %s", a, classify.CodeUnreachable)
		}
	}
}
