package classify_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
)

// recorder is an Observer that writes down what it is told.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, s)
}

func (r *recorder) Attempt(status int, kind string, _ time.Duration) {
	r.add(fmt.Sprintf("attempt %d %s", status, kind))
}
func (r *recorder) Retry(reason string)  { r.add("retry " + reason) }
func (r *recorder) Retried(success bool) { r.add(fmt.Sprintf("retried %v", success)) }

// TestPolicyObserver: the observer sees every attempt with its status and
// kind, every retry with its reason, and how a retried call ended.
func TestPolicyObserver(t *testing.T) {
	tests := []struct {
		name   string
		cfg    classify.Config
		script []reply
		want   []string
	}{
		{name: "first time", script: []reply{okReply}, want: []string{"attempt 200 success"}},
		{name: "503 then 200", script: []reply{{status: 503}, okReply},
			want: []string{"attempt 503 retryable", "retry overloaded", "attempt 200 success", "retried true"}},
		{name: "429, 502 then 200", script: []reply{{status: 429}, {status: 502}, okReply},
			want: []string{"attempt 429 retryable", "retry rate_limited", "attempt 502 retryable", "retry server_error", "attempt 200 success", "retried true"}},
		{name: "500 until attempts run out", cfg: classify.Config{MaxAttempts: 2}, script: []reply{{status: 500}},
			want: []string{"attempt 500 retryable", "retry server_error", "attempt 500 retryable", "retried false"}},
		{name: "400 is not retried", script: []reply{{status: 400}}, want: []string{"attempt 400 fatal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			cfg := fastRetries(tt.cfg)
			cfg.Observer = rec
			up := newScripted(t, tt.script...)
			_, _, _ = call(t, newPolicy(t, cfg, nil), up.URL)
			if !slices.Equal(rec.events, tt.want) {
				t.Errorf("observed %q, want %q", rec.events, tt.want)
			}
		})
	}
}

func TestRetryReason(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&classify.Error{Kind: classify.ErrRetryable, Status: 429}, classify.ReasonRateLimited},
		{&classify.Error{Kind: classify.ErrRetryable, Status: 529}, classify.ReasonOverloaded},
		{&classify.Error{Kind: classify.ErrRetryable, Status: 504}, classify.ReasonServerError},
		{&classify.Error{Kind: classify.ErrRetryable, Status: 502, Code: classify.CodeUnreachable}, classify.ReasonUnreachable},
		{&classify.Error{Kind: classify.ErrAmbiguous, Status: 502, Code: classify.CodeNoResponse}, classify.ReasonNoResponse},
	}
	for _, tt := range tests {
		if got := classify.RetryReason(tt.err); got != tt.want || !slices.Contains(classify.RetryReasons(), got) {
			t.Errorf("RetryReason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

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
