package testutil_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// fakeTB records the first failure of a helper and ends its goroutine,
// as testing.T does.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) { f.Fatalf("%s", fmt.Sprint(args...)) }

// failure runs fn with a fakeTB and returns what it failed with ("" if it did not).
func failure(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

func TestEventually(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	testutil.Eventually(t, 5*time.Second, "three looks", func() bool { return n.Add(1) >= 3 })
	msg := failure(t, func(tb testing.TB) {
		tb.Helper()
		testutil.Eventually(tb, 50*time.Millisecond, "the impossible", func() bool { return false })
	})
	if !strings.Contains(msg, "timed out after 50ms waiting for the impossible") {
		t.Errorf("failure %q does not say what it waited for", msg)
	}
}

func TestFreeAddr(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{testutil.FreeAddr(t), fmt.Sprintf("127.0.0.1:%d", testutil.FreePort(t))} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		ln.Close()
	}
}

func TestWaitReady(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	testutil.WaitReady(t, srv.URL, 10*time.Second, nil)

	exited := make(chan struct{})
	close(exited)
	nothing := "http://" + testutil.ReserveAddr(t).Addr // refuses connections, and no other server can take it
	msg := failure(t, func(tb testing.TB) {
		tb.Helper()
		testutil.WaitReady(tb, nothing, time.Minute, exited)
	})
	if !strings.Contains(msg, "exited before it was ready") {
		t.Errorf("a server that exited: %q", msg)
	}
	if err := testutil.AwaitReady(nothing, time.Minute, exited); !errors.Is(err, testutil.ErrExited) {
		t.Errorf("AwaitReady of a server that exited: %v, want ErrExited", err)
	}
	if err := testutil.AwaitReady(nothing, 100*time.Millisecond, nil); err == nil || errors.Is(err, testutil.ErrExited) {
		t.Errorf("AwaitReady of nothing: %v, want a timeout", err)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/json" || r.Header.Get("Authorization") != "Bearer alice" || r.URL.Path != "/v1/streams/k" {
			http.NotFound(w, r)
			return
		}
		state := "in_progress"
		if calls.Add(1) >= 3 {
			state = "completed"
		}
		fmt.Fprintf(w, `{"key":"k","state":%q,"generation":2,"events":9,"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`, state)
	}))
	t.Cleanup(srv.Close)
	if _, code := testutil.GetStatus(t, srv.URL, "k"); code != http.StatusNotFound {
		t.Errorf("without the credential: %d, want 404", code)
	}
	st := testutil.WaitState(t, srv.URL, "k", "completed", "Authorization", "Bearer alice")
	want := testutil.Status{Key: "k", State: "completed", Generation: 2, Events: 9, Usage: &testutil.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}}
	if st.Usage == nil || *st.Usage != *want.Usage {
		t.Fatalf("usage %+v", st.Usage)
	}
	st.Usage, want.Usage = nil, nil
	if st != want {
		t.Errorf("status %+v, want %+v", st, want)
	}
}

func TestAPIError(t *testing.T) {
	t.Parallel()
	// expect answers status with ct and body, and reads it with ExpectAPIError.
	expect := func(tb testing.TB, status int, ct, body string, wantStatus int, wantCode string) testutil.APIError {
		tb.Helper()
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", ct)
		rec.Header().Set("Retry-After", "2")
		rec.WriteHeader(status)
		_, _ = io.WriteString(rec, body)
		resp := rec.Result()
		defer resp.Body.Close()
		return testutil.ExpectAPIError(tb, resp, wantStatus, wantCode)
	}
	const body = `{"error":{"message":"slow down","type":"rate_limit_error","code":"too_many_readers"}}`
	e := expect(t, 429, "application/json", body, 429, "too_many_readers")
	if e != (testutil.APIError{Status: 429, ContentType: "application/json", RetryAfter: "2", Body: body, Message: "slow down", Type: "rate_limit_error", Code: "too_many_readers"}) {
		t.Errorf("ExpectAPIError = %+v", e)
	}
	if e := testutil.ParseAPIError(t, `{"error":{"message":"m","type":"t","code":null}}`); e.Code != "" || e.Message != "m" {
		t.Errorf("a null code: %+v", e)
	}
	for _, tc := range []struct {
		name, body string
		status     int    // 0: the body alone, through ParseAPIError
		code       string // the code expected of a 429
	}{
		{"not JSON", "oops", 0, ""},
		{"no type", `{"error":{"message":"m"}}`, 0, ""},
		{"other status", body, 500, "too_many_readers"},
		{"other code", body, 429, "x"},
		{"not an answer", "bad gateway", 502, "too_many_readers"},
	} {
		msg := failure(t, func(tb testing.TB) {
			tb.Helper()
			if tc.status == 0 {
				testutil.ParseAPIError(tb, tc.body)
			} else {
				expect(tb, tc.status, "application/json", tc.body, 429, tc.code)
			}
		})
		if msg == "" {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

func TestSettled(t *testing.T) {
	t.Parallel()
	fake := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	const prompt = "settle [tokens=3]"
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + prompt + `"}]}`
	resp := testutil.Do(t, http.MethodPost, srv.URL+mockllm.ChatPath, body)
	defer resp.Body.Close()
	if b := testutil.ReadBody(t, resp); !strings.Contains(b, "[DONE]") {
		t.Fatalf("stream %q", b)
	}
	if got := testutil.Settled(t, fake.Ledger(), prompt, 1); got != (mockllm.Entry{Requests: 1, Generations: 1, Completed: 1, Tokens: 3}) {
		t.Errorf("settled entry %+v", got)
	}
}

// TestReserveAddr: a reserved address refuses connections and cannot be
// taken by another listener; once it listens, it accepts.
func TestReserveAddr(t *testing.T) {
	t.Parallel()
	r := testutil.ReserveAddr(t)
	for range 3 {
		if c, err := net.Dial("tcp", r.Addr); err == nil {
			c.Close()
			t.Fatalf("a connection to the reserved %s was accepted", r.Addr)
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", r.Addr, err)
		}
	}
	if ln, err := net.Listen("tcp", r.Addr); err == nil {
		ln.Close()
		t.Fatalf("another listener took the reserved %s", r.Addr)
	}
	ln, err := r.Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if ln.Addr().String() != r.Addr {
		t.Errorf("listening on %s, reserved %s", ln.Addr(), r.Addr)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	c, err := net.Dial("tcp", r.Addr)
	if err != nil {
		t.Fatalf("dial once listening: %v", err)
	}
	c.Close()
	if _, err := r.Listen(); err == nil {
		t.Error("a second Listen succeeded")
	}
}
