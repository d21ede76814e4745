package classify_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
)

// reply is one scripted upstream answer.
type reply struct {
	status int
	header map[string]string
	body   string
}

// scripted is an httptest upstream answering with script in order, the
// last reply repeated; it counts requests and records when each came.
type scripted struct {
	*httptest.Server
	n     atomic.Int64
	mu    sync.Mutex
	times []time.Time
	// hold, if set, is called before answering request i (0-based).
	hold func(i int64)
}

// setHold sets s.hold; call it before the first request.
func (s *scripted) setHold(f func(i int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = f
}

func newScripted(tb testing.TB, script ...reply) *scripted {
	tb.Helper()
	if len(script) == 0 {
		tb.Fatal("empty script")
	}
	s := &scripted{}
	s.Server = newUpstream(tb, func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		i := s.n.Add(1) - 1
		s.mu.Lock()
		s.times = append(s.times, now)
		hold := s.hold
		s.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		if hold != nil {
			hold(i)
		}
		rep := script[min(int(i), len(script)-1)]
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		if rep.body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
	})
	return s
}

func (s *scripted) requests() int { return int(s.n.Load()) }

// gaps returns the time between consecutive requests.
func (s *scripted) gaps() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(s.times); i++ {
		g = append(g, s.times[i].Sub(s.times[i-1]))
	}
	return g
}

// okReply answers 200 with a small JSON body.
var okReply = reply{status: http.StatusOK, body: `{"ok":true}`}

// fastRetries is a policy that retries without noticeable waits and whose
// breaker stays out of the way.
func fastRetries(cfg classify.Config) classify.Config {
	if cfg.BaseDelay == 0 {
		cfg.BaseDelay = time.Millisecond
	}
	if cfg.MaxDelay == 0 {
		cfg.MaxDelay = 2 * time.Millisecond
	}
	if cfg.BreakerFailures == 0 {
		cfg.BreakerFailures = 1000
	}
	if cfg.BudgetMin == 0 {
		cfg.BudgetMin = 100
	}
	return cfg
}

func newPolicy(tb testing.TB, cfg classify.Config, client *http.Client) *classify.Policy {
	tb.Helper()
	if client == nil {
		client = newClient(tb, nil)
	}
	p, err := classify.New(cfg, client)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// post builds a fresh JSON POST to url for every attempt.
func post(url string) func(context.Context) (*http.Request, error) {
	return func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(`{"model":"m","stream":true}`)))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return req, nil
	}
}

// call runs one Policy.Do against url, bounded by testTimeout, and closes
// a successful response after reading its body.
func call(tb testing.TB, p *classify.Policy, url string) (body string, attempts int, err error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	resp, attempts, err := p.Do(ctx, post(url))
	if err != nil {
		if resp != nil {
			tb.Errorf("Do returned both a response and %v", err)
		}
		return "", attempts, err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		tb.Errorf("Do returned status %d without an error", resp.StatusCode)
	}
	b, rerr := io.ReadAll(resp.Body)
	if rerr != nil {
		tb.Fatalf("reading the 2xx body: %v", rerr)
	}
	return string(b), attempts, nil
}

func TestPolicyDo(t *testing.T) {
	type want struct {
		requests   int
		err        error // kind; nil for success
		status     int
		code       string
		body       string
		retryAfter time.Duration
		maxElapsed time.Duration
	}
	tests := []struct {
		name   string
		cfg    classify.Config
		script []reply
		want   want
	}{
		{
			name:   "200 first time",
			script: []reply{okReply},
			want:   want{requests: 1, body: okReply.body},
		},
		{
			name:   "201 is success",
			script: []reply{{status: 201, body: `{"id":1}`}},
			want:   want{requests: 1, body: `{"id":1}`},
		},
		{
			name:   "503, 502 then 200",
			script: []reply{{status: 503}, {status: 502}, okReply},
			want:   want{requests: 3, body: okReply.body},
		},
		{
			name:   "429, 500, 504 then 200 with four attempts",
			cfg:    classify.Config{MaxAttempts: 4},
			script: []reply{{status: 429}, {status: 500}, {status: 504}, okReply},
			want:   want{requests: 4, body: okReply.body},
		},
		{
			name:   "500 five times, three attempts: last answer",
			cfg:    classify.Config{MaxAttempts: 3},
			script: []reply{{status: 500, body: `{"n":1}`}, {status: 500, body: `{"n":2}`}, {status: 500, body: `{"n":3}`}, {status: 500, body: `{"n":4}`}, {status: 500, body: `{"n":5}`}},
			want:   want{requests: 3, err: classify.ErrRetryable, status: 500, body: `{"n":3}`},
		},
		{
			name:   "MaxAttempts 1 does not retry",
			cfg:    classify.Config{MaxAttempts: 1},
			script: []reply{{status: 503}, okReply},
			want:   want{requests: 1, err: classify.ErrRetryable, status: 503},
		},
		{
			name:   "429 Retry-After beyond the deadline is not waited for",
			cfg:    classify.Config{Deadline: 2 * time.Second},
			script: []reply{{status: 429, header: map[string]string{"Retry-After": "100"}, body: `{"error":{"message":"slow down"}}`}, okReply},
			want: want{requests: 1, err: classify.ErrRetryable, status: 429, body: `{"error":{"message":"slow down"}}`,
				retryAfter: 100 * time.Second, maxElapsed: time.Second},
		},
		{
			name:   "503 retry-after-ms beyond the deadline is not waited for",
			cfg:    classify.Config{Deadline: 50 * time.Millisecond},
			script: []reply{{status: 503, header: map[string]string{"Retry-After-Ms": "60000"}}, okReply},
			want:   want{requests: 1, err: classify.ErrRetryable, status: 503, retryAfter: time.Minute, maxElapsed: time.Second},
		},
		{
			name:   "short retry-after-ms is honoured",
			script: []reply{{status: 429, header: map[string]string{"Retry-After-Ms": "30"}}, okReply},
			want:   want{requests: 2, body: okReply.body},
		},
		{
			name: "backoff beyond the deadline is not taken",
			// The jittered wait is uniform in [0, 1h]: it fits 300ms with
			// probability 1e-4.
			cfg:    classify.Config{BaseDelay: time.Hour, MaxDelay: time.Hour, Deadline: 300 * time.Millisecond},
			script: []reply{{status: 503}, okReply},
			want:   want{requests: 1, err: classify.ErrRetryable, status: 503, maxElapsed: time.Second},
		},
		{name: "400", script: []reply{{status: 400, body: `{"error":{"message":"bad"}}`}, okReply},
			want: want{requests: 1, err: classify.ErrFatal, status: 400, body: `{"error":{"message":"bad"}}`}},
		{name: "401", script: []reply{{status: 401, body: `{"error":{"message":"key"}}`}, okReply},
			want: want{requests: 1, err: classify.ErrFatal, status: 401, body: `{"error":{"message":"key"}}`}},
		{name: "403", script: []reply{{status: 403, body: `{"error":{"message":"no"}}`}, okReply},
			want: want{requests: 1, err: classify.ErrFatal, status: 403, body: `{"error":{"message":"no"}}`}},
		{name: "404", script: []reply{{status: 404, body: `{"error":{"message":"model"}}`}, okReply},
			want: want{requests: 1, err: classify.ErrFatal, status: 404, body: `{"error":{"message":"model"}}`}},
		{name: "409", script: []reply{{status: 409, body: `{"error":{"message":"conflict"}}`}, okReply},
			want: want{requests: 1, err: classify.ErrFatal, status: 409, body: `{"error":{"message":"conflict"}}`}},
		{name: "422", script: []reply{{status: 422, body: `{"error":{"message":"schema"}}`}, okReply},
			want: want{requests: 1, err: classify.ErrFatal, status: 422, body: `{"error":{"message":"schema"}}`}},
		{name: "501", script: []reply{{status: 501}, okReply},
			want: want{requests: 1, err: classify.ErrFatal, status: 501}},
		{name: "fatal after a retryable one", script: []reply{{status: 503}, {status: 400, body: `{"e":1}`}, okReply},
			want: want{requests: 2, err: classify.ErrFatal, status: 400, body: `{"e":1}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newScripted(t, tt.script...)
			p := newPolicy(t, fastRetries(tt.cfg), nil)
			start := time.Now()
			body, attempts, err := call(t, p, up.URL)
			elapsed := time.Since(start)
			if got := up.requests(); got != tt.want.requests {
				t.Errorf("upstream got %d requests, want %d", got, tt.want.requests)
			}
			if attempts != tt.want.requests {
				t.Errorf("attempts = %d, want %d", attempts, tt.want.requests)
			}
			if tt.want.maxElapsed > 0 && elapsed > tt.want.maxElapsed {
				t.Errorf("Do took %v, want at most %v", elapsed, tt.want.maxElapsed)
			}
			if tt.want.err == nil {
				if err != nil {
					t.Fatalf("Do = %v, want success", err)
				}
				if body != tt.want.body {
					t.Errorf("body = %q, want %q", body, tt.want.body)
				}
				return
			}
			e := wantKind(t, err, tt.want.err, tt.want.status, tt.want.code)
			if string(e.Body) != tt.want.body {
				t.Errorf("Body = %q, want %q", e.Body, tt.want.body)
			}
			if e.RetryAfter != tt.want.retryAfter {
				t.Errorf("RetryAfter = %v, want %v", e.RetryAfter, tt.want.retryAfter)
			}
			if e.Attempts != attempts {
				t.Errorf("Error.Attempts = %d, Do returned %d", e.Attempts, attempts)
			}
		})
	}
}

// TestPolicyRetryAfterWait: a 429 with Retry-After: 1 is waited for. One
// case only: it costs a second.
func TestPolicyRetryAfterWait(t *testing.T) {
	up := newScripted(t, reply{status: 429, header: map[string]string{"Retry-After": "1"}}, okReply)
	p := newPolicy(t, fastRetries(classify.Config{}), nil)
	body, attempts, err := call(t, p, up.URL)
	if err != nil {
		t.Fatal(err)
	}
	if body != okReply.body || attempts != 2 || up.requests() != 2 {
		t.Fatalf("body %q, attempts %d, requests %d; want %q, 2, 2", body, attempts, up.requests(), okReply.body)
	}
	gaps := up.gaps()
	if gaps[0] < time.Second {
		t.Errorf("second request came %v after the first, want ≥ 1s", gaps[0])
	}
	if gaps[0] > 3*time.Second {
		t.Errorf("second request came %v after the first, want about 1s", gaps[0])
	}
}

// TestPolicyBackoff: full jitter keeps every wait within
// [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)]; only upper bounds are checked (with
// slack for the round trip and a loaded machine).
func TestPolicyBackoff(t *testing.T) {
	const base, maxDelay, slack = 20 * time.Millisecond, 80 * time.Millisecond, 150 * time.Millisecond
	up := newScripted(t, reply{status: 503})
	p := newPolicy(t, fastRetries(classify.Config{MaxAttempts: 10, BaseDelay: base, MaxDelay: maxDelay}), nil)
	_, attempts, err := call(t, p, up.URL)
	_ = wantKind(t, err, classify.ErrRetryable, 503, "")
	if attempts != 10 || up.requests() != 10 {
		t.Fatalf("attempts %d, requests %d; want 10, 10", attempts, up.requests())
	}
	var sum, ceilings time.Duration
	for i, g := range up.gaps() {
		ceil := min(maxDelay, base<<i)
		ceilings += ceil
		sum += g
		if g > ceil+slack {
			t.Errorf("wait before retry %d = %v, want ≤ %v (+%v slack)", i+1, g, ceil, slack)
		}
	}
	if sum > ceilings+2*slack {
		t.Errorf("total wait %v, want ≤ %v (+%v slack)", sum, ceilings, 2*slack)
	}
	t.Logf("gaps %v (sum %v, ceilings sum %v)", up.gaps(), sum, ceilings)
}

func TestPolicyAmbiguous(t *testing.T) {
	tests := []struct {
		name     string
		cfg      classify.Config
		requests int
	}{
		{"not retried by default", classify.Config{MaxAttempts: 3}, 1},
		{"retried with RetryAmbiguous", classify.Config{MaxAttempts: 3, RetryAmbiguous: true}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newRawServer(t, resetAfterRequest)
			p := newPolicy(t, fastRetries(tt.cfg), nil)
			_, attempts, err := call(t, p, s.URL)
			_ = wantKind(t, err, classify.ErrAmbiguous, http.StatusBadGateway, "upstream_no_response")
			if got := int(s.requests.Load()); got != tt.requests || attempts != tt.requests {
				t.Errorf("upstream read %d requests, attempts %d; want %d", got, attempts, tt.requests)
			}
		})
	}
}

func TestPolicyTransport(t *testing.T) {
	tests := []struct {
		name     string
		url      func(t *testing.T) string
		client   func(t *testing.T) *http.Client
		cfg      classify.Config
		wantErr  error
		status   int
		code     string
		attempts int
	}{
		{
			name:    "connection refused is retried",
			url:     func(t *testing.T) string { t.Helper(); return refusedURL(t) },
			cfg:     classify.Config{MaxAttempts: 3},
			wantErr: classify.ErrRetryable, status: 502, code: "upstream_unreachable", attempts: 3,
		},
		{
			name: "no response head in time",
			url:  func(t *testing.T) string { t.Helper(); return newRawServer(t, silentAfterRequest).URL },
			client: func(t *testing.T) *http.Client {
				t.Helper()
				return newClient(t, &http.Transport{ResponseHeaderTimeout: 100 * time.Millisecond})
			},
			cfg:     classify.Config{MaxAttempts: 3},
			wantErr: classify.ErrAmbiguous, status: 504, code: "upstream_timeout", attempts: 1,
		},
		{
			name:    "untrusted TLS",
			url:     func(t *testing.T) string { t.Helper(); return newTLSUpstream(t).URL },
			cfg:     classify.Config{MaxAttempts: 3},
			wantErr: classify.ErrFatal, status: 502, code: "upstream_tls", attempts: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var client *http.Client
			if tt.client != nil {
				client = tt.client(t)
			}
			p := newPolicy(t, fastRetries(tt.cfg), client)
			_, attempts, err := call(t, p, tt.url(t))
			e := wantKind(t, err, tt.wantErr, tt.status, tt.code)
			if attempts != tt.attempts || e.Attempts != tt.attempts {
				t.Errorf("attempts %d, Error.Attempts %d; want %d", attempts, e.Attempts, tt.attempts)
			}
			if e.Err == nil {
				t.Error("transport failure without its error")
			}
		})
	}
}

// TestPolicyCancel: a call whose context ends once the first answer (503,
// Retry-After: 5) is out returns at once with the context's error, whether
// the cancel lands while the answer is read or during the wait.
func TestPolicyCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var requests atomic.Int64
	answered := make(chan struct{}, 1)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.(http.Flusher).Flush()
		select {
		case answered <- struct{}{}:
		default:
		}
	})
	p := newPolicy(t, fastRetries(classify.Config{}), nil)
	done := make(chan struct{})
	var err error
	var attempts int
	start := time.Now()
	go func() {
		defer close(done)
		_, attempts, err = p.Do(ctx, post(up.URL))
	}()
	timeout := time.After(testTimeout)
	select {
	case <-answered:
		cancel()
	case <-done:
		t.Fatalf("Do returned before it was canceled: %v", err)
	case <-timeout:
		t.Fatal("the upstream got no request")
	}
	select {
	case <-done:
	case <-timeout:
		t.Fatal("Do did not return after its context was canceled")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Do returned after %v, want well before the 5s Retry-After", el)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Do = %v, want context.Canceled", err)
	}
	if requests.Load() != 1 || attempts != 1 {
		t.Errorf("requests %d, attempts %d; want 1, 1", requests.Load(), attempts)
	}
}

func TestPolicyBreaker(t *testing.T) {
	up := newScripted(t, reply{status: 500})
	p := newPolicy(t, classify.Config{MaxAttempts: 1, BreakerFailures: 3, BreakerDelay: time.Second}, nil)
	for i := range 3 {
		if p.BreakerOpen() {
			t.Fatalf("breaker open after %d failures", i)
		}
		_, _, err := call(t, p, up.URL)
		_ = wantKind(t, err, classify.ErrRetryable, 500, "")
	}
	if !p.BreakerOpen() {
		t.Fatal("breaker closed after 3 consecutive 500s")
	}
	start := time.Now()
	_, attempts, err := call(t, p, up.URL)
	if el := time.Since(start); el > 50*time.Millisecond {
		t.Errorf("refused call took %v, want < 50ms", el)
	}
	e := wantKind(t, err, classify.ErrUnavailable, http.StatusServiceUnavailable, "upstream_unavailable")
	if e.RetryAfter <= 0 {
		t.Errorf("RetryAfter = %v, want > 0", e.RetryAfter)
	}
	if attempts != 0 {
		t.Errorf("attempts = %d, want 0", attempts)
	}
	if up.requests() != 3 {
		t.Errorf("upstream got %d requests, want 3 (none while open)", up.requests())
	}
}

// TestPolicyBreakerProbe: once the delay has passed, one probe is let
// through and a success closes the breaker.
func TestPolicyBreakerProbe(t *testing.T) {
	up := newScripted(t, reply{status: 503}, reply{status: 503}, okReply)
	p := newPolicy(t, classify.Config{MaxAttempts: 1, BreakerFailures: 2, BreakerDelay: 100 * time.Millisecond}, nil)
	for range 2 {
		_, _, _ = call(t, p, up.URL)
	}
	if !p.BreakerOpen() {
		t.Fatal("breaker closed after 2 consecutive 503s")
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(testTimeout)
	for {
		body, _, err := call(t, p, up.URL)
		if err == nil {
			if body != okReply.body {
				t.Errorf("probe body %q", body)
			}
			break
		}
		if !errors.Is(err, classify.ErrUnavailable) {
			t.Fatalf("while open: %v, want ErrUnavailable", err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatal("breaker never let a probe through")
		}
	}
	if p.BreakerOpen() || up.requests() != 3 {
		t.Errorf("after a good probe: open %v, requests %d; want false, 3", p.BreakerOpen(), up.requests())
	}
}

// TestPolicyBreakerIgnores: the caller's mistakes (4xx) and rate limits
// (429) say nothing about the upstream's health.
func TestPolicyBreakerIgnores(t *testing.T) {
	tests := []struct {
		name   string
		status int
	}{
		{"400", 400}, {"401", 401}, {"404", 404}, {"422", 422}, {"429", 429},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newScripted(t, reply{status: tt.status})
			p := newPolicy(t, classify.Config{MaxAttempts: 1, BreakerFailures: 3, BreakerDelay: time.Minute}, nil)
			for range 6 {
				if _, _, err := call(t, p, up.URL); errors.Is(err, classify.ErrUnavailable) {
					t.Fatalf("breaker opened on %d: %v", tt.status, err)
				}
			}
			if p.BreakerOpen() || up.requests() != 6 {
				t.Errorf("open %v, requests %d; want false, 6", p.BreakerOpen(), up.requests())
			}
		})
	}
}

// TestPolicyBreakerConsecutive: a success (or a 4xx) between failures
// keeps the breaker closed; three failures in a row open it.
func TestPolicyBreakerConsecutive(t *testing.T) {
	up := newScripted(t, reply{status: 500}, reply{status: 500}, reply{status: 400}, reply{status: 500}, reply{status: 500}, reply{status: 500})
	p := newPolicy(t, classify.Config{MaxAttempts: 1, BreakerFailures: 3, BreakerDelay: time.Minute}, nil)
	for i := range 5 {
		_, _, _ = call(t, p, up.URL)
		if p.BreakerOpen() {
			t.Fatalf("breaker open after call %d", i+1)
		}
	}
	_, _, _ = call(t, p, up.URL)
	if !p.BreakerOpen() {
		t.Error("breaker closed after three 500s in a row")
	}
}

// TestPolicyBreakerOpensDuringRetries: the breaker opening between two
// attempts of one call ends that call; no request is made while open.
func TestPolicyBreakerOpensDuringRetries(t *testing.T) {
	tests := []struct {
		name     string
		failures uint
		requests int
	}{
		{"after the first attempt", 1, 1},
		{"after the second attempt", 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newScripted(t, reply{status: 500, body: `{"e":"down"}`})
			p := newPolicy(t, fastRetries(classify.Config{MaxAttempts: 3, BreakerFailures: tt.failures, BreakerDelay: time.Minute}), nil)
			_, attempts, err := call(t, p, up.URL)
			if up.requests() != tt.requests || attempts != tt.requests {
				t.Errorf("requests %d, attempts %d; want %d", up.requests(), attempts, tt.requests)
			}
			if !errors.Is(err, classify.ErrRetryable) && !errors.Is(err, classify.ErrUnavailable) {
				t.Errorf("Do = %v, want ErrRetryable or ErrUnavailable", err)
			}
			if !p.BreakerOpen() {
				t.Error("breaker closed")
			}
		})
	}
}

// TestPolicyErrorAttempts: Error.Attempts must equal the attempts Do
// returns (the requests made) whenever the breaker is involved, and a call
// that did get an upstream answer returns it.
func TestPolicyErrorAttempts(t *testing.T) {
	tests := []struct {
		name     string
		failures uint
		calls    int
		wantErr  error
		status   int
		attempts int
	}{
		{"breaker opens after the first attempt", 1, 1, classify.ErrRetryable, 500, 1},
		{"breaker opens after the second attempt", 2, 1, classify.ErrRetryable, 500, 2},
		{"breaker already open", 1, 2, classify.ErrUnavailable, 503, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := newScripted(t, reply{status: 500})
			p := newPolicy(t, fastRetries(classify.Config{MaxAttempts: 3, BreakerFailures: tt.failures, BreakerDelay: time.Minute}), nil)
			var err error
			var attempts int
			for range tt.calls {
				_, attempts, err = call(t, p, up.URL)
			}
			var e *classify.Error
			if !errors.As(err, &e) || !errors.Is(err, tt.wantErr) || e.Status != tt.status {
				t.Fatalf("Do = %v, want %v status %d", err, tt.wantErr, tt.status)
			}
			if attempts != tt.attempts || e.Attempts != tt.attempts {
				t.Errorf("attempts %d, Error.Attempts %d; want %d", attempts, e.Attempts, tt.attempts)
			}
		})
	}
}

// waves holds every upstream request until each of calls concurrent
// calls is either answered-and-returned or holding a request, then lets
// the whole wave through. Each retry wave is then decided by the budget
// alone, not by scheduling.
type waves struct {
	mu       sync.Mutex
	calls    int
	returned int
	held     int
	release  chan struct{}
	sizes    []int
}

func newWaves(calls int) *waves { return &waves{calls: calls, release: make(chan struct{})} }

func (w *waves) hold() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held++
	ch := w.release
	w.maybeRelease()
	return ch
}

func (w *waves) done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.returned++
	w.maybeRelease()
}

func (w *waves) maybeRelease() {
	if w.held > 0 && w.held+w.returned == w.calls {
		w.sizes = append(w.sizes, w.held)
		close(w.release)
		w.release = make(chan struct{})
		w.held = 0
	}
}

// budgetRun makes calls concurrent calls to an always-503 upstream and
// returns the requests it got and the size of each wave.
func budgetRun(t *testing.T, cfg classify.Config, calls int) (int, []int) {
	t.Helper()
	w := newWaves(calls)
	up := newScripted(t, reply{status: 503})
	up.setHold(func(int64) {
		select {
		case <-w.hold():
		case <-time.After(testTimeout):
			t.Error("wave never released")
		}
	})
	p := newPolicy(t, cfg, newClient(t, &http.Transport{MaxIdleConnsPerHost: calls}))
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			defer w.done()
			_, _, err := call(t, p, up.URL)
			if !errors.Is(err, classify.ErrRetryable) {
				t.Errorf("Do = %v, want ErrRetryable", err)
			}
		})
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	return up.requests(), w.sizes
}

func TestPolicyBudget(t *testing.T) {
	const calls, attempts = 30, 3
	cfg := classify.Config{MaxAttempts: attempts, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond,
		BudgetRatio: 0.1, BudgetMin: 1, BreakerFailures: 1000}
	requests, sizes := budgetRun(t, cfg, calls)
	amp := float64(requests) / calls
	t.Logf("budget 0.1/min 1: %d calls → %d requests, amplification %.3f, waves %v", calls, requests, amp, sizes)
	// With every call in flight, the budget admits retry k while k < 1 or
	// k/(calls+k) ≤ 0.1: 4 in the first retry wave, 1 in the next.
	if requests < calls || requests > calls+10 {
		t.Errorf("%d requests for %d calls, want ≤ %d", requests, calls, calls+10)
	}

	// Without a binding budget every call makes every attempt.
	loose := cfg
	loose.BudgetRatio, loose.BudgetMin = 1, 1000
	requests, sizes = budgetRun(t, loose, calls)
	t.Logf("no budget: %d calls → %d requests, amplification %.3f, waves %v", calls, requests, float64(requests)/calls, sizes)
	if requests != calls*attempts {
		t.Errorf("%d requests without a budget, want %d", requests, calls*attempts)
	}
}

// TestPolicyBudgetChargedPerRetry: the budget pays for retries made, and
// only for those: not for a wait that does not fit the deadline, nor for
// the last attempt's failure.
func TestPolicyBudgetChargedPerRetry(t *testing.T) {
	up := newScripted(t,
		reply{status: 429, header: map[string]string{"Retry-After": "100"}}, // call 1: the wait does not fit
		reply{status: 503}, reply{status: 503}, // call 2: one retry, then no attempt left
		reply{status: 503}, okReply, // call 3: the budget's second retry
		reply{status: 503}, // call 4: the budget is spent
	)
	p := newPolicy(t, fastRetries(classify.Config{MaxAttempts: 2, Deadline: 2 * time.Second, BudgetRatio: 0.001, BudgetMin: 2}), nil)
	for i, want := range []struct {
		attempts int
		err      error
	}{{1, classify.ErrRetryable}, {2, classify.ErrRetryable}, {2, nil}, {1, classify.ErrRetryable}} {
		_, attempts, err := call(t, p, up.URL)
		if attempts != want.attempts || !errors.Is(err, want.err) || (err == nil) != (want.err == nil) {
			t.Errorf("call %d: %d attempts, %v; want %d, %v", i+1, attempts, err, want.attempts, want.err)
		}
	}
}

func TestAcquire(t *testing.T) {
	p := newPolicy(t, classify.Config{MaxConcurrent: 1, QueueTimeout: 50 * time.Millisecond}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	release, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r2, err := p.Acquire(ctx)
	if r2 != nil {
		t.Error("saturated Acquire returned a release func")
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("saturated Acquire took %v, queue timeout 50ms", el)
	}
	e := wantKind(t, err, classify.ErrUnavailable, http.StatusServiceUnavailable, "upstream_saturated")
	if e.RetryAfter <= 0 {
		t.Errorf("RetryAfter = %v, want > 0", e.RetryAfter)
	}
	release()
	release() // a second release must not free a second place
	r3, err := p.Acquire(ctx)
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	defer r3()
	if _, err := p.Acquire(ctx); !errors.Is(err, classify.ErrUnavailable) {
		t.Fatalf("double release freed two places: Acquire = %v", err)
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	p := newPolicy(t, classify.Config{MaxConcurrent: 2, QueueTimeout: testTimeout}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r1, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := p.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r2()
	got := make(chan error, 1)
	go func() {
		r3, err := p.Acquire(ctx)
		if err == nil {
			r3()
		}
		got <- err
	}()
	r1()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("queued Acquire = %v", err)
		}
	case <-ctx.Done():
		t.Fatal("queued Acquire never got the released place")
	}
}

func TestAcquireContext(t *testing.T) {
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{"canceled before", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
		{"deadline while queued", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPolicy(t, classify.Config{MaxConcurrent: 1, QueueTimeout: testTimeout}, nil)
			release, err := p.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer release()
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			r, err := p.Acquire(ctx)
			if !errors.Is(err, tt.wantErr) || r != nil {
				t.Errorf("Acquire = %v, want %v", err, tt.wantErr)
			}
			var e *classify.Error
			if errors.As(err, &e) {
				t.Errorf("a canceled wait is the caller's, not %v", e)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("Acquire took %v, want it to end with its context", el)
			}
		})
	}
}

func TestNew(t *testing.T) {
	client := &http.Client{}
	tests := []struct {
		name    string
		cfg     classify.Config
		client  *http.Client
		wantErr error
		bug     string // non-empty: known bug, skipped
	}{
		{name: "zero config is the defaults", client: client},
		{name: "ten attempts", cfg: classify.Config{MaxAttempts: 10}, client: client},
		{name: "budget ratio one", cfg: classify.Config{BudgetRatio: 1}, client: client},
		{name: "equal delays", cfg: classify.Config{BaseDelay: time.Second, MaxDelay: time.Second}, client: client},
		{name: "nil client", wantErr: classify.ErrInvalidOption},
		{name: "negative attempts", cfg: classify.Config{MaxAttempts: -1}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "eleven attempts", cfg: classify.Config{MaxAttempts: 11}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "negative base delay", cfg: classify.Config{BaseDelay: -time.Millisecond}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "max delay below base", cfg: classify.Config{BaseDelay: time.Second, MaxDelay: 500 * time.Millisecond}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "base delay above default max", cfg: classify.Config{BaseDelay: time.Minute}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "negative max delay", cfg: classify.Config{MaxDelay: -time.Second}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "negative deadline", cfg: classify.Config{Deadline: -time.Second}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "negative breaker delay", cfg: classify.Config{BreakerDelay: -time.Second}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "negative queue timeout", cfg: classify.Config{QueueTimeout: -time.Second}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "negative budget ratio", cfg: classify.Config{BudgetRatio: -0.1}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "budget ratio above one", cfg: classify.Config{BudgetRatio: 1.5}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "negative max concurrent", cfg: classify.Config{MaxConcurrent: -1}, client: client, wantErr: classify.ErrInvalidOption},
		{name: "NaN budget ratio", cfg: classify.Config{BudgetRatio: math.NaN()}, client: client, wantErr: classify.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.bug != "" {
				t.Skip(tt.bug)
			}
			p, err := classify.New(tt.cfg, tt.client)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("New = %v, want %v", err, tt.wantErr)
			}
			if (p == nil) == (err == nil) {
				t.Errorf("New returned policy %v with error %v", p != nil, err)
			}
			if err != nil && err.Error() == classify.ErrInvalidOption.Error() {
				t.Errorf("error %q does not say what is wrong", err)
			}
		})
	}
}

// TestPolicyDeadlineSparesSentAttempt: Config.Deadline bounds retries, not
// an attempt whose request was written. A non-streamed answer's head comes
// only once the upstream generated all of it: cutting the attempt at the
// deadline (as Do did) answered 504 for a generation the upstream made
// anyway, and the client's retry billed a second one. The attempt waits
// for its head under the client's header timeout; nothing is retried after
// the deadline.
func TestPolicyDeadlineSparesSentAttempt(t *testing.T) {
	t.Run("slow answer", func(t *testing.T) {
		s := newScripted(t, okReply)
		s.setHold(func(int64) { time.Sleep(400 * time.Millisecond) }) // generating, longer than the deadline
		p := newPolicy(t, fastRetries(classify.Config{Deadline: 100 * time.Millisecond}), nil)
		body, attempts, err := call(t, p, s.URL)
		if err != nil || body != okReply.body || attempts != 1 || s.requests() != 1 {
			t.Fatalf("Do = %q, %d attempts, %v (%d requests); want the slow answer after 1 attempt", body, attempts, err, s.requests())
		}
	})
	t.Run("header timeout decides", func(t *testing.T) {
		s := newRawServer(t, silentAfterRequest)
		client := newClient(t, &http.Transport{ResponseHeaderTimeout: 400 * time.Millisecond})
		p := newPolicy(t, fastRetries(classify.Config{Deadline: 50 * time.Millisecond, RetryAmbiguous: true}), client)
		start := time.Now()
		_, attempts, err := call(t, p, s.URL)
		if el := time.Since(start); el < 400*time.Millisecond || el > 5*time.Second {
			t.Errorf("Do took %v; want the 400ms header timeout, not the 50ms deadline", el)
		}
		_ = wantKind(t, err, classify.ErrAmbiguous, http.StatusGatewayTimeout, "upstream_timeout")
		if attempts != 1 || s.requests.Load() != 1 {
			t.Errorf("%d attempts, %d requests; want 1: no retry starts after the deadline", attempts, s.requests.Load())
		}
	})
	t.Run("unsent attempt cut", func(t *testing.T) {
		// A TLS handshake that never completes: the request is never
		// written, and the deadline cuts the attempt.
		s := newRawServer(t, holdOpen)
		client := newClient(t, &http.Transport{TLSHandshakeTimeout: 10 * time.Second})
		p := newPolicy(t, fastRetries(classify.Config{Deadline: 200 * time.Millisecond}), client)
		start := time.Now()
		_, attempts, err := call(t, p, "https"+strings.TrimPrefix(s.URL, "http"))
		if el := time.Since(start); el > 3*time.Second {
			t.Errorf("Do took %v with a 200ms deadline and an attempt that sent nothing", el)
		}
		_ = wantKind(t, err, classify.ErrRetryable, http.StatusGatewayTimeout, "upstream_timeout")
		if attempts != 1 {
			t.Errorf("%d attempts, want 1", attempts)
		}
	})
}

// TestPolicyNarrowed: while Narrowed reports true (the cost guard), a 503
// is not retried but a refused connection still is; once it reports false
// the 503 is retried again.
func TestPolicyNarrowed(t *testing.T) {
	var narrowed atomic.Bool
	narrowed.Store(true)
	p := newPolicy(t, fastRetries(classify.Config{MaxAttempts: 3, Narrowed: narrowed.Load}), nil)
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		http.Error(w, `{"error":{"message":"busy"}}`, http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	if _, attempts, err := call(t, p, srv.URL); !errors.Is(err, classify.ErrRetryable) || attempts != 1 {
		t.Errorf("narrowed 503: %d attempts, %v; want 1, retryable", attempts, err)
	}
	if _, attempts, err := call(t, p, refusedURL(t)); !errors.Is(err, classify.ErrRetryable) || attempts != 3 {
		t.Errorf("narrowed refused connection: %d attempts, %v; want 3", attempts, err)
	}
	narrowed.Store(false)
	if _, attempts, _ := call(t, p, srv.URL); attempts != 3 {
		t.Errorf("widened 503: %d attempts, want 3", attempts)
	}
}
