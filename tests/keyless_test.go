package tests

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/stream"
)

// Keyless retries: a request without an Idempotency-Key, identical (tenant,
// path, canonical body, client session) to one whose client left before its
// result, is that request's retry — it attaches or replays, and the upstream
// generates once. The client that received its result, and identical
// requests whose clients are all still there, generate anew.

// waitLeft waits until n keyless requests' clients were seen leaving before
// their results on the instance at url, with their keys kept for their
// retries: a retry sent before that would be a new request.
func waitLeft(tb testing.TB, url string, n float64) {
	tb.Helper()
	pollUntil(tb, 10*time.Second, "the proxy to see the client leave", func() bool {
		return scraped(tb, url, "reprise_keyless_left_total") >= n
	})
}

// waitLeftOrShed is waitLeft for requests that may also have ended before
// they started anything — refused (429 overloaded on a loaded machine), or
// their decision failed (503 journal_unavailable: the journal did not
// answer in time) — and so left nothing behind.
func waitLeftOrShed(tb testing.TB, e *env, n float64) {
	tb.Helper()
	pollUntil(tb, 10*time.Second, "the proxy to see the client leave, shed its request or fail its decision", func() bool {
		return metric(tb, e, "reprise_keyless_left_total", "")+metric(tb, e, "reprise_generations_shed_total", "")+
			metric(tb, e, "reprise_requests_total", "unavailable") >= n
	})
}

// dropAfter sends a keyless streamed chat request and leaves after n events.
// A test that then waits for the proxy to see the client leave (waitLeft)
// streams for most of a second: the proxy learns of a departure from a
// write that fails, and a handler starved long enough (the race detector
// beside a CPU burner) could write a 200 ms answer's rest in one go into
// the socket's buffer, a delivery as far as TCP tells.
func dropAfter(tb testing.TB, url, body string, n int, header ...string) (key string, got []event) {
	tb.Helper()
	resp := do(tb, "POST", url+chatPath, body, header...)
	if a := attemptsHeader(tb, resp); a != 1 {
		tb.Fatalf("first request: Reprise-Attempts %d, want 1 (a new generation)", a)
	}
	return resp.Header.Get("Idempotency-Key"), readEvents(tb, resp, n)
}

// TestKeylessRetryAttaches: the client of a keyless streamed request leaves
// mid-stream and sends the same request again, in another key order: the
// retry attaches — from the first event, then live — and the upstream
// generates once. Once a client received the result, the same request is a
// regenerate: a new generation.
func TestKeylessRetryAttaches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=40] [delay=20ms]")
	body := chatBody(prompt, true)
	key, partial := dropAfter(t, e.URL, body, 3)
	waitLeft(t, e.URL, 1)

	// The same JSON in another key order (Codex's retries differ so).
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	reordered := `{"stream":true,"messages":` + mustJSON(t, m["messages"]) + `,"model":"mock-1"}`
	retry := do(t, "POST", e.URL+chatPath, reordered)
	if k := retry.Header.Get("Idempotency-Key"); k != key {
		t.Fatalf("retry got key %q, want the first request's %q", k, key)
	}
	if a := attemptsHeader(t, retry); a != 0 || retry.Header.Get("Reprise-Attached") != "true" && retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry: Reprise-Attempts %d, attached %q, replayed %q; want an attach or replay", a,
			retry.Header.Get("Reprise-Attached"), retry.Header.Get("Idempotent-Replayed"))
	}
	full := readEvents(t, retry, -1)
	checkComplete(t, full, prompt, 40)
	for i := range partial {
		if partial[i] != full[i] {
			t.Fatalf("event %d differs between the dropped request and its retry", i)
		}
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Fatalf("ledger %+v, want 1 generation", g)
	}
	if got := metric(t, e, "reprise_requests_total", "retry"); got != 1 {
		t.Errorf("reprise_requests_total{decision=retry} = %v, want 1", got)
	}

	// The retry's client received the result: the same request again is new.
	again := do(t, "POST", e.URL+chatPath, body)
	if k := again.Header.Get("Idempotency-Key"); k == key || attemptsHeader(t, again) != 1 {
		t.Errorf("regenerate: key %q (first %q), attempts %s; want a new key and generation", k, key, again.Header.Get("Reprise-Attempts"))
	}
	checkComplete(t, readEvents(t, again, -1), prompt, 40)
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("after the regenerate: ledger %+v, want 2 generations", g)
	}
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// TestKeylessRetryReplays: a retry that comes after the generation its
// client left completed replays it; a second retry of the same, whose
// predecessor (the first retry) received it, is new.
func TestKeylessRetryReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=20] [delay=40ms]")
	body := chatBody(prompt, true)
	key, _ := dropAfter(t, e.URL, body, 1)
	waitLeft(t, e.URL, 1)
	waitState(t, e, key, "completed")
	retry := do(t, "POST", e.URL+chatPath, body)
	if retry.Header.Get("Idempotency-Key") != key || retry.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: key %q (want %q), Idempotent-Replayed %q", retry.Header.Get("Idempotency-Key"), key, retry.Header.Get("Idempotent-Replayed"))
	}
	checkComplete(t, readEvents(t, retry, -1), prompt, 20)
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Fatalf("ledger %+v, want 1 generation", g)
	}
}

// TestKeylessParallel: identical keyless requests whose clients are all
// still connected are separate generations (parallel sampling, two tabs).
func TestKeylessParallel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=20] [delay=5ms]")
	body := chatBody(prompt, true)
	const n = 3
	resps := make([]*http.Response, n)
	for i := range resps {
		resps[i] = do(t, "POST", e.URL+chatPath, body) // each still open when the next is sent
	}
	keys := map[string]bool{}
	for i, resp := range resps {
		keys[resp.Header.Get("Idempotency-Key")] = true
		if a := attemptsHeader(t, resp); a != 1 {
			t.Errorf("request %d: Reprise-Attempts %d, want 1", i, a)
		}
		checkComplete(t, readEvents(t, resp, -1), prompt, 20)
	}
	if len(keys) != n {
		t.Errorf("%d keys for %d parallel requests", len(keys), n)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, n); g.Generations != n {
		t.Errorf("ledger %+v, want %d generations", g, n)
	}
}

// TestKeylessRetryAfterFailure: the generation a client left failed (the
// upstream broke after a few events, no result): its retry generates
// afresh, as with a key, and gets a whole answer.
func TestKeylessRetryAfterFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Every generation of the prompt breaks after 20 events, 18 after the
	// client left.
	prompt := uniquePrompt(t, "[tokens=40] [delay=20ms] [abort_after=20]")
	body := chatBody(prompt, true)
	key, _ := dropAfter(t, e.URL, body, 2)
	waitLeft(t, e.URL, 1)
	waitState(t, e, key, "failed")
	retry := do(t, "POST", e.URL+chatPath, body)
	if retry.Header.Get("Idempotency-Key") != key || attemptsHeader(t, retry) != 1 {
		t.Errorf("retry of a failed generation: key %q (first %q), attempts %s; want the same key, generating", retry.Header.Get("Idempotency-Key"), key, retry.Header.Get("Reprise-Attempts"))
	}
	if last := lastEvent(t, readEvents(t, retry, -1)); last.Type != "error" {
		t.Errorf("retry ended with %+v, want the new generation's own break", last)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("ledger %+v, want 2 generations (the failed one and the retry's)", g)
	}
}

// TestKeylessRetryAfterCancel: the generation a client left was cancelled
// (no result): its retry generates afresh.
func TestKeylessRetryAfterCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=20] [hang_after=3]") // it stalls until cancelled
	body := chatBody(prompt, true)
	key, _ := dropAfter(t, e.URL, body, 3)
	waitLeft(t, e.URL, 1)
	if resp := do(t, "POST", e.URL+"/v1/streams/"+key+"/cancel", ""); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", resp.StatusCode, readBody(t, resp))
	}
	waitState(t, e, key, "cancelled")
	retry := do(t, "POST", e.URL+chatPath, body)
	if retry.Header.Get("Idempotency-Key") != key || attemptsHeader(t, retry) != 1 {
		t.Errorf("retry of a cancelled generation: key %q (first %q), attempts %s; want the same key, generating", retry.Header.Get("Idempotency-Key"), key, retry.Header.Get("Reprise-Attempts"))
	}
	_ = retry.Body.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := e.LLM.Ledger().WaitStarted(ctx, prompt, 2); err != nil {
		t.Errorf("%v: want 2 generations (the cancelled one and the retry's)", err)
	}
	readBody(t, do(t, "POST", e.URL+"/v1/streams/"+key+"/cancel", "")) // the retry's stalls too
}

// TestKeylessRetryOtherInstance: the retry lands on another instance (a
// balancer without sticky sessions) and attaches there.
func TestKeylessRetryOtherInstance(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withNATSPort())
	b := startInstance(t, "keyless-b", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{replicas: 1})
	prompt := uniquePrompt(t, "[tokens=30] [delay=30ms]")
	body := chatBody(prompt, true)
	key, _ := dropAfter(t, e.URL, body, 2)
	waitLeft(t, e.URL, 1)
	retry := do(t, "POST", b.URL+chatPath, body)
	if retry.Header.Get("Idempotency-Key") != key || attemptsHeader(t, retry) != 0 {
		t.Fatalf("retry on another instance: key %q (first %q), attempts %s", retry.Header.Get("Idempotency-Key"), key, retry.Header.Get("Reprise-Attempts"))
	}
	checkComplete(t, readEvents(t, retry, -1), prompt, 30)
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
}

// TestKeylessNarrowing: a retry is recognised only within its tenant and
// client session, only within the window, and never when the request or
// the deployment turns it off.
func TestKeylessNarrowing(t *testing.T) {
	t.Parallel()
	newRequest := func(t *testing.T, e *env, left func(body string, header ...string), retry []string, wantRetry bool) {
		t.Helper()
		prompt := uniquePrompt(t, "[tokens=20] [delay=5ms]")
		body := chatBody(prompt, true)
		left(body)
		resp := do(t, "POST", e.URL+chatPath, body, retry...)
		readEvents(t, resp, -1)
		want := 2
		if wantRetry {
			want = 1
		}
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, want); g.Generations != want {
			t.Errorf("ledger %+v, want %d generations", g, want)
		}
	}
	e := newEnv(t)
	left := 0.0
	leave := func(header ...string) func(string, ...string) {
		return func(body string, _ ...string) {
			dropAfter(t, e.URL, body, 2, header...)
			left++
			waitLeft(t, e.URL, left)
		}
	}
	t.Run("same session", func(t *testing.T) {
		newRequest(t, e, leave("X-Claude-Code-Session-Id", "s-1"), []string{"X-Claude-Code-Session-Id", "s-1"}, true)
	})
	t.Run("other session", func(t *testing.T) {
		newRequest(t, e, leave("X-Claude-Code-Session-Id", "s-1"), []string{"X-Claude-Code-Session-Id", "s-2"}, false)
	})
	t.Run("session then none", func(t *testing.T) {
		newRequest(t, e, leave("Session-Id", "codex-1"), nil, false)
	})
	t.Run("other tenant", func(t *testing.T) {
		newRequest(t, e, leave(), []string{"Authorization", "Bearer sk-other-tenant"}, false)
	})
	t.Run("retry says off", func(t *testing.T) {
		newRequest(t, e, leave(), []string{stream.KeylessRetryHeader, "off"}, false)
	})
	t.Run("first said off", func(t *testing.T) {
		prompt := uniquePrompt(t, "[tokens=20] [delay=5ms]")
		body := chatBody(prompt, true)
		dropAfter(t, e.URL, body, 2, stream.KeylessRetryHeader, "off")
		// Nothing is kept for it, so there is nothing to wait for: a retry
		// sent after its generation completed finds nothing either.
		testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
		readEvents(t, do(t, "POST", e.URL+chatPath, body), -1)
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Generations != 2 {
			t.Errorf("ledger %+v, want 2 generations", g)
		}
	})
	t.Run("deployment off", func(t *testing.T) {
		t.Parallel()
		off := newEnv(t, withConfig(func(cfg *proxy.Config) { cfg.HTTP.KeylessRetryWindow = -1 }))
		prompt := uniquePrompt(t, "[tokens=20] [delay=5ms]")
		body := chatBody(prompt, true)
		key, _ := dropAfter(t, off.URL, body, 2)
		waitState(t, off, key, "completed") // the client is long gone
		readEvents(t, do(t, "POST", off.URL+chatPath, body), -1)
		if g := testutil.Settled(t, off.LLM.Ledger(), prompt, 2); g.Generations != 2 {
			t.Errorf("off: ledger %+v, want 2 generations", g)
		}
	})
	t.Run("window over", func(t *testing.T) {
		t.Parallel()
		short := newEnv(t, withConfig(func(cfg *proxy.Config) { cfg.HTTP.KeylessRetryWindow = 300 * time.Millisecond }))
		prompt := uniquePrompt(t, "[tokens=20] [delay=10ms]")
		body := chatBody(prompt, true)
		dropAfter(t, short.URL, body, 1)
		waitLeft(t, short.URL, 1)
		time.Sleep(400 * time.Millisecond) // the window is a time: past it
		readEvents(t, do(t, "POST", short.URL+chatPath, body), -1)
		if g := testutil.Settled(t, short.LLM.Ledger(), prompt, 2); g.Generations != 2 {
			t.Errorf("retry after the window: ledger %+v, want 2 generations", g)
		}
	})
}

// TestKeylessResumedIsReceived: a client whose POST dropped resumes from
// its Location and receives the result there: the same request sent again
// afterwards is a regenerate, not a retry.
func TestKeylessResumedIsReceived(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=30] [delay=20ms]")
	body := chatBody(prompt, true)
	resp := do(t, "POST", e.URL+chatPath, body)
	loc := resp.Header.Get("Location")
	evs := readEvents(t, resp, 2)
	waitLeft(t, e.URL, 1)
	rest := readEvents(t, do(t, "GET", e.URL+loc, "", "Accept", "text/event-stream", "Last-Event-ID", evs[len(evs)-1].ID), -1)
	if lastEvent(t, rest).Data != "[DONE]" {
		t.Fatalf("resume ended with %+v", lastEvent(t, rest))
	}
	again := do(t, "POST", e.URL+chatPath, body)
	if attemptsHeader(t, again) != 1 {
		t.Errorf("the same request after the result was received: attempts %s, want a new generation", again.Header.Get("Reprise-Attempts"))
	}
	readEvents(t, again, -1)
}

// TestKeylessTimeoutStory: a script's HTTP client times out before a
// non-streamed generation ends, and sends the same request again, and
// again: the upstream generates once, and a retry gets the first request's
// answer.
func TestKeylessTimeoutStory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// 20 tokens 50 ms apart: a second at least, well past the client's
	// 200 ms timeout.
	prompt := uniquePrompt(t, "[tokens=20] [delay=50ms]")
	body := chatBody(prompt, false)
	// The timeout bounds the wait for the answer's head, which a
	// non-streamed answer sends with its body: a client timed out before
	// anything was written. (One that times out while reading an answer
	// written whole got it, as far as the proxy can tell: its TCP
	// acknowledged it.)
	client := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 200 * time.Millisecond}}
	defer client.CloseIdleConnections()
	// Once the answer is near, the script waits for it: a try that timed
	// out just as its answer was written whole would have got it as far as
	// the proxy can tell (its TCP acknowledged it before the client closed:
	// its retry would be a new request) — a race
	// of the box's load, not this story. Half the tokens written leaves
	// 10 of them, 500 ms, against a 200 ms timeout.
	patient := &http.Client{Timeout: 30 * time.Second}
	near := func() bool {
		gens := e.LLM.Ledger().Generations(prompt)
		return len(gens) > 0 && gens[len(gens)-1].Tokens >= 10
	}
	post := func() (*http.Response, error) {
		req, err := http.NewRequest("POST", e.URL+chatPath, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if near() {
			return patient.Do(req)
		}
		return client.Do(req)
	}
	timeouts := 0
	var answer []byte
	for try := range 100 { // bounded: a script's retry loop
		resp, err := post()
		if err != nil {
			var ne interface{ Timeout() bool }
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("try %d: %v", try, err)
			}
			timeouts++
			waitLeftOrShed(t, e, float64(timeouts))
			continue
		}
		answer, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatalf("try %d: reading the answer: %v", try, err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("try %d: status %d: %s", try, resp.StatusCode, answer)
		}
		break
	}
	if timeouts == 0 || answer == nil {
		t.Fatalf("%d timeouts, answer %q: want the first tries to time out, then the answer", timeouts, answer)
	}
	var got struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(answer, &got); err != nil || len(got.Choices) != 1 {
		t.Fatalf("answer %s: %v", answer, err)
	}
	if want := strings.Join(mockllm.Content(prompt, 20, false), ""); got.Choices[0].Message.Content != want {
		t.Errorf("content %q, want %q", got.Choices[0].Message.Content, want)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Errorf("ledger %+v after %d timeouts: want 1 generation", g, timeouts)
	}
	t.Logf("seed story: %d tries timed out, then the answer; %d upstream generation(s)", timeouts, testutil.Settled(t, e.LLM.Ledger(), prompt, 1).Generations)
}

// TestKeylessClaimKeptOnlyByResult: a keyless retry that claimed its
// predecessor's key but was answered an error of reprise's own — here 409
// in_progress, its wait for the running generation having run out — got no
// result: the key goes back, and the client's next try (obeying
// Retry-After) claims it again and gets the answer. The upstream
// generates once.
func TestKeylessClaimKeptOnlyByResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAttachWait(150*time.Millisecond))
	prompt := uniquePrompt(t, "[tokens=20] [delay=50ms]")
	body := chatBody(prompt, false)
	// The first try leaves before its answer: its context ends once the
	// upstream generates.
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		resp, err := send(ctx, "POST", e.URL+chatPath, body, "Content-Type", "application/json")
		if err == nil {
			_ = resp.Body.Close()
		}
		first <- err
	}()
	pollUntil(t, 10*time.Second, "the upstream to start generating", func() bool { return e.LLM.Ledger().Get(prompt).Generations == 1 })
	cancel()
	if err := <-first; err == nil {
		t.Fatal("the first try got its answer before it left")
	}
	waitLeft(t, e.URL, 1)

	conflicts := 0
	for try := range 50 { // bounded: a script's retry loop
		resp := do(t, "POST", e.URL+chatPath, body, "Content-Type", "application/json")
		b := readBody(t, resp)
		if resp.StatusCode == http.StatusOK {
			if !strings.Contains(b, `"chat.completion"`) {
				t.Fatalf("try %d: %s, want the chat completion", try, b)
			}
			break
		}
		if resp.StatusCode != http.StatusConflict || resp.Header.Get("Idempotency-Key") == "" {
			t.Fatalf("try %d: %d %s, want 409 in_progress of the claimed key, or the answer", try, resp.StatusCode, b)
		}
		conflicts++
		waitLeft(t, e.URL, float64(1+conflicts)) // the key went back
	}
	if conflicts == 0 {
		t.Fatalf("no try was answered 409: the test did not exercise a retry's error")
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Errorf("ledger %+v after %d conflicts, want 1 generation", g, conflicts)
	}
}

// TestKeylessRetryOutrunsTheBookkeeping: a script's call times out and the
// same call goes out at once — before the proxy has recorded that the first
// client left (it learns of it as its handler ends, and records it in the
// index with a write of its own). The retry is decided at its arrival: an
// identical request in flight whose client is gone is the one it retries.
// No wait for waitLeft here: each round's retry races the bookkeeping, and
// each round generates once.
func TestKeylessRetryOutrunsTheBookkeeping(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	impatient := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: 150 * time.Millisecond}}
	defer impatient.CloseIdleConnections()
	for round := range 8 {
		prompt := uniquePrompt(t, "[tokens=20] [delay=40ms] [round="+itoa(round)+"]")
		body := chatBody(prompt, false)
		post := func(c *http.Client) (*http.Response, error) {
			req, err := http.NewRequest("POST", e.URL+chatPath, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			return c.Do(req)
		}
		if resp, err := post(impatient); err == nil {
			_ = resp.Body.Close()
			t.Fatalf("round %d: the first call was answered (%d) before its timeout", round, resp.StatusCode)
		}
		resp, err := post(http.DefaultClient) // at once
		if err != nil {
			t.Fatal(err)
		}
		b := readBody(t, resp)
		if resp.StatusCode != http.StatusOK || !strings.Contains(b, `"chat.completion"`) {
			t.Fatalf("round %d: the retry got %d %s", round, resp.StatusCode, b)
		}
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
			t.Errorf("round %d: ledger %+v, want 1 generation (attempts %s)", round, g, resp.Header.Get("Reprise-Attempts"))
		}
	}
}
