package tests

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// checkSaved checks that key's status and e's metrics count want, the
// requests served without a generation, each saving gen (the fake model's
// one generation of the key) at the test prices: saved.by and
// saved.duplicates, saved.usage and saved.cost; the saved generations,
// tokens and cost series. It waits for them, bounded: a resume is counted
// a moment after it is served, and what was served from a running
// generation once it ended.
func checkSaved(t *testing.T, e *env, key string, gen mockllm.Generation, want testutil.SavedBy) {
	t.Helper()
	n := int64(want.Attach + want.Replay + want.Resume + want.Retry)
	in, out := int64(gen.PromptTokens), int64(gen.Tokens)
	usage := testutil.Usage{PromptTokens: n * in, CompletionTokens: n * out, TotalTokens: n * (in + out)}
	price := float64(in)*costPrompt + float64(out)*costCompletion
	series := map[string]float64{
		"reprise_generations_saved_total{attach}": float64(want.Attach), "reprise_generations_saved_total{replay}": float64(want.Replay),
		"reprise_generations_saved_total{resume}": float64(want.Resume), "reprise_generations_saved_total{retry}": float64(want.Retry),
		"reprise_tokens_saved_total{prompt}": float64(usage.PromptTokens), "reprise_tokens_saved_total{completion}": float64(usage.CompletionTokens),
		"reprise_cost_saved_total{mock-*}": float64(n) * price,
	}
	var st keyStatus
	counted := func() bool {
		st, _ = getStatus(t, e, key)
		if st.Saved == nil || st.Saved.By != want {
			return false
		}
		for name, v := range series {
			fam, label, _ := strings.Cut(strings.TrimSuffix(name, "}"), "{")
			if metric(t, e, fam, label) != v {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(10 * time.Second)
	for !counted() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling the server's counts; bounded above
	}
	if s := st.Saved; s == nil || s.By != want || int64(s.Duplicates) != n || s.Usage == nil || *s.Usage != usage || s.Cost == nil || *s.Cost != float64(n)*price {
		t.Errorf("saved %+v, want by %+v: %d requests saving %+v at %v", s, want, n, usage, float64(n)*price)
	}
	for name, v := range series {
		fam, label, _ := strings.Cut(strings.TrimSuffix(name, "}"), "{")
		if got := metric(t, e, fam, label); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

// TestSavedByKind: scripted traffic on one key — a start dropped after 3
// events, an attach while it runs, a GET resume of the Location after the
// drop, a POST resume with Last-Event-ID, a WebSocket resume and a replay
// once it completed — makes one generation, and the status and metrics
// count exactly one attach, one replay and three resumes, each saving the
// ledger's generation. A reader of the Location without a cursor, a
// cursor at the end of the completed stream (204) and status polls are
// not counted.
func TestSavedByKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	prompt := uniquePrompt(t, "[tokens=30] [delay=20ms]")
	body := chatBody(prompt, true)
	const key = "k-saved-kinds"
	first := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key), 3) // dropped
	attached := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
	if attached.Header.Get("Reprise-Attached") != "true" {
		t.Fatal("the generation completed before the attach: slow the fake down")
	}
	resumed := readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", lastID(first)), -1)
	posted := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key, "Last-Event-ID", first[1].ID), -1)
	all := readEvents(t, attached, -1)
	waitState(t, e, key, "completed")

	conn, resp, err := websocket.DefaultDialer.DialContext(waitCtx(t, 10*time.Second),
		"ws"+strings.TrimPrefix(e.URL, "http")+"/v1/streams/"+key+"?last_event_id="+url.QueryEscape(lastID(first)), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	frames := 0
	for ; ; frames++ {
		if _, _, err := conn.ReadMessage(); err != nil {
			break
		}
	}
	conn.Close()
	replayed := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
	if replayed.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("the duplicate of the completed key was not replayed")
	}
	readEvents(t, replayed, -1)

	// Not counted: a reader from the start, a cursor at the end, a poll.
	readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, ""), -1)
	if r := do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", lastID(all)); r.StatusCode != http.StatusNoContent {
		t.Errorf("a cursor at the end: status %d, want 204", r.StatusCode)
	} else {
		r.Body.Close()
	}
	getStatus(t, e, key)

	if n := len(all); len(resumed) != n-3 || len(posted) != n-2 || frames != n-3 || lastEvent(t, all).Data != "[DONE]" {
		t.Fatalf("%d events for the attach, %d for the GET resume, %d for the POST one, %d frames: want %d, %d, %d, %d",
			n, len(resumed), len(posted), frames, n, n-3, n-2, n-3)
	}
	gens := e.LLM.Ledger().Generations(prompt)
	if led := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); led.Generations != 1 || len(gens) != 1 {
		t.Fatalf("ledger %+v, want one generation", led)
	}
	checkBilledOnce(t, e, key, gens[0], "")
	checkSaved(t, e, key, gens[0], testutil.SavedBy{Attach: 1, Replay: 1, Resume: 3})
	// Duplicates by key, counted as they came: the attach, the replay and
	// the POST resume (an attach or a replay by when it came).
	if got := metric(t, e, "reprise_duplicates_suppressed_total", "attach") + metric(t, e, "reprise_duplicates_suppressed_total", "replay"); got != 3 {
		t.Errorf("reprise_duplicates_suppressed_total{attach,replay} = %v, want 3", got)
	}
}

// TestSavedNothingOfFailed: an attach and a resume of a generation that
// then fails saved nothing (their clients got no result): the key's status
// has no saving and the saved series stay at 0.
func TestSavedNothingOfFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	prompt := uniquePrompt(t, "[tokens=40] [delay=20ms] [abort_after=20]")
	body := chatBody(prompt, true)
	const key = "k-saved-failed"
	first := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key), 3)
	attached := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
	if attached.Header.Get("Reprise-Attached") != "true" {
		t.Fatal("the generation ended before the attach: slow the fake down")
	}
	resumed := readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", lastID(first)), -1)
	readEvents(t, attached, -1)
	st := waitState(t, e, key, "failed")
	if len(resumed) == 0 || lastEvent(t, resumed).Type != "error" {
		t.Fatalf("the resume got %d events, not ending with the error", len(resumed))
	}
	testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	testutil.Eventually(t, 10*time.Second, "the failed generation to be billed", func() bool {
		return metric(t, e, "reprise_tokens_total", "completion") > 0
	})
	st, _ = getStatus(t, e, key)
	if st.Saved != nil && st.Saved.Duplicates != 0 {
		t.Errorf("saved %+v, want nothing saved by the readers of a failed generation", st.Saved)
	}
	for _, how := range []string{"attach", "replay", "resume", "retry"} {
		if got := metric(t, e, "reprise_generations_saved_total", how); got != 0 {
			t.Errorf("reprise_generations_saved_total{%s} = %v, want 0", how, got)
		}
	}
	if got := metric(t, e, "reprise_cost_saved_total", "mock-*"); got != 0 {
		t.Errorf("reprise_cost_saved_total = %v, want 0", got)
	}
}

// The estimate of a failed or cancelled generation's usage against the
// fake model's ledger (docs/cost.md): the completion is its content
// events, within estimateSlack of the tokens the fake wrote (one may be
// in flight when the stream breaks, more when a cancel stops the read);
// the prompt is its text's bytes / 4, at least the fake's count (a word
// each) and at most promptOver times it: real tokenizers count ~1.3 per
// English word and more for the numbers and identifiers the tests' prompts
// start with.
const (
	estimateSlack = 1
	cancelSlack   = 3
	promptOver    = 3
)

// checkEstimated checks that key's status shows a usage estimated from
// gen, the ledger's generation (completion within slack below its tokens;
// the prompt exact when reported, else within promptOver), billed and
// priced as such, and counted in the tokens series, the estimated ones
// too.
func checkEstimated(t *testing.T, e *env, key string, gen mockllm.Generation, slack int64, promptReported bool) {
	t.Helper()
	var st keyStatus
	testutil.Eventually(t, 10*time.Second, "the generation's usage to be billed", func() bool {
		st, _ = getStatus(t, e, key)
		return st.Usage != nil && metric(t, e, "reprise_tokens_total", "prompt") > 0
	})
	u, ledgerIn, ledgerOut := *st.Usage, int64(gen.PromptTokens), int64(gen.Tokens)
	if st.UsageBasis != "estimated" {
		t.Errorf("usage_basis %q, want estimated", st.UsageBasis)
	}
	if u.CompletionTokens > ledgerOut || u.CompletionTokens < ledgerOut-slack {
		t.Errorf("completion_tokens %d, want the ledger's %d (at most %d fewer)", u.CompletionTokens, ledgerOut, slack)
	}
	if promptReported && u.PromptTokens != ledgerIn || !promptReported && (u.PromptTokens < ledgerIn || u.PromptTokens > promptOver*ledgerIn) {
		t.Errorf("prompt_tokens %d, want the ledger's %d (reported %v, else within ×%d)", u.PromptTokens, ledgerIn, promptReported, promptOver)
	}
	if u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("total_tokens %d, want %d", u.TotalTokens, u.PromptTokens+u.CompletionTokens)
	}
	price := float64(u.PromptTokens)*costPrompt + float64(u.CompletionTokens)*costCompletion
	if st.Cost == nil || *st.Cost != price {
		t.Errorf("cost %v, want the estimate's %v", st.Cost, price)
	}
	if b := st.Billed; b == nil || b.Usage != u || b.UsageBasis != "estimated" || b.Generations != 1 || b.Cost == nil || *b.Cost != price {
		t.Errorf("billed %+v, want the estimate %+v at %v", b, u, price)
	}
	for _, c := range []struct {
		name, label string
		want        int64
	}{
		{"reprise_tokens_total", "prompt", u.PromptTokens}, {"reprise_tokens_total", "completion", u.CompletionTokens},
		{"reprise_tokens_estimated_total", "prompt", u.PromptTokens}, {"reprise_tokens_estimated_total", "completion", u.CompletionTokens},
	} {
		if got := metric(t, e, c.name, c.label); got != float64(c.want) {
			t.Errorf("%s{%s} = %v, want %d", c.name, c.label, got, c.want)
		}
	}
}

// TestUsageEstimated: a stream the upstream breaks in the middle, in each
// text format, is failed with its usage estimated (the Messages prompt as
// reported by message_start), never absent or 0, and billed so.
func TestUsageEstimated(t *testing.T) {
	t.Parallel()
	const directives = "please write a short story about a lighthouse keeper and the sea [tokens=40] [abort_after=15]"
	for _, tt := range []struct {
		name, path     string
		body           func(prompt string) string
		promptReported bool
	}{
		{"chat", chatPath, func(p string) string { return chatBody(p, true) }, false},
		{"responses", responsesPath, func(p string) string { return responsesBody(p, true) }, false},
		{"messages", messagesPath, func(p string) string {
			return `{"model":"mock-1","max_tokens":100,"stream":true,"messages":[{"role":"user","content":` + quote(p) + `}]}`
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withPrices(t))
			prompt := uniquePrompt(t, directives)
			key := "k-estimated-" + tt.name
			evs := readEvents(t, do(t, "POST", e.URL+tt.path, tt.body(prompt), "Idempotency-Key", key), -1)
			if len(evs) == 0 || lastEvent(t, evs).Type != "error" {
				t.Fatalf("%d events, not ending with the error event", len(evs))
			}
			waitState(t, e, key, "failed")
			testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
			gen := e.LLM.Ledger().Generations(prompt)[0]
			if gen.Completed || gen.Tokens == 0 {
				t.Fatalf("ledger %+v, want a generation cut after some tokens", gen)
			}
			checkEstimated(t, e, key, gen, estimateSlack, tt.promptReported)
		})
	}
}

// TestUsageBeforeAnyToken: a stream the upstream breaks before its first
// token read the prompt: its usage is estimated, 0 completion tokens; a
// generation the upstream refused (a 400: no stream, nothing billed) has
// no usage, usage_basis unknown, and bills nothing.
func TestUsageBeforeAnyToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	prompt := uniquePrompt(t, "a prompt the upstream reads before it breaks [tokens=10] [abort_after=1]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-before-token"), -1)
	waitState(t, e, "k-before-token", "failed")
	testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	gen := e.LLM.Ledger().Generations(prompt)[0]
	if gen.Tokens != 0 {
		t.Fatalf("ledger %+v, want a generation cut before its first token", gen)
	}
	checkEstimated(t, e, "k-before-token", gen, 0, false)

	refused := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[status=400]"), true), "Idempotency-Key", "k-refused")
	readBody(t, refused)
	st := waitState(t, e, "k-refused", "failed")
	if st.Usage != nil || st.UsageBasis != "unknown" || st.Billed != nil || st.Cost != nil {
		t.Errorf("refused: usage %+v (%q) billed %+v cost %v, want no usage, unknown, nothing billed", st.Usage, st.UsageBasis, st.Billed, st.Cost)
	}
}

// TestUsageCancelled: a generation a client cancels after some tokens is
// cancelled with its usage estimated from what it had streamed.
func TestUsageCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	prompt := uniquePrompt(t, "count slowly and carefully to two thousand, one number at a time [tokens=2000] [delay=10ms]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-usage-cancel")
	loc := resp.Header.Get("Location")
	readEvents(t, resp, 6)
	u, err := url.Parse(e.URL + loc)
	if err != nil {
		t.Fatal(err)
	}
	u.Path += "/cancel"
	readBody(t, do(t, "POST", u.String(), ""))
	waitState(t, e, "k-usage-cancel", "cancelled")
	testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	gen := e.LLM.Ledger().Generations(prompt)[0]
	if gen.Completed || gen.Tokens < 5 {
		t.Fatalf("ledger %+v, want a generation stopped after some tokens", gen)
	}
	checkEstimated(t, e, "k-usage-cancel", gen, cancelSlack, false)
}
