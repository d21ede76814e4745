package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// End-to-end tests of the call policy toward the upstream (package
// classify, driven by stream/pump.go): what is retried, what is not, and
// what the upstream is billed. Every test checks the fake upstream's ledger.
// Each test logs one "amplification:" line per mix: upstream requests ÷
// client requests.

// withPolicy sets the proxy's call policy, built over the proxy's client;
// more adjusts the config first (client, upstream, timeouts).
func withPolicy(tb testing.TB, pc classify.Config, more ...func(*proxy.Config)) envOption {
	tb.Helper()
	return withConfig(func(cfg *proxy.Config) {
		for _, f := range more {
			f(cfg)
		}
		if cfg.Client == nil {
			cfg.Client = engine.DefaultClient(2*time.Second, 10*time.Second)
		}
		cfg.Policy = pc
	})
}

// fastRetries is a policy whose backoff is negligible, so what a test
// measures is the policy's decision, not its jitter.
func fastRetries() classify.Config {
	return classify.Config{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, BreakerFailures: 1000}
}

func logAmplification(tb testing.TB, mix string, upstream, client int, extra string) {
	tb.Helper()
	ratio := 0.0
	if client > 0 {
		ratio = float64(upstream) / float64(client)
	}
	tb.Logf("amplification: %-62s upstream=%3d client=%3d ratio=%.2f %s", mix, upstream, client, ratio, extra)
}

func attemptsHeader(tb testing.TB, resp *http.Response) int {
	tb.Helper()
	v := resp.Header.Get("Reprise-Attempts")
	n, err := strconv.Atoi(v)
	if err != nil {
		tb.Fatalf("Reprise-Attempts %q is not a number", v)
	}
	return n
}

func lastEvent(tb testing.TB, evs []event) event {
	tb.Helper()
	if len(evs) == 0 {
		tb.Fatal("no events")
	}
	return evs[len(evs)-1]
}

func hasDone(evs []event) bool {
	for _, ev := range evs {
		if ev.Data == "[DONE]" {
			return true
		}
	}
	return false
}

// checkComplete: a full chat stream of n tokens for prompt: role, tokens,
// stop, [DONE] (the usage chunk reprise asks for is not the client's).
func checkComplete(tb testing.TB, evs []event, prompt string, n int) {
	tb.Helper()
	if len(evs) != n+3 || lastEvent(tb, evs).Data != "[DONE]" {
		tb.Fatalf("got %d events ending %+v, want %d ending [DONE]", len(evs), lastEvent(tb, evs), n+3)
	}
	if got, want := content(tb, evs), strings.Join(mockllm.Content(prompt, n, false), ""); got != want {
		tb.Fatalf("content %q, want %q", got, want)
	}
}

// upstreamTap serves a private fake upstream behind a hook that sees every
// request first (body read and restored) and may answer it itself. It
// records each request's body and Idempotency-Key header.
type upstreamTap struct {
	llm *mockllm.Server
	// hook answers the request itself when it returns true; n counts the
	// requests with this exact body, this one included.
	hook func(w http.ResponseWriter, r *http.Request, body string, n int) bool

	mu     sync.Mutex
	counts map[string]int
	reqs   []tappedRequest
}

type tappedRequest struct {
	body, idempotencyKey string
}

func newTap(hook func(w http.ResponseWriter, r *http.Request, body string, n int) bool) *upstreamTap {
	return &upstreamTap{llm: mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond}), hook: hook, counts: map[string]int{}}
}

func (u *upstreamTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	u.mu.Lock()
	u.counts[string(b)]++
	n := u.counts[string(b)]
	u.reqs = append(u.reqs, tappedRequest{body: string(b), idempotencyKey: r.Header.Get("Idempotency-Key")})
	u.mu.Unlock()
	if u.hook != nil && u.hook(w, r, string(b), n) {
		return
	}
	u.llm.ServeHTTP(w, r)
}

// requests returns the requests whose body contains marker.
func (u *upstreamTap) requests(marker string) []tappedRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []tappedRequest
	for _, r := range u.reqs {
		if strings.Contains(r.body, marker) {
			out = append(out, r)
		}
	}
	return out
}

// TestRetryAfter429: a 429 is retried once its server-directed wait is
// over, whatever form the wait takes; the retry is billed once. Backoff is
// ~1 ms here, so the elapsed time shows the wait was honoured.
func TestRetryAfter429(t *testing.T) {
	t.Parallel()
	rateLimited := func(w http.ResponseWriter, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, body)
	}
	tap := newTap(func(w http.ResponseWriter, r *http.Request, body string, n int) bool {
		if n > 1 {
			return false
		}
		switch {
		case strings.Contains(body, "[x429=body]"): // OpenAI-style body hint, no header
			rateLimited(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded","retry_after":0.3}}`)
			return true
		case strings.Contains(body, "[x429=date]"): // an HTTP-date at least 1 s ahead
			at := time.Now().Add(time.Second).Truncate(time.Second).Add(time.Second)
			w.Header().Set("Retry-After", at.UTC().Format(http.TimeFormat))
			rateLimited(w, `{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}`)
			return true
		}
		return false
	})
	e := newEnv(t, withUpstream(tap), withPolicy(t, fastRetries()))
	tests := []struct {
		name       string
		directives string
		minWait    time.Duration
	}{
		{"Retry-After seconds", "[status=429] [retry_after=1]", time.Second},
		{"retry-after-ms", "[status=429] [retry_after_ms=300]", 300 * time.Millisecond},
		{"body retry_after", "[x429=body]", 300 * time.Millisecond},
		// The date has 1 s resolution and is at least 1 s ahead; allow for
		// the clock read between the upstream and the proxy.
		{"Retry-After HTTP-date", "[x429=date]", 900 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prompt := uniquePrompt(t, "[tokens=5] "+tc.directives)
			start := time.Now()
			resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-429-"+strings.ReplaceAll(tc.name, " ", "-"))
			elapsed := time.Since(start)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			if elapsed < tc.minWait {
				t.Errorf("answered after %s: the %s wait was not honoured", elapsed, tc.minWait)
			}
			if elapsed > tc.minWait+5*time.Second {
				t.Errorf("answered after %s, far beyond the %s wait", elapsed, tc.minWait)
			}
			if n := attemptsHeader(t, resp); n != 2 {
				t.Errorf("Reprise-Attempts %d, want 2", n)
			}
			checkComplete(t, readEvents(t, resp, -1), prompt, 5)
			requests := len(tap.requests(prompt))
			if g := testutil.Settled(t, tap.llm.Ledger(), prompt, 1); requests != 2 || g.Generations != 1 || g.Completed != 1 {
				t.Errorf("%d upstream requests, ledger %+v: want 2 requests, 1 generation", requests, g)
			}
			t.Logf("429 with %s answered after %s", tc.name, elapsed.Round(time.Millisecond))
			logAmplification(t, "429 then success ("+tc.name+")", requests, 1, "")
		})
	}
}

// TestRetry5xxThenSuccess: 500/502/503/504 (and a 429 without a wait) before
// the first byte are retried with backoff; one generation is billed and
// Reprise-Attempts counts every upstream request.
func TestRetry5xxThenSuccess(t *testing.T) {
	t.Parallel()
	pc := classify.Config{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, BreakerFailures: 1000}
	e := newEnv(t, withPolicy(t, pc))
	tests := []struct {
		statuses string
		attempts int
	}{
		{"503,502", 3},
		{"500,504", 3},
		{"429,503", 3},
		{"502", 2},
	}
	upstream, client := 0, 0
	for _, tc := range tests {
		t.Run(tc.statuses, func(t *testing.T) {
			prompt := uniquePrompt(t, "[tokens=6] [status="+tc.statuses+"]")
			resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-5xx-"+tc.statuses)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
			}
			if n := attemptsHeader(t, resp); n != tc.attempts {
				t.Errorf("Reprise-Attempts %d, want %d", n, tc.attempts)
			}
			checkComplete(t, readEvents(t, resp, -1), prompt, 6)
			g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
			if g.Requests != tc.attempts || g.Generations != 1 || g.Completed != 1 {
				t.Errorf("ledger %+v, want %d requests, 1 generation", g, tc.attempts)
			}
			upstream += g.Requests
			client++
		})
	}
	logAmplification(t, "5xx/429 before the first byte, then success", upstream, client, "(by design: the failed tries bill nothing)")
}

// TestRetryNeverOn4xx: a 4xx other than 429 is the request's fault: one
// upstream request, the upstream's status and OpenAI-shaped body to the
// client, and no effect on the circuit breaker.
func TestRetryNeverOn4xx(t *testing.T) {
	t.Parallel()
	pc := classify.Config{MaxAttempts: 5, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, BreakerFailures: 2}
	e := newEnv(t, withPolicy(t, pc))
	codes := []int{400, 401, 403, 404, 422}
	for _, code := range codes {
		prompt := uniquePrompt(t, "[tokens=3] [status="+itoa(code)+"]")
		key := "k-4xx-" + itoa(code)
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key)
		x := testutil.ReadAPIError(t, resp)
		if x.Status != code {
			t.Fatalf("%d: client got %d: %s", code, x.Status, x.Body)
		}
		if x.ContentType != "application/json" {
			t.Errorf("%d: Content-Type %q", code, x.ContentType)
		}
		if x.Message != "mock status "+itoa(code) {
			t.Errorf("%d: message %q is not the upstream's", code, x.Message)
		}
		if n := attemptsHeader(t, resp); n != 1 {
			t.Errorf("%d: Reprise-Attempts %d, want 1", code, n)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			t.Errorf("%d: Retry-After %q on a fatal answer", code, ra)
		}
		waitState(t, e, key, "failed")
		if g := e.LLM.Ledger().Get(prompt); g.Requests != 1 || g.Generations != 0 {
			t.Errorf("%d: ledger %+v, want 1 request, no generation", code, g)
		}
	}
	// Five fatal answers in a row did not open a breaker that opens after two failures.
	prompt := uniquePrompt(t, "[tokens=3]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-4xx-after")
	if resp.StatusCode != 200 {
		t.Fatalf("a healthy request after 4xx answers: %d %s", resp.StatusCode, readBody(t, resp))
	}
	checkComplete(t, readEvents(t, resp, -1), prompt, 3)
	logAmplification(t, "4xx (400/401/403/404/422)", e.LLM.Ledger().Total().Requests-1, len(codes), "")
}

// TestRetryAfterTooLong: a 429 whose wait does not fit the call's deadline
// is not retried: the client gets it at once, with the upstream's wait.
func TestRetryAfterTooLong(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		deadline   time.Duration
		directives string
		retryAfter string
	}{
		{"Retry-After 100 s, 30 s deadline", 0, "[status=429] [retry_after=100]", "100"},
		{"Retry-After 1 s, 500 ms deadline", 500 * time.Millisecond, "[status=429] [retry_after=1]", "1"},
		{"retry-after-ms 1500, 500 ms deadline", 500 * time.Millisecond, "[status=429] [retry_after_ms=1500]", "2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pc := fastRetries()
			pc.Deadline = tc.deadline
			e := newEnv(t, withPolicy(t, pc))
			// What an answer that is never retried takes here (a 400), for
			// comparison: the machine may be slow, and a wait is not.
			start := time.Now()
			readBody(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[status=400]"), true), "Idempotency-Key", "k-400"))
			plain := time.Since(start)
			prompt := uniquePrompt(t, "[tokens=3] "+tc.directives)
			start = time.Now()
			resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-429-long")
			elapsed := time.Since(start)
			body := readBody(t, resp)
			if resp.StatusCode != 429 {
				t.Fatalf("status %d, want 429: %s", resp.StatusCode, body)
			}
			if ra := resp.Header.Get("Retry-After"); ra != tc.retryAfter {
				t.Errorf("Retry-After %q, want %q", ra, tc.retryAfter)
			}
			testutil.ParseAPIError(t, body) // with a message and a type
			if n := attemptsHeader(t, resp); n != 1 {
				t.Errorf("Reprise-Attempts %d, want 1", n)
			}
			if elapsed > plain+700*time.Millisecond { // the shortest wait asked for is 1 s
				t.Errorf("the 429 took %s to reach the client, a 400 %s; it should not wait", elapsed, plain)
			}
			waitState(t, e, "k-429-long", "failed")
			if g := e.LLM.Ledger().Get(prompt); g.Requests != 1 || g.Generations != 0 {
				t.Errorf("ledger %+v, want 1 request", g)
			}
		})
	}
}

// TestRetryExhausted: a failure that outlasts the attempts reaches the
// client with the upstream's status; the key is failed, and the same key
// later starts a new generation.
func TestRetryExhausted(t *testing.T) {
	t.Parallel()
	pc := classify.Config{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, BreakerFailures: 1000}
	e := newEnv(t, withPolicy(t, pc))
	prompt := uniquePrompt(t, "[tokens=4] [status=500,500,500,500]")
	body := chatBody(prompt, true)
	resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-exhausted")
	got := readBody(t, resp)
	if resp.StatusCode != 500 {
		t.Fatalf("status %d, want 500: %s", resp.StatusCode, got)
	}
	if x := testutil.ParseAPIError(t, got); x.Message != "mock status 500" {
		t.Errorf("message %q is not the upstream's", x.Message)
	}
	if n := attemptsHeader(t, resp); n != 3 {
		t.Errorf("Reprise-Attempts %d, want 3", n)
	}
	st := waitState(t, e, "k-exhausted", "failed")
	if st.Generation != 1 || st.Error == "" {
		t.Errorf("status %+v, want generation 1 failed with a code", st)
	}
	if g := e.LLM.Ledger().Get(prompt); g.Requests != 3 || g.Generations != 0 {
		t.Fatalf("ledger %+v, want 3 requests, no generation", g)
	}
	logAmplification(t, "persistent 500, MaxAttempts 3", 3, 1, "")

	// The same key again: a new generation (its 4th upstream request fails
	// too, the 5th succeeds).
	resp = do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-exhausted")
	if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("same key after failure: %d replayed=%q", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"))
	}
	if n := attemptsHeader(t, resp); n != 2 {
		t.Errorf("Reprise-Attempts %d, want 2", n)
	}
	evs := readEvents(t, resp, -1)
	checkComplete(t, evs, prompt, 4)
	if !strings.HasPrefix(evs[0].ID, "2-") {
		t.Errorf("first event id %q, want generation 2", evs[0].ID)
	}
	st = waitState(t, e, "k-exhausted", "completed")
	if st.Generation != 2 {
		t.Errorf("generation %d, want 2", st.Generation)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 5 || g.Generations != 1 || g.Completed != 1 {
		t.Errorf("ledger %+v, want 5 requests, 1 generation", g)
	}
}

// TestRetryNotOnInterruptedStream: a stream that breaks after its first
// event is never retried (the upstream billed it): the client gets event:
// error, the key is failed, the same key regenerates, and readers of the old
// generation are told to reset. Nothing partial is ever served as a result.
func TestRetryNotOnInterruptedStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPolicy(t, fastRetries()))
	prompt := uniquePrompt(t, "[tokens=20] [abort_after=5]")
	body := chatBody(prompt, true)
	resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-abort")
	if n := attemptsHeader(t, resp); n != 1 {
		t.Errorf("Reprise-Attempts %d, want 1", n)
	}
	evs := readEvents(t, resp, -1)
	if last := lastEvent(t, evs); last.Type != "error" || !strings.Contains(last.Data, "upstream_interrupted") {
		t.Fatalf("last event %+v, want event: error upstream_interrupted", last)
	}
	if len(evs) != 5+1 || hasDone(evs) {
		t.Fatalf("got %d events (done=%v), want the 5 written and the error", len(evs), hasDone(evs))
	}
	st := waitState(t, e, "k-abort", "failed")
	if st.Error != "upstream_interrupted" {
		t.Errorf("error code %q", st.Error)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 1 || g.Generations != 1 || g.Completed != 0 {
		t.Fatalf("ledger %+v: an interrupted stream was retried", g)
	}
	// Reading the failed key never presents the partial stream as a result.
	again := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-abort", ""), -1)
	if hasDone(again) || lastEvent(t, again).Type != "error" {
		t.Errorf("reading the failed key: %d events ending %+v", len(again), lastEvent(t, again))
	}

	// The same key with a generation-1 cursor: reset, then a fresh generation.
	resp = do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-abort", "Last-Event-ID", evs[2].ID)
	if resp.Header.Get("Idempotent-Replayed") != "" || attemptsHeader(t, resp) != 1 {
		t.Errorf("same key after an interruption: replayed=%q attempts=%s", resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Reprise-Attempts"))
	}
	evs2 := readEvents(t, resp, -1)
	if evs2[0].Type != "reset" || evs2[0].ID != "2-0-0" {
		t.Fatalf("first event %+v, want reset 2-0-0", evs2[0])
	}
	for _, ev := range evs2[1:] {
		if !strings.HasPrefix(ev.ID, "2-") {
			t.Fatalf("event %+v is not from generation 2", ev)
		}
	}
	waitState(t, e, "k-abort", "failed")
	// A reader still holding a generation-1 cursor.
	evs3 := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-abort", "", "Last-Event-ID", evs[4].ID), -1)
	if evs3[0].Type != "reset" || evs3[0].ID != "2-0-0" || hasDone(evs3) {
		t.Errorf("reader of generation 1 got %+v first (done=%v), want reset 2-0-0", evs3[0], hasDone(evs3))
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Requests != 2 || g.Generations != 2 || g.Completed != 0 {
		t.Errorf("ledger %+v, want exactly 2 requests and 2 generations", g)
	}
	logAmplification(t, "stream broken after 5 events (abort_after)", 1, 1, "")
}

// TestRefusedConnectionRetried: a connection that could not be opened wrote
// nothing, so it is retried.
//
// The proxy's upstream URL is a reserved 127.0.0.1 port (testutil.ReserveAddr:
// bound, not listening, so refused, and no other listener can take it). The
// proxy's dialer is the real one, wrapped: when the first dial comes back
// (refused by the kernel), the wrapper makes the reserved socket listen,
// serves the fake upstream on it, and only then returns the error to the
// policy. Whatever the backoff, the retry finds the port listening: no
// sleep, no race.
func TestRefusedConnectionRetried(t *testing.T) {
	t.Parallel()
	t.Run("refused then listening", func(t *testing.T) {
		t.Parallel()
		reserved := testutil.ReserveAddr(t)
		addr := reserved.Addr
		llm := mockllm.New(mockllm.Config{})
		up := &http.Server{Handler: llm, ReadHeaderTimeout: 5 * time.Second}
		t.Cleanup(func() { _ = up.Close() })
		var dials atomic.Int32
		type first struct{ dialErr, listenErr error }
		firstDial := make(chan first, 1)
		pc := classify.Config{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, BreakerFailures: 1000}
		e := newEnv(t, withPolicy(t, pc, func(cfg *proxy.Config) {
			cfg.Upstream = &url.URL{Scheme: "http", Host: addr}
			cfg.Client = engine.DefaultClient(2*time.Second, 10*time.Second)
			tr := cfg.Client.Transport.(*http.Transport)
			dial := tr.DialContext
			tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
				c, err := dial(ctx, network, a)
				if dials.Add(1) == 1 {
					f := first{dialErr: err}
					if ln, lerr := reserved.Listen(); lerr == nil {
						go func() { _ = up.Serve(ln) }()
					} else {
						f.listenErr = lerr
					}
					firstDial <- f
				}
				return c, err
			}
		}))
		prompt := uniquePrompt(t, "[tokens=5]")
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-refused")
		f := <-firstDial
		if !errors.Is(f.dialErr, syscall.ECONNREFUSED) || f.listenErr != nil {
			t.Fatalf("first dial: %v (listen: %v), want connection refused", f.dialErr, f.listenErr)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
		}
		if n := attemptsHeader(t, resp); n < 2 {
			t.Errorf("Reprise-Attempts %d, want at least 2", n)
		}
		checkComplete(t, readEvents(t, resp, -1), prompt, 5)
		if g := testutil.Settled(t, llm.Ledger(), prompt, 1); g.Requests != 1 || g.Generations != 1 || g.Completed != 1 {
			t.Errorf("ledger %+v, want 1 request (the refused one never arrived), 1 generation", g)
		}
		logAmplification(t, "connection refused once, then success", int(dials.Load()), 1, "(dials; the upstream saw 1 request)")
	})

	// A connect timeout wrote nothing either. The first dial is the real
	// dialer given an already expired deadline: the error a dial to a
	// black-holed address returns when the connect timeout is over.
	t.Run("connect timeout then success", func(t *testing.T) {
		t.Parallel()
		var dials atomic.Int32
		firstDial := make(chan error, 1)
		pc := classify.Config{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, BreakerFailures: 1000}
		e := newEnv(t, withPolicy(t, pc, func(cfg *proxy.Config) {
			cfg.Client = engine.DefaultClient(2*time.Second, 10*time.Second)
			tr := cfg.Client.Transport.(*http.Transport)
			dial := tr.DialContext
			tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
				if dials.Add(1) > 1 {
					return dial(ctx, network, a)
				}
				expired, cancel := context.WithDeadline(ctx, time.Now())
				defer cancel()
				c, err := dial(expired, network, a)
				if c != nil {
					c.Close()
				}
				firstDial <- err
				return nil, err
			}
		}))
		prompt := uniquePrompt(t, "[tokens=5]")
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-connect-timeout")
		var ne net.Error
		if err := <-firstDial; !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("first dial: %v, want a timeout", err)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
		}
		if n := attemptsHeader(t, resp); n != 2 {
			t.Errorf("Reprise-Attempts %d, want 2", n)
		}
		checkComplete(t, readEvents(t, resp, -1), prompt, 5)
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 1 || g.Generations != 1 {
			t.Errorf("ledger %+v, want 1 request, 1 generation", g)
		}
	})

	t.Run("refused every time", func(t *testing.T) {
		t.Parallel()
		addr := testutil.ReserveAddr(t).Addr
		var dials atomic.Int32
		pc := classify.Config{MaxAttempts: 3, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond, BreakerFailures: 1000}
		e := newEnv(t, withPolicy(t, pc, func(cfg *proxy.Config) {
			cfg.Upstream = &url.URL{Scheme: "http", Host: addr}
			cfg.Client = engine.DefaultClient(2*time.Second, 10*time.Second)
			tr := cfg.Client.Transport.(*http.Transport)
			dial := tr.DialContext
			tr.DialContext = func(ctx context.Context, network, a string) (net.Conn, error) {
				dials.Add(1)
				return dial(ctx, network, a)
			}
		}))
		resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=5]"), true), "Idempotency-Key", "k-refused-all")
		testutil.ExpectAPIError(t, resp, http.StatusBadGateway, "upstream_unreachable")
		if n := attemptsHeader(t, resp); n != 3 || dials.Load() != 3 {
			t.Errorf("Reprise-Attempts %d, %d dials: want 3 and 3", n, dials.Load())
		}
		if st := waitState(t, e, "k-refused-all", "failed"); st.Error != "upstream_unreachable" {
			t.Errorf("error code %q", st.Error)
		}
	})
}

// TestAmbiguousTimeout: a request that was written and got no response head
// in time may be generating (and billing) upstream. It is not retried,
// unless the upstream honours Idempotency-Key: then it is, with the
// generation's key on every attempt.
func TestAmbiguousTimeout(t *testing.T) {
	t.Parallel()
	const headTimeout = 300 * time.Millisecond
	// "[hang_first]" (unknown to the fake, so ignored by it) makes the tap
	// hold only the first request for its body until the proxy gives up.
	hangFirst := func(w http.ResponseWriter, r *http.Request, body string, n int) bool {
		if n == 1 && strings.Contains(body, "[hang_first]") {
			<-r.Context().Done()
			panic(http.ErrAbortHandler)
		}
		return false
	}
	policy := func(tb testing.TB, retryAmbiguous, idempotency bool) envOption {
		tb.Helper()
		pc := fastRetries()
		pc.RetryAmbiguous = retryAmbiguous
		return withPolicy(tb, pc, func(cfg *proxy.Config) {
			cfg.Client = engine.DefaultClient(2*time.Second, headTimeout)
			cfg.UpstreamIdempotency = idempotency
		})
	}

	t.Run("not retried by default", func(t *testing.T) {
		t.Parallel()
		tap := newTap(hangFirst)
		e := newEnv(t, withUpstream(tap), policy(t, false, false))
		prompt := uniquePrompt(t, "[tokens=3] [hang]")
		start := time.Now()
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-ambiguous")
		elapsed := time.Since(start)
		testutil.ExpectAPIError(t, resp, http.StatusGatewayTimeout, "upstream_timeout")
		if n := attemptsHeader(t, resp); n != 1 {
			t.Errorf("Reprise-Attempts %d, want 1", n)
		}
		if elapsed < headTimeout {
			t.Errorf("504 after %s, before the %s head timeout", elapsed, headTimeout)
		}
		waitState(t, e, "k-ambiguous", "failed")
		g := testutil.Settled(t, tap.llm.Ledger(), prompt, 1) // the hung upstream request was cut
		reqs := tap.requests(prompt)
		if len(reqs) != 1 || g.Requests != 1 {
			t.Errorf("%d upstream requests (ledger %+v), want 1: an ambiguous failure was retried", len(reqs), g)
		}
		for _, r := range reqs {
			if r.idempotencyKey != "" {
				t.Errorf("Idempotency-Key %q forwarded to an upstream not declared to honour it", r.idempotencyKey)
			}
		}
		// A hang on the first request only: still one request, still 504.
		prompt2 := uniquePrompt(t, "[tokens=3] [hang_first]")
		resp = do(t, "POST", e.URL+chatPath, chatBody(prompt2, true), "Idempotency-Key", "k-ambiguous-2")
		if b := readBody(t, resp); resp.StatusCode != http.StatusGatewayTimeout {
			t.Errorf("status %d, want 504: %s", resp.StatusCode, b)
		}
		waitState(t, e, "k-ambiguous-2", "failed")
		if n := len(tap.requests(prompt2)); n != 1 {
			t.Errorf("%d upstream requests, want 1", n)
		}
		logAmplification(t, "no response head (timeout), default policy", 1, 1, "")
	})

	t.Run("retried with UpstreamIdempotency", func(t *testing.T) {
		t.Parallel()
		tap := newTap(hangFirst)
		e := newEnv(t, withUpstream(tap), policy(t, true, true))

		// The first attempt hangs, the retry answers: a complete stream,
		// one generation, the same Idempotency-Key on both attempts.
		prompt := uniquePrompt(t, "[tokens=4] [hang_first]")
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-ambiguous-idem")
		reqs := tap.requests(prompt)
		if len(reqs) == 0 || reqs[0].idempotencyKey == "" {
			t.Fatalf("upstream requests %+v: want the generation's Idempotency-Key forwarded", reqs)
		}
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, readBody(t, resp))
		}
		if n := attemptsHeader(t, resp); n != 2 {
			t.Errorf("Reprise-Attempts %d, want 2", n)
		}
		checkComplete(t, readEvents(t, resp, -1), prompt, 4)
		reqs = tap.requests(prompt)
		if len(reqs) != 2 || reqs[0].idempotencyKey != reqs[1].idempotencyKey {
			t.Errorf("upstream requests %+v, want 2 with the same Idempotency-Key", reqs)
		}
		key1 := reqs[0].idempotencyKey
		if g := testutil.Settled(t, tap.llm.Ledger(), prompt, 1); g.Generations != 1 || g.Completed != 1 {
			t.Errorf("ledger %+v, want 1 generation", g)
		}
		logAmplification(t, "no response head once, idempotent upstream", len(reqs), 1, "")

		// Every attempt hangs: all of them carry one key (another than the
		// other generation's), then 504.
		prompt2 := uniquePrompt(t, "[tokens=3] [hang]")
		resp = do(t, "POST", e.URL+chatPath, chatBody(prompt2, true), "Idempotency-Key", "k-ambiguous-idem-2")
		testutil.ExpectAPIError(t, resp, http.StatusGatewayTimeout, "upstream_timeout")
		if n := attemptsHeader(t, resp); n != 3 {
			t.Errorf("Reprise-Attempts %d, want 3", n)
		}
		waitState(t, e, "k-ambiguous-idem-2", "failed")
		reqs = tap.requests(prompt2)
		if len(reqs) != 3 {
			t.Fatalf("%d upstream requests, want 3", len(reqs))
		}
		for _, r := range reqs {
			if r.idempotencyKey == "" || r.idempotencyKey != reqs[0].idempotencyKey || r.idempotencyKey == key1 {
				t.Fatalf("Idempotency-Key per attempt: %q, %q, %q (other key %q): want one key of its own, on every attempt",
					reqs[0].idempotencyKey, reqs[1].idempotencyKey, reqs[2].idempotencyKey, key1)
			}
		}
		logAmplification(t, "no response head (timeout) every time, idempotent upstream", len(reqs), 1, "(same Idempotency-Key on each)")
	})
}

// TestStalledStreamNotRetried: a stream that stops sending for the idle
// timeout is cut and failed (upstream_interrupted), never retried.
func TestStalledStreamNotRetried(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	e := newEnv(t, withPolicy(t, fastRetries(), func(cfg *proxy.Config) { cfg.Limits.IdleTimeout = idle }))
	prompt := uniquePrompt(t, "[tokens=10] [hang_after=3]")
	start := time.Now()
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-stall")
	if n := attemptsHeader(t, resp); n != 1 {
		t.Errorf("Reprise-Attempts %d, want 1", n)
	}
	evs := readEvents(t, resp, -1)
	elapsed := time.Since(start)
	last := lastEvent(t, evs)
	if last.Type != "error" || !strings.Contains(last.Data, "upstream_interrupted") || !strings.Contains(last.Data, idle.String()) {
		t.Fatalf("last event %+v, want event: error upstream_interrupted naming the %s idle timeout", last, idle)
	}
	if len(evs) != 3+1 || hasDone(evs) {
		t.Errorf("got %d events (done=%v), want the 3 sent and the error", len(evs), hasDone(evs))
	}
	if elapsed < idle {
		t.Errorf("cut after %s, before the %s idle timeout", elapsed, idle)
	}
	if st := waitState(t, e, "k-stall", "failed"); st.Error != "upstream_interrupted" {
		t.Errorf("error code %q", st.Error)
	}
	// The stalled upstream connection was closed.
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 1 || g.Generations != 1 || g.Completed != 0 {
		t.Errorf("ledger %+v, want 1 request: a stalled stream was retried", g)
	}
	logAmplification(t, "stream stalled after 3 events (idle timeout)", 1, 1, "")
}

// TestRetryBudgetBurst: 40 keys fail at once (503, 503, 503). The retry
// budget, and the breaker when it is on, bound how many extra upstream
// requests the burst causes. Every answer's Reprise-Attempts adds up to
// exactly the upstream requests made.
//
// The budget (failsafe-go) caps retries *in flight* at a share of calls in
// flight: it binds when failures are slow, and barely when they are
// instant (a retry is in flight for a millisecond). Both are measured.
func TestRetryBudgetBurst(t *testing.T) {
	t.Parallel()
	const n = 40
	budget := classify.Config{MaxAttempts: 3, BaseDelay: 50 * time.Millisecond, MaxDelay: 100 * time.Millisecond, BudgetRatio: 0.1, BudgetMin: 2, BreakerFailures: 1000}
	noBudget := budget
	noBudget.BudgetRatio = 1 // every retry fits: the unbudgeted baseline
	breaker := budget
	breaker.BreakerFailures = 0 // the default breaker (5 failures)
	tests := []struct {
		name  string
		pc    classify.Config
		slow  time.Duration // the upstream answers its 503 after this long
		bound int           // upstream requests at most
	}{
		{"instant 503s, no budget (ratio 1), no breaker", noBudget, 0, n * 3},
		{"instant 503s, budget 0.1/2, no breaker", budget, 0, n * 3},
		{"slow 503s (200ms), no budget (ratio 1), no breaker", noBudget, 200 * time.Millisecond, n * 3},
		{"slow 503s (200ms), budget 0.1/2, no breaker", budget, 200 * time.Millisecond, n + n/2},
		{"instant 503s, budget 0.1/2, default breaker", breaker, 0, n + n/2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tap := newTap(func(w http.ResponseWriter, r *http.Request, _ string, _ int) bool {
				if tc.slow > 0 {
					select {
					case <-time.After(tc.slow):
					case <-r.Context().Done():
					}
				}
				return false
			})
			e := newEnv(t, withUpstream(tap), withPolicy(t, tc.pc))
			type answer struct {
				status, attempts int
				code             string
				err              error
			}
			answers := make([]answer, n)
			base := uniquePrompt(t, "")
			ready := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					<-ready
					a := &answers[i]
					prompt := fmt.Sprintf("%s burst-%d [tokens=2] [status=503,503,503]", base, i)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, "POST", e.URL+chatPath, strings.NewReader(chatBody(prompt, true)))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", fmt.Sprintf("k-burst-%d", i))
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						a.err = err
						return
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					a.status = resp.StatusCode
					a.attempts, a.err = strconv.Atoi(resp.Header.Get("Reprise-Attempts"))
					var v struct {
						Error struct {
							Code string `json:"code"`
						} `json:"error"`
					}
					_ = json.Unmarshal(b, &v)
					a.code = v.Error.Code
				})
			}
			start := time.Now()
			close(ready)
			wg.Wait()
			elapsed := time.Since(start)
			sum, fast := 0, 0
			codes := map[string]int{}
			for i, a := range answers {
				if a.err != nil {
					t.Fatalf("request %d: %v", i, a.err)
				}
				if a.status != http.StatusServiceUnavailable {
					t.Errorf("request %d: status %d, want 503", i, a.status)
				}
				sum += a.attempts
				codes[a.code]++
				if a.attempts == 0 {
					fast++
				}
			}
			total := tap.llm.Ledger().Total()
			if total.Generations != 0 {
				t.Errorf("ledger %+v: a 503 generated", total)
			}
			if total.Requests != sum {
				t.Errorf("upstream saw %d requests, Reprise-Attempts add up to %d", total.Requests, sum)
			}
			if total.Requests < n-fast || total.Requests > tc.bound {
				t.Errorf("%d upstream requests for %d failing keys, want at most %d", total.Requests, n, tc.bound)
			}
			logAmplification(t, "burst of 40 keys: "+tc.name, total.Requests, n,
				fmt.Sprintf("(codes %v, refused by the breaker %d, %s)", codes, fast, elapsed.Round(time.Millisecond)))
		})
	}
}

// TestBreakerOpensAndRecovers: after BreakerFailures consecutive upstream
// failures the breaker opens: any request fails fast with 503
// upstream_unavailable and a Retry-After, without an upstream request.
// After the delay one probe closes it again.
func TestBreakerOpensAndRecovers(t *testing.T) {
	t.Parallel()
	const delay = 2 * time.Second
	pc := classify.Config{MaxAttempts: 1, BreakerFailures: 3, BreakerDelay: delay}
	e := newEnv(t, withPolicy(t, pc))
	var opened time.Time
	for i := range 3 {
		prompt := uniquePrompt(t, "[tokens=3] [status=500]")
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-breaker-fail-"+itoa(i))
		opened = time.Now()
		if b := readBody(t, resp); resp.StatusCode != 500 {
			t.Fatalf("failure %d: status %d, want the upstream's 500: %s", i, resp.StatusCode, b)
		}
		if n := attemptsHeader(t, resp); n != 1 {
			t.Errorf("failure %d: Reprise-Attempts %d, want 1", i, n)
		}
	}
	before := e.LLM.Ledger().Total().Requests

	healthy := uniquePrompt(t, "[tokens=3]")
	for _, key := range []string{"k-breaker-open", "k-breaker-open-2"} {
		start := time.Now()
		resp := do(t, "POST", e.URL+chatPath, chatBody(healthy, true), "Idempotency-Key", key)
		elapsed := time.Since(start)
		testutil.ExpectAPIError(t, resp, http.StatusServiceUnavailable, "upstream_unavailable")
		ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
		if err != nil || ra < 1 || ra > int(delay/time.Second) {
			t.Errorf("%s: Retry-After %q, want 1..%d", key, resp.Header.Get("Retry-After"), int(delay/time.Second))
		}
		if n := attemptsHeader(t, resp); n != 0 {
			t.Errorf("%s: Reprise-Attempts %d, want 0", key, n)
		}
		if elapsed > time.Second {
			t.Errorf("%s: took %s; an open breaker fails fast", key, elapsed)
		}
		if st := waitState(t, e, key, "failed"); st.Error != "upstream_unavailable" {
			t.Errorf("%s: error code %q", key, st.Error)
		}
	}
	if got := e.LLM.Ledger().Total().Requests; got != before {
		t.Fatalf("the upstream saw %d requests while the breaker was open", got-before)
	}
	logAmplification(t, "breaker open (3 failures, then 2 requests)", before, 5, "(the 2 refused requests cost 0)")

	// After the delay, one probe is let through; it succeeds and closes the breaker.
	time.Sleep(time.Until(opened.Add(delay + 100*time.Millisecond)))
	for _, key := range []string{"k-breaker-open", "k-breaker-after"} {
		resp := do(t, "POST", e.URL+chatPath, chatBody(healthy, true), "Idempotency-Key", key)
		if resp.StatusCode != 200 {
			t.Fatalf("%s after the breaker delay: %d %s", key, resp.StatusCode, readBody(t, resp))
		}
		checkComplete(t, readEvents(t, resp, -1), healthy, 3)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), healthy, 2); g.Requests != 2 || g.Generations != 2 {
		t.Errorf("ledger %+v, want 2 requests (one per key)", g)
	}
}

// TestBreakerOpensDuringRetries: when a call's own failures open the
// breaker, its next retry is refused by the breaker. Whatever the client is
// told, Reprise-Attempts counts exactly the upstream requests made, and no
// request is made past the breaker.
func TestBreakerOpensDuringRetries(t *testing.T) {
	t.Parallel()
	for _, failures := range []uint{1, 2} {
		t.Run("breaker after "+itoa(int(failures)), func(t *testing.T) {
			t.Parallel()
			pc := classify.Config{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, BreakerFailures: failures, BreakerDelay: 5 * time.Second}
			e := newEnv(t, withPolicy(t, pc))
			prompt := uniquePrompt(t, "[tokens=3] [status=500,500,500]")
			resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-breaker-during")
			n := attemptsHeader(t, resp)
			code := testutil.ReadAPIError(t, resp).Code
			if g := e.LLM.Ledger().Get(prompt); g.Requests != int(failures) || n != g.Requests {
				t.Errorf("ledger %+v, Reprise-Attempts %d: want %d requests, counted", g, n, failures)
			}
			if resp.StatusCode != 500 && (resp.StatusCode != 503 || code != "upstream_unavailable") {
				t.Errorf("status %d %q, want the upstream's 500 or 503 upstream_unavailable", resp.StatusCode, code)
			}
			t.Logf("breaker opened after %d of our own failures: client got %d %q, Retry-After %q, Reprise-Attempts %d",
				failures, resp.StatusCode, code, resp.Header.Get("Retry-After"), n)
		})
	}
}

// TestRefusedWhenSaturated: with the concurrency limit full, a new
// generation waits the queue timeout, then gets 503 upstream_saturated
// without an upstream request; once a place is free the key works.
func TestRefusedWhenSaturated(t *testing.T) {
	t.Parallel()
	const queue = 200 * time.Millisecond
	pc := fastRetries()
	pc.MaxConcurrent, pc.QueueTimeout = 1, queue
	// The tenant limit defaults to the concurrency limit, which would
	// refuse first (429): this is the instance's limit, as several tenants
	// meet it.
	e := newEnv(t, withPolicy(t, pc, func(cfg *proxy.Config) { cfg.Limits.MaxTenantGenerations = 10 }))
	slow := uniquePrompt(t, "[tokens=40] [delay=20ms]")
	// The slow generation holds the only place; its client leaves after
	// the first event, the generation goes on.
	if first := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(slow, true), "Idempotency-Key", "k-busy"), 1); len(first) != 1 {
		t.Fatal("the slow stream did not start")
	}

	other := uniquePrompt(t, "[tokens=3]")
	start := time.Now()
	resp := do(t, "POST", e.URL+chatPath, chatBody(other, true), "Idempotency-Key", "k-queued")
	elapsed := time.Since(start)
	testutil.ExpectAPIError(t, resp, http.StatusServiceUnavailable, "upstream_saturated")
	if resp.Header.Get("Retry-After") == "" || attemptsHeader(t, resp) != 0 {
		t.Errorf("Retry-After %q, Reprise-Attempts %q: want a wait and 0", resp.Header.Get("Retry-After"), resp.Header.Get("Reprise-Attempts"))
	}
	if elapsed < queue {
		t.Errorf("refused after %s, before the %s queue timeout", elapsed, queue)
	}
	if g := e.LLM.Ledger().Get(other); g.Requests != 0 {
		t.Errorf("ledger %+v: a refused generation reached the upstream", g)
	}
	testutil.Settled(t, e.LLM.Ledger(), slow, 1)
	waitState(t, e, "k-busy", "completed")
	resp = do(t, "POST", e.URL+chatPath, chatBody(other, true), "Idempotency-Key", "k-queued")
	if resp.StatusCode != 200 {
		t.Fatalf("once free: %d %s", resp.StatusCode, readBody(t, resp))
	}
	checkComplete(t, readEvents(t, resp, -1), other, 3)
	if g := testutil.Settled(t, e.LLM.Ledger(), other, 1); g.Requests != 1 || g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 request", g)
	}
}

// sdkAttempts records what an openai-go client sent and got, per HTTP attempt.
type sdkAttempts struct {
	mu          sync.Mutex
	retryCounts []string
	keys        []string
	attempts    []string
}

func (s *sdkAttempts) add(req *http.Request, resp *http.Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryCounts = append(s.retryCounts, req.Header.Get("X-Stainless-Retry-Count"))
	if resp != nil {
		s.keys = append(s.keys, resp.Header.Get("Idempotency-Key"))
		s.attempts = append(s.attempts, resp.Header.Get("Reprise-Attempts"))
	}
}

// TestSDKRetryOpenAIClient: the official SDK with its retries on. Its first
// attempt reaches reprise (the generation starts), then the connection is
// lost before the SDK reads the stream; the SDK retries, keyless, with
// X-Stainless-Retry-Count: 1, attaches, and gets the whole stream. One
// generation is billed.
func TestSDKRetryOpenAIClient(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var rec sdkAttempts
	var calls atomic.Int32
	drop := func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		resp, err := next(req)
		rec.add(req, resp)
		if calls.Add(1) == 1 && err == nil {
			resp.Body.Close()
			return nil, errors.New("simulated connection reset")
		}
		return resp, err
	}
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"),
		option.WithMaxRetries(2), option.WithMiddleware(drop))
	prompt := uniquePrompt(t, "[tokens=20] [delay=5ms]")
	s := client.Chat.Completions.NewStreaming(waitCtx(t, 20*time.Second), openai.ChatCompletionNewParams{
		Model:    "mock-1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := acc.Choices[0].Message.Content, strings.Join(mockllm.Content(prompt, 20, false), ""); got != want {
		t.Fatalf("content %q, want %q", got, want)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.retryCounts) != 2 || rec.retryCounts[0] != "0" || rec.retryCounts[1] != "1" {
		t.Fatalf("SDK attempts with X-Stainless-Retry-Count %v, want [0 1]", rec.retryCounts)
	}
	if rec.keys[0] == "" || rec.keys[0] != rec.keys[1] || rec.attempts[0] != "1" || rec.attempts[1] != "0" {
		t.Errorf("keys %v, Reprise-Attempts %v: want one key, [1 0]", rec.keys, rec.attempts)
	}
	g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	if g.Requests != 1 || g.Generations != 1 || g.Completed != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
	logAmplification(t, "openai-go, first attempt lost after reprise started", g.Requests, 1,
		fmt.Sprintf("(1 SDK call, %d HTTP attempts)", len(rec.retryCounts)))
}

// TestSDKRetryAmplification: retries must not compound across layers. Once
// reprise has retried and still fails it says X-Should-Retry: false, which
// openai-go honours: one SDK call costs at most reprise's own attempts
// (without the header: 3 SDK attempts × 3 = 9 upstream requests).
func TestSDKRetryAmplification(t *testing.T) {
	t.Parallel()
	pc := classify.Config{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, BreakerFailures: 1000}
	e := newEnv(t, withPolicy(t, pc))
	var rec sdkAttempts
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(2),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			rec.add(req, resp)
			return resp, err
		}))
	prompt := uniquePrompt(t, "[tokens=3] [status="+strings.Repeat("500,", 11)+"500]")
	_, err := client.Chat.Completions.New(waitCtx(t, 20*time.Second), openai.ChatCompletionNewParams{
		Model:    "mock-1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 500 {
		t.Fatalf("err %v, want the upstream's 500", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.keys) != 1 {
		t.Fatalf("%d SDK attempts, want 1 (reprise already retried and said X-Should-Retry: false)", len(rec.keys))
	}
	sum := 0
	for i, k := range rec.keys {
		if k != rec.keys[0] {
			t.Errorf("SDK attempt %d got key %q, want %q (absorbed onto one key)", i, k, rec.keys[0])
		}
		n, _ := strconv.Atoi(rec.attempts[i])
		sum += n
	}
	g := e.LLM.Ledger().Get(prompt)
	if g.Generations != 0 || g.Requests != sum || g.Requests != pc.MaxAttempts {
		t.Errorf("ledger %+v, Reprise-Attempts %v: want nothing billed, requests counted, at most %d", g, rec.attempts, len(rec.keys)*pc.MaxAttempts)
	}
	logAmplification(t, "openai-go MaxRetries 2 × reprise MaxAttempts 3, persistent 500", g.Requests, 1,
		fmt.Sprintf("(1 SDK call, %d HTTP attempts, Reprise-Attempts %v)", len(rec.keys), rec.attempts))
}
