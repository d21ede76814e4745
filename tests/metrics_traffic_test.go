package tests

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// series sums the series of family name whose labels include labels
// (name, value pairs); a histogram's value is its count.
func series(tb testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	fams, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// TestMetricsAtStartup: a scrape of /metrics right after proxy.New lists
// every family.
func TestMetricsAtStartup(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	text := readBody(t, do(t, "GET", e.URL+"/metrics", ""))
	for _, name := range metrics.Families() {
		if !strings.Contains(text, "\n# TYPE "+name+" ") && !strings.HasPrefix(text, "# HELP "+name+" ") {
			t.Errorf("/metrics at start-up lacks %s", name)
		}
	}
	for _, s := range []string{
		`reprise_generations_total{outcome="failed"} 0`,
		`reprise_duplicates_suppressed_total{how="retry"} 0`,
		`reprise_generations_saved_total{how="resume"} 0`,
		`reprise_tokens_saved_total{direction="completion"} 0`,
		`reprise_tokens_estimated_total{direction="prompt"} 0`,
		`reprise_requests_total{decision="retry"} 0`,
		`reprise_resumes_total{transport="websocket"} 0`,
		`reprise_retry_outcomes_total{result="success"} 0`,
		`reprise_upstream_retries_total{reason="rate_limited"} 0`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("/metrics at start-up lacks %s", s)
		}
	}
}

// TestMetricsTraffic: scripted traffic — a retried request, an attach and
// a replay, a resume over SSE and one over WebSocket, a keyless retry of a
// request whose client left, a failed generation — then exact counts, which
// agree with the fake upstream's ledger, the generations saved by kind
// included.
func TestMetricsTraffic(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	// A 503, retried, then success.
	retried := uniquePrompt(t, "[status=503] [tokens=3]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(retried, true), "Idempotency-Key", "k-m-retry"), -1)
	waitState(t, e, "k-m-retry", "completed")

	// A start dropped after 3 events, an attach while it runs, a replay
	// once it completed.
	dup := chatBody(uniquePrompt(t, "[tokens=30] [delay=50ms]"), true)
	readEvents(t, do(t, "POST", e.URL+chatPath, dup, "Idempotency-Key", "k-m-dup"), 3)
	attach := do(t, "POST", e.URL+chatPath, dup, "Idempotency-Key", "k-m-dup")
	if attach.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the attach came after the generation completed: the counts below would be off")
	}
	readEvents(t, attach, -1)
	waitState(t, e, "k-m-dup", "completed")
	readEvents(t, do(t, "POST", e.URL+chatPath, dup, "Idempotency-Key", "k-m-dup"), -1)

	// A start dropped after 4 events, resumed over SSE, then over WebSocket.
	first := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=20] [delay=3ms]"), true), "Idempotency-Key", "k-m-resume"), 4)
	rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-m-resume", "", "Last-Event-ID", lastID(first)), -1)
	if len(rest) == 0 || rest[len(rest)-1].Data != "[DONE]" {
		t.Fatalf("SSE resume got %d events, not to [DONE]", len(rest))
	}
	conn, resp, err := websocket.DefaultDialer.DialContext(waitCtx(t, 10*time.Second),
		"ws"+strings.TrimPrefix(e.URL, "http")+"/v1/streams/k-m-resume?last_event_id="+lastID(first), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	frames := 0
	for {
		if _, _, err := conn.ReadMessage(); err != nil {
			break
		}
		frames++
	}
	conn.Close()
	if frames != len(rest) {
		t.Fatalf("WebSocket resume got %d frames, SSE %d events", frames, len(rest))
	}

	// A keyless request whose client left, then its retry: replayed.
	sdk := chatBody(uniquePrompt(t, "[tokens=20] [delay=40ms]"), true)
	firstKey, _ := dropAfter(t, e.URL, sdk, 1)
	waitLeft(t, e.URL, 1)
	waitState(t, e, firstKey, "completed")
	readEvents(t, do(t, "POST", e.URL+chatPath, sdk, "X-Stainless-Retry-Count", "1"), -1)

	// A generation the upstream refuses.
	failResp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[status=400]"), true), "Idempotency-Key", "k-m-fail")
	_, _ = io.Copy(io.Discard, failResp.Body)
	failResp.Body.Close()
	if failResp.StatusCode != http.StatusBadRequest {
		t.Fatalf("refused generation: status %d, want 400", failResp.StatusCode)
	}
	waitState(t, e, "k-m-fail", "failed")

	// Every generation has ended and every reader left.
	testutil.Eventually(t, 10*time.Second, "5 generations to end and readers to leave", func() bool {
		return series(t, e.reg, "reprise_generations_total") == 5 && series(t, e.reg, "reprise_stream_readers") == 0
	})
	// Saved: the attach once its generation completed, the two resumes a
	// moment after they were served.
	saved := map[string]float64{"attach": 1, "replay": 1, "resume": 2, "retry": 1}
	testutil.Eventually(t, 10*time.Second, "the savings to be counted", func() bool {
		for how, want := range saved {
			if series(t, e.reg, "reprise_generations_saved_total", "how", how) != want {
				return false
			}
		}
		return true
	})
	ledger := e.LLM.Ledger().Total()
	if ledger.Requests != 6 || ledger.Completed != 4 {
		t.Fatalf("ledger %+v, want 6 requests and 4 completed generations", ledger)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"reprise_requests_total", []string{"decision", "start"}, 5},
		{"reprise_requests_total", []string{"decision", "attach"}, 1},
		{"reprise_requests_total", []string{"decision", "replay"}, 2},
		{"reprise_requests_total", []string{"decision", "retry"}, 1},
		{"reprise_keyless_left_total", nil, 1},
		{"reprise_duplicates_suppressed_total", []string{"how", "attach"}, 1},
		{"reprise_duplicates_suppressed_total", []string{"how", "replay"}, 1},
		{"reprise_duplicates_suppressed_total", []string{"how", "retry"}, 1},
		{"reprise_resumes_total", []string{"transport", "sse"}, 1},
		{"reprise_resumes_total", []string{"transport", "websocket"}, 1},
		{"reprise_resumes_total", []string{"transport", "range"}, 0},
		{"reprise_generations_total", []string{"outcome", "completed"}, float64(ledger.Completed)},
		{"reprise_generations_total", []string{"outcome", "failed"}, 1},
		{"reprise_generations_total", []string{"outcome", "interrupted"}, 0},
		{"reprise_generations_total", []string{"outcome", "cancelled"}, 0},
		{"reprise_generations_running", nil, 0},
		{"reprise_upstream_requests_total", nil, float64(ledger.Requests)},
		{"reprise_upstream_attempts_total", nil, float64(ledger.Requests)},
		{"reprise_upstream_attempts_total", []string{"status", "200", "kind", "success"}, 4},
		{"reprise_upstream_attempts_total", []string{"status", "503", "kind", "retryable"}, 1},
		{"reprise_upstream_attempts_total", []string{"status", "400", "kind", "fatal"}, 1},
		{"reprise_upstream_first_byte_seconds", nil, 6},
		{"reprise_upstream_retries_total", []string{"reason", "overloaded"}, 1},
		{"reprise_upstream_retries_total", nil, 1},
		{"reprise_retry_outcomes_total", []string{"result", "success"}, 1},
		{"reprise_retry_outcomes_total", []string{"result", "failure"}, 0},
		{"reprise_client_first_token_seconds", nil, 4}, // the four streamed starts
		{"reprise_resume_first_event_seconds", nil, 2}, // SSE and WebSocket
		{"reprise_upstream_breaker_open", nil, 0},
		{"reprise_journal_errors_total", nil, 0},
		{"reprise_journal_stalls_total", nil, 0},
	} {
		if got := series(t, e.reg, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := series(t, e.reg, "reprise_journal_append_seconds"); n == 0 {
		t.Error("no journal append observed")
	}
}

// TestMetricsOutcomes: a stream the upstream breaks after its first events
// is interrupted, one a client cancels is cancelled; neither is failed nor
// completed.
func TestMetricsOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=10] [abort_after=3]"), true), "Idempotency-Key", "k-m-cut"), -1)
	waitState(t, e, "k-m-cut", "failed")

	resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2000] [delay=10ms]"), true), "Idempotency-Key", "k-m-cancel")
	loc := resp.Header.Get("Location")
	readEvents(t, resp, 2)
	u, _ := url.Parse(e.URL + loc)
	u.Path += "/cancel"
	readBody(t, do(t, "POST", u.String(), ""))
	waitState(t, e, "k-m-cancel", "cancelled")

	testutil.Eventually(t, 10*time.Second, "2 generations to end", func() bool { return series(t, e.reg, "reprise_generations_total") == 2 })
	for outcome, want := range map[string]float64{"interrupted": 1, "cancelled": 1, "failed": 0, "completed": 0} {
		if got := series(t, e.reg, "reprise_generations_total", "outcome", outcome); got != want {
			t.Errorf("generations{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
	if got := series(t, e.reg, "reprise_requests_total", "decision", "cancel"); got != 1 {
		t.Errorf("requests{decision=cancel} = %v, want 1", got)
	}
}

// TestMetricsRangeResume: a byte range of a stored result is a resume
// over range; the whole result without Range is none.
func TestMetricsRangeResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := do(t, "POST", e.URL+"/v1/audio/speech", speechBody(uniquePrompt(t, "[tokens=4]"), false), "Idempotency-Key", "k-m-wav")
	loc := resp.Header.Get("Location")
	readBody(t, resp)
	waitState(t, e, "k-m-wav", "completed")
	if r := do(t, "GET", e.URL+loc, "", "Range", "bytes=10-"); r.StatusCode != http.StatusPartialContent {
		t.Fatalf("range: status %d, want 206", r.StatusCode)
	} else {
		readBody(t, r)
	}
	readBody(t, do(t, "GET", e.URL+loc, ""))
	for transport, want := range map[string]float64{"range": 1, "sse": 0, "websocket": 0} {
		if got := series(t, e.reg, "reprise_resumes_total", "transport", transport); got != want {
			t.Errorf("resumes{transport=%q} = %v, want %v", transport, got, want)
		}
	}
}
