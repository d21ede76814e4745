package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

const chatPath = "/v1/chat/completions"

// TestCompleteStream: a streamed chat passes every upstream event through,
// with ids, the contract headers and [DONE] last; the upstream is billed once.
func TestCompleteStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=12]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", `"k-complete"`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := resp.Header.Get("Idempotency-Key"); got != "k-complete" {
		t.Errorf("Idempotency-Key = %q", got)
	}
	if got := resp.Header.Get("Location"); !strings.HasPrefix(got, "/v1/streams/k-complete?token=v1.") {
		t.Errorf("Location = %q, want the stream URL with a capability token", got)
	}
	evs := readEvents(t, resp, -1)
	checkUnique(t, evs)
	if n := len(evs); n != 12+3 { // role, 12 tokens, stop, [DONE] (no usage chunk: not asked for)
		t.Fatalf("got %d events, want 16", n)
	}
	if last := evs[len(evs)-1]; last.Data != "[DONE]" {
		t.Errorf("last event %q, want [DONE]", last.Data)
	}
	want := strings.Join(mockllm.Content(prompt, 12, false), "")
	if got := content(t, evs); got != want {
		t.Errorf("content %q, want %q", got, want)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 || g.Requests != 1 || g.Completed != 1 {
		t.Errorf("ledger %+v, want one request and one completed generation", g)
	}
}

// TestResume covers a client that drops after k events and comes back.
func TestResume(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		resume func(t *testing.T, e *env, key, body, last string) *http.Response
	}{
		{"GET with Last-Event-ID header", func(t *testing.T, e *env, key, _, last string) *http.Response {
			t.Helper()
			return do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", last)
		}},
		{"GET with last_event_id query", func(t *testing.T, e *env, key, _, last string) *http.Response {
			t.Helper()
			return do(t, "GET", e.URL+"/v1/streams/"+key+"?last_event_id="+last, "")
		}},
		{"POST same key with Last-Event-ID", func(t *testing.T, e *env, key, body, last string) *http.Response {
			t.Helper()
			return do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key, "Last-Event-ID", last)
		}},
	}
	e := newEnv(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []int{1, 5, 20} {
				prompt := uniquePrompt(t, "[tokens=40] [delay=3ms]")
				key := "k-resume-" + strings.ReplaceAll(tc.name, " ", "-") + "-" + string(rune('a'+k))
				body := chatBody(prompt, true)
				first := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key), k)
				rest := readEvents(t, tc.resume(t, e, key, body, lastID(first)), -1)
				all := append(first, rest...)
				checkUnique(t, all)
				if all[len(all)-1].Data != "[DONE]" {
					t.Fatalf("k=%d: resumed stream did not end with [DONE]", k)
				}
				testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
				gens := e.LLM.Ledger().Generations(prompt)
				if len(gens) != 1 {
					t.Fatalf("k=%d: %d upstream generations, want 1", k, len(gens))
				}
				if got := content(t, all); got != gens[0].Content {
					t.Errorf("k=%d: reassembled %q, upstream generated %q", k, got, gens[0].Content)
				}
			}
		})
	}
}

// TestDuplicateReplays: the same key without Last-Event-ID while the
// generation runs, and after it completed, gets the full stream; the
// upstream is called once.
func TestDuplicateReplays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// 30 tokens at 30 ms take 0.9 s: room for the second request to come
	// while they run, on a loaded machine too.
	prompt := uniquePrompt(t, "[tokens=30] [delay=30ms]")
	body := chatBody(prompt, true)
	first := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-dup")
	a := readEvents(t, first, 3) // drop early; the upstream keeps going
	during := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-dup")
	if during.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("attach to a running generation marked as replayed")
	}
	if during.Header.Get("Reprise-Attached") != "true" {
		t.Errorf("attach to a running generation lacks Reprise-Attached: true")
	}
	if first.Header.Get("Reprise-Attached") != "" {
		t.Errorf("the first request is marked Reprise-Attached")
	}
	b := readEvents(t, during, -1)
	// Readers get [DONE] as soon as it is journaled, the key's record is
	// completed just after: until then a duplicate attaches (same events,
	// no Idempotent-Replayed).
	waitState(t, e, "k-dup", "completed")
	after := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-dup")
	if after.Header.Get("Idempotent-Replayed") != "true" || after.Header.Get("Reprise-Attached") != "" {
		t.Errorf("replay of a completed key: Idempotent-Replayed %q, Reprise-Attached %q; want true and none",
			after.Header.Get("Idempotent-Replayed"), after.Header.Get("Reprise-Attached"))
	}
	c := readEvents(t, after, -1)
	if len(b) != 33 || len(c) != 33 {
		t.Fatalf("attach got %d events, replay %d, want 33 each", len(b), len(c))
	}
	for i := range b {
		if b[i] != c[i] {
			t.Fatalf("event %d differs: attach %+v, replay %+v", i, b[i], c[i])
		}
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("event %d differs between first client and attach", i)
		}
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 1 || g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 request, 1 generation", g)
	}
}

// TestDuplicateSerialisedOtherwise: the same request with its keys in
// another order and other whitespace is a duplicate, not a mismatch: it
// attaches while the generation runs and replays once it completed, and
// the upstream generates once; another request with the key is still 422.
func TestDuplicateSerialisedOtherwise(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=30] [delay=30ms]")
	content, _ := json.Marshal(prompt)
	reordered := "{\n  \"messages\": [ { \"content\": " + string(content) + ", \"role\": \"user\" } ],\n  \"stream\": true,\n  \"model\": \"mock-1\"\n}\n"
	first := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-reordered")
	readEvents(t, first, 3)
	during := do(t, "POST", e.URL+chatPath, reordered, "Idempotency-Key", "k-reordered")
	if during.StatusCode != http.StatusOK || during.Header.Get("Reprise-Attached") != "true" {
		t.Fatalf("reordered body while it runs: HTTP %d, Reprise-Attached %q; want 200, an attach", during.StatusCode, during.Header.Get("Reprise-Attached"))
	}
	if evs := readEvents(t, during, -1); len(evs) != 33 || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("the attach got %d events, want 33 ending with [DONE]", len(evs))
	}
	waitState(t, e, "k-reordered", "completed")
	after := do(t, "POST", e.URL+chatPath, strings.ReplaceAll(reordered, "\n", "\r\n\t"), "Idempotency-Key", "k-reordered")
	if after.StatusCode != http.StatusOK || after.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("reordered body once completed: HTTP %d, Idempotent-Replayed %q; want a replay", after.StatusCode, after.Header.Get("Idempotent-Replayed"))
	}
	readEvents(t, after, -1)
	other := do(t, "POST", e.URL+chatPath, chatBody(prompt+" more", true), "Idempotency-Key", "k-reordered")
	if readBody(t, other); other.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("another body with the key: HTTP %d, want 422", other.StatusCode)
	}
	testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	if gens := e.LLM.Ledger().Generations(prompt); len(gens) != 1 {
		t.Errorf("%d upstream generations, want 1", len(gens))
	}
}

// TestClientGone: the upstream runs to its end and is journaled after the
// only client left.
func TestClientGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=25] [delay=5ms]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-gone"), 2)
	testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	gens := e.LLM.Ledger().Generations(prompt)
	if !gens[0].Completed {
		t.Fatalf("upstream generation did not complete after the client left: %+v", gens[0])
	}
	st := waitState(t, e, "k-gone", "completed")
	if st.Events != 25+3 {
		t.Errorf("journaled %d events, want 28", st.Events)
	}
	evs := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-gone", ""), -1)
	if got := content(t, evs); got != gens[0].Content {
		t.Errorf("journal holds %q, upstream generated %q", got, gens[0].Content)
	}
}

// keyStatus is a key's JSON status.
type keyStatus = testutil.Status

// getStatus reads key's JSON status from e (testutil.GetStatus).
func getStatus(tb testing.TB, e *env, key string) (keyStatus, int) {
	tb.Helper()
	return testutil.GetStatus(tb, e.URL, key)
}

// waitState polls the JSON status until the key reaches state
// (testutil.WaitState).
func waitState(tb testing.TB, e *env, key, state string) keyStatus {
	tb.Helper()
	return testutil.WaitState(tb, e.URL, key, state)
}

// TestConcurrentDuplicates: many identical requests at once make one
// generation and identical streams.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=20] [delay=2ms]")
	body := chatBody(prompt, true)
	const n = 12
	streams := make([][]event, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			streams[i] = readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-conc"), -1)
		})
	}
	wg.Wait()
	for i := 1; i < n; i++ {
		if strings.Join(ids(streams[i]), ",") != strings.Join(ids(streams[0]), ",") || content(t, streams[i]) != content(t, streams[0]) {
			t.Fatalf("stream %d differs from stream 0", i)
		}
	}
	if len(streams[0]) != 23 {
		t.Fatalf("got %d events, want 23", len(streams[0]))
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 1 || g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 request, 1 generation", g)
	}
}
