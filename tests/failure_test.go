package tests

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
)

// TestUpstreamErrorBeforeStream: a fatal upstream status reaches the client
// at once with its body, the key is failed, and the same key may generate
// again. (Retryable statuses: retry_test.go.)
func TestUpstreamErrorBeforeStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, status := range []int{400, 401, 403, 404, 409, 422} {
		prompt := uniquePrompt(t, "[tokens=3] [status="+itoa(status)+"] [retry_after=2]")
		key := "k-err-" + itoa(status)
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key)
		if x := testutil.ReadAPIError(t, resp); x.Status != status {
			t.Fatalf("status %d, want %d (%s)", x.Status, status, x.Body)
		}
		if got := resp.Header.Get("Reprise-Attempts"); got != "1" {
			t.Errorf("%d: Reprise-Attempts %q, want 1", status, got)
		}
		waitState(t, e, key, "failed")
		// The same key starts afresh (the mock succeeds on the second request).
		evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key), -1)
		if evs[len(evs)-1].Data != "[DONE]" {
			t.Fatalf("%d: second attempt did not complete", status)
		}
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 2 || g.Generations != 1 {
			t.Errorf("%d: ledger %+v, want 2 requests, 1 generation", status, g)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestUpstreamBreaksMidStream: a broken upstream stream is no result: the
// client gets event: error and no [DONE], the key is failed, a retry of the
// key generates afresh and a reader of the old generation gets a reset.
func TestUpstreamBreaksMidStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=30] [abort_after=8]")
	body := chatBody(prompt, true)
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-break"), -1)
	last := evs[len(evs)-1]
	if last.Type != "error" || !strings.Contains(last.Data, "upstream_interrupted") {
		t.Fatalf("last event %+v, want event: error upstream_interrupted", last)
	}
	for _, ev := range evs {
		if ev.Data == "[DONE]" {
			t.Fatal("a broken stream carried [DONE]")
		}
	}
	if len(evs) != 8+1 {
		t.Errorf("got %d events, want the 8 written plus the error", len(evs))
	}
	st := waitState(t, e, "k-break", "failed")
	if st.Error != "upstream_interrupted" {
		t.Errorf("error code %q", st.Error)
	}
	// A reader at the end of the failed generation is told it is over.
	if resp := do(t, "GET", e.URL+"/v1/streams/k-break", "", "Last-Event-ID", last.ID); resp.StatusCode != 204 {
		t.Errorf("cursor at the end of a failed generation: %d, want 204", resp.StatusCode)
	}
	// Same key again: a new generation (the prompt would break again, so
	// resume through another body is impossible; the key regenerates).
	evs2 := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-break", "Last-Event-ID", evs[3].ID), -1)
	if evs2[0].Type != "reset" {
		t.Fatalf("first event %+v, want reset", evs2[0])
	}
	if got := testutil.Settled(t, e.LLM.Ledger(), prompt, 2).Generations; got != 2 {
		t.Errorf("%d generations, want exactly 2", got)
	}
	st = waitState(t, e, "k-break", "failed")
	if st.Generation != 2 {
		t.Errorf("generation %d, want 2", st.Generation)
	}
	// A reader with a cursor in generation 1 gets reset, then generation 2.
	evs3 := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-break", "", "Last-Event-ID", evs[2].ID), -1)
	if evs3[0].Type != "reset" || evs3[0].ID != "2-0-0" {
		t.Errorf("reader of generation 1 got %+v first, want reset 2-0-0", evs3[0])
	}
}

// TestBadRequests: every refusal is an OpenAI-shaped JSON error with the right status.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), "Idempotency-Key", "k-bad"), -1)
	tests := []struct {
		name, method, path, body string
		header                   []string
		want                     int
		code                     string
	}{
		{"malformed json", "POST", chatPath, `{"model":`, nil, 400, "invalid_json"},
		{"not an object", "POST", chatPath, `[1,2]`, nil, 400, "invalid_request"},
		{"wrong field type", "POST", chatPath, `{"stream":"yes"}`, nil, 400, "invalid_request"},
		{"bad key", "POST", chatPath, `{}`, []string{"Idempotency-Key", "has space"}, 400, "invalid_idempotency_key"},
		{"bad quoted key", "POST", chatPath, `{}`, []string{"Idempotency-Key", `"abc`}, 400, "invalid_idempotency_key"},
		{"key too long", "POST", chatPath, `{}`, []string{"Idempotency-Key", strings.Repeat("k", 256)}, 400, "invalid_idempotency_key"},
		{"mismatch", "POST", chatPath, chatBody("other", true), []string{"Idempotency-Key", "k-bad"}, 422, "idempotency_key_mismatch"},
		{"bad cursor on POST", "POST", chatPath, `{}`, []string{"Last-Event-ID", "zzz"}, 400, "invalid_last_event_id"},
		{"bad cursor on GET", "GET", "/v1/streams/k-bad", "", []string{"Last-Event-ID", "1-x-3"}, 400, "invalid_last_event_id"},
		{"cursor from the future", "GET", "/v1/streams/k-bad", "", []string{"Last-Event-ID", "9-1-1"}, 400, "invalid_last_event_id"},
		{"unknown key", "GET", "/v1/streams/nope", "", nil, 404, "key_not_found"},
		{"unknown path", "GET", "/v1/nothing", "", nil, 404, "not_found"},
		{"wrong method", "GET", chatPath, "", nil, 405, "method_not_allowed"},
		{"wrong content type", "POST", chatPath, `{}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"body too large", "POST", chatPath, `{"x":"` + strings.Repeat("a", 33<<20) + `"}`, nil, 413, "request_too_large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			testutil.ExpectAPIError(t, do(t, tc.method, e.URL+tc.path, tc.body, tc.header...), tc.want, tc.code)
		})
	}
	// Nothing was lost: the key still replays completely.
	evs := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-bad", ""), -1)
	if evs[len(evs)-1].Data != "[DONE]" {
		t.Error("the key's stream was damaged by bad requests")
	}
}

// TestEndOfStream204: a cursor at the end of a completed stream gets 204, so
// EventSource stops reconnecting.
func TestEndOfStream204(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), "Idempotency-Key", "k-204"), -1)
	waitState(t, e, "k-204", "completed")
	resp := do(t, "GET", e.URL+"/v1/streams/k-204", "", "Last-Event-ID", lastID(evs))
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("status %d, want 204", resp.StatusCode)
	}
}

// TestNonStreaming: a non-streamed result is stored and replayed; a
// duplicate while it runs waits for it, or gets 409 when the wait is over.
func TestNonStreaming(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAttachWait(150*time.Millisecond))
	prompt := uniquePrompt(t, "[tokens=6]")
	body := chatBody(prompt, false)
	first := readBody(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-json"))
	resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-json")
	if resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("replay lacks Idempotent-Replayed")
	}
	if again := readBody(t, resp); again != first {
		t.Errorf("replay %q, first %q", again, first)
	}
	if !strings.Contains(first, `"object":"chat.completion"`) {
		t.Errorf("not a completion: %s", first)
	}
	if loc := readBody(t, do(t, "GET", e.URL+"/v1/streams/k-json", "")); loc != first {
		t.Errorf("the Location of a non-streamed result serves %q, want %q", loc, first)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 1 {
		t.Errorf("ledger %+v", g)
	}

	slow := chatBody(uniquePrompt(t, "[tokens=40] [delay=20ms]"), false)
	done := make(chan string, 1)
	go func() { done <- readBody(t, do(t, "POST", e.URL+chatPath, slow, "Idempotency-Key", "k-slow")) }()
	waitState(t, e, "k-slow", "in_progress")
	resp = do(t, "POST", e.URL+chatPath, slow, "Idempotency-Key", "k-slow")
	if b := readBody(t, resp); resp.StatusCode != 409 || !strings.Contains(b, "idempotency_key_in_progress") || resp.Header.Get("Retry-After") == "" {
		t.Errorf("duplicate in progress: %d %s", resp.StatusCode, b)
	}
	got := <-done
	if !strings.Contains(got, "chat.completion") {
		t.Fatalf("first slow client got %q", got)
	}
}

// TestHealth: /healthz and /readyz answer 200.
func TestHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, p := range []string{"/healthz", "/readyz"} {
		if resp := do(t, "GET", e.URL+p, ""); resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}

// TestStaleCursorOnNewKey: a Last-Event-ID that cannot belong to a key that
// is only now created is ignored: the client gets the whole stream.
func TestStaleCursorOnNewKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=5]"), true), "Idempotency-Key", "k-stale", "Last-Event-ID", "1-4-4"), -1)
	if len(evs) != 8 || evs[0].ID != "1-1-"+strings.Split(evs[0].ID, "-")[2] {
		t.Fatalf("got %d events starting %q, want the full 8", len(evs), evs[0].ID)
	}
	resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=5]"), true), "Last-Event-ID", "1-2-2")
	if got := readEvents(t, resp, -1); len(got) != 8 {
		t.Fatalf("a request without a key got %d events, want 8", len(got))
	}
}

// TestForgedCursorHint: the journal position inside a Last-Event-ID is only
// a hint; a wrong one costs time, never events.
func TestForgedCursorHint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=10]"), true), "Idempotency-Key", "k-forged"), -1)
	waitState(t, e, "k-forged", "completed")
	for _, cursor := range []string{"1-3-999999", "1-3-1", "1-3-0"} {
		got := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-forged", "", "Last-Event-ID", cursor), -1)
		if len(got) != len(all)-3 || got[0].ID != all[3].ID || got[len(got)-1].Data != "[DONE]" {
			t.Errorf("cursor %s: got %d events from %q, want %d from %q", cursor, len(got), lastID(got[:1]), len(all)-3, all[3].ID)
		}
	}
}

// TestUpstreamIgnoresStream: an upstream that answers a stream request with
// plain JSON is stored and replayed as JSON, not as events.
func TestUpstreamIgnoresStream(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	e := newEnv(t, withUpstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"chat.completion","choices":[]}`))
	})))
	body := chatBody("ignored stream flag", true)
	for i := range 3 {
		resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-nostream")
		got := readBody(t, resp)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || !strings.Contains(got, "chat.completion") {
			t.Fatalf("call %d: %d %s %q", i, resp.StatusCode, resp.Header.Get("Content-Type"), got)
		}
		if i == 0 {
			waitState(t, e, "k-nostream", "completed")
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}

// TestTenantLimitSparesAttach: the per-tenant generation limit refuses new
// generations only; attaching to a running one still works, and a refused
// key ends cleanly for its readers and may generate later.
func TestTenantLimitSparesAttach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.Limits.MaxTenantGenerations = 1 }))
	// 40 tokens at 25 ms take 1 s: room for the other key to be refused
	// while they run, on a loaded machine too.
	slow := chatBody(uniquePrompt(t, "[tokens=40] [delay=25ms]"), true)
	first := readEvents(t, do(t, "POST", e.URL+chatPath, slow, "Idempotency-Key", "k-lim-a"), 2)
	other := chatBody(uniquePrompt(t, "[tokens=3]"), true)
	resp := do(t, "POST", e.URL+chatPath, other, "Idempotency-Key", "k-lim-b")
	if body := readBody(t, resp); resp.StatusCode != 429 || !strings.Contains(body, "too_many_generations") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("second generation: %d %s", resp.StatusCode, body)
	}
	// The refused key's readers end at once with the reason.
	evs := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-lim-b", ""), -1)
	if len(evs) != 1 || evs[0].Type != "error" || !strings.Contains(evs[0].Data, "too_many_generations") {
		t.Fatalf("reader of the refused key got %+v", evs)
	}
	// Attaching to the running generation is not a new generation.
	att := readEvents(t, do(t, "POST", e.URL+chatPath, slow, "Idempotency-Key", "k-lim-a", "Last-Event-ID", lastID(first)), -1)
	if att[len(att)-1].Data != "[DONE]" {
		t.Fatal("attach under the limit did not complete")
	}
	waitState(t, e, "k-lim-a", "completed")
	// With the place free again, the refused key generates.
	evs = readEvents(t, do(t, "POST", e.URL+chatPath, other, "Idempotency-Key", "k-lim-b"), -1)
	if evs[0].Type == "error" || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("the refused key did not generate later: %+v", evs[0])
	}
}

// TestJournalFailure: JetStream refuses a running generation's messages
// (here: the stream's maximum message size drops below them) for longer
// than the journal timeout. The generation fails with journal_failure —
// for its client on the owner, after the events the owner showed before
// they were stored (docs/live-path.md), and for a reader on another
// instance right after the stored ones — the record counts only the
// stored events, the owner client's last cursor resumes elsewhere to the
// same failure, and the key generates afresh once the journal takes
// messages again. The journal timeout is 3 s: short, for the failure to
// come soon, yet above the stalls of a loaded CI machine (1 s was not,
// for the second generation).
func TestJournalFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withNATSPort(), withJournal(func(c *journal.Config) { c.AppendTimeout = 3 * time.Second }))
	b := startInstance(t, "B", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{replicas: 1})
	prompt := uniquePrompt(t, "[tokens=40] [delay=30ms]")
	ctx := waitCtx(t, 30*time.Second)
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	setMaxMsgSize := func(n int32) {
		st, err := js.Stream(ctx, journal.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.MaxMsgSize = n
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		evs []event
		err error
	}
	owner, reader := make(chan result, 1), make(chan result, 1)
	started := make(chan struct{})
	go func() {
		evs, err := fetchEvents(ctx, "POST", e.URL+chatPath, chatBody(prompt, true), 3, func() { close(started) }, "Idempotency-Key", "k-jf")
		owner <- result{evs, err}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the stream did not start")
	}
	go func() {
		evs, err := fetchEvents(ctx, "GET", b.URL+"/v1/streams/k-jf", "", 0, nil)
		reader <- result{evs, err}
	}()
	setMaxMsgSize(16) // no event fits from now on
	got := map[string]result{"owner": <-owner, "reader on B": <-reader}
	setMaxMsgSize(0)
	for who, r := range got {
		if r.err != nil {
			t.Fatalf("%s: %v", who, r.err)
		}
		last := r.evs[len(r.evs)-1]
		if last.Type != "error" || !strings.Contains(last.Data, `"journal_failure"`) {
			t.Fatalf("%s: the stream ended with %+v, want event: error journal_failure", who, last)
		}
		checkUnique(t, r.evs[:len(r.evs)-1])
	}
	own, onB := got["owner"].evs, got["reader on B"].evs
	st := waitState(t, e, "k-jf", "failed")
	stored := len(onB) - 1
	if st.Error != "journal_failure" || st.Events != stored {
		t.Errorf("record %+v: want journal_failure counting the %d stored events B read", st, stored)
	}
	if len(own) < len(onB) {
		t.Fatalf("the owner's client got %d events, B's reader %d: the owner shows at least what is stored", len(own), len(onB))
	}
	for i := range stored { // what is stored, both saw alike, ids included
		if own[i] != onB[i] {
			t.Fatalf("event %d: the owner's client got %+v, B's reader %+v", i+1, own[i], onB[i])
		}
	}
	if len(own) > len(onB) {
		// The owner's client saw events that were never stored; its last
		// cursor resumes on B to the generation's failure (not stored
		// either here: the journal takes no message at all).
		resumed := readEvents(t, do(t, "GET", b.URL+"/v1/streams/k-jf", "", "Last-Event-ID", own[len(own)-2].ID), -1)
		if fail := onB[len(onB)-1]; len(resumed) != 1 || resumed[0].Type != fail.Type || resumed[0].Data != fail.Data {
			t.Errorf("resuming on B after the owner's last shown event %s: %+v; want only the error %+v", own[len(own)-2].ID, resumed, fail)
		}
	}
	t.Logf("the generation failed after %d stored events; the owner's client saw %d before the error", stored, len(own)-1)
	again := readAll(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-jf"))
	checkStream(t, e.LLM, prompt, again, 2)
}
