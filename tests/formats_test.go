package tests

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// The Responses and Messages formats through reprise, with the official
// SDKs as clients: journaled, dropped and resumed, replayed, billed once.

const (
	responsesPath = "/v1/responses"
	messagesPath  = "/v1/messages"
)

func responsesBody(prompt string, stream bool) string {
	s := "false"
	if stream {
		s = "true"
	}
	return `{"model":"mock-1","stream":` + s + `,"input":` + quote(prompt) + `}`
}

func quote(s string) string { return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"` }

// TestResponsesSDK: openai-go's Responses client streams through reprise;
// the same key again is a replay; the events keep their names and the
// stream ends with response.completed; the usage is recorded.
func TestResponsesSDK(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	prompt := uniquePrompt(t, "[tokens=12]")
	want := strings.Join(mockllm.Content(prompt, 12, false), "")
	params := responses.ResponseNewParams{Model: "mock-1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}}
	for i := range 2 {
		s := client.Responses.NewStreaming(waitCtx(t, 20*time.Second), params, option.WithHeader("Idempotency-Key", "k-responses-sdk"))
		var text strings.Builder
		var last string
		for s.Next() {
			ev := s.Current()
			if ev.Type == "response.output_text.delta" {
				text.WriteString(ev.Delta)
			}
			last = ev.Type
		}
		if err := s.Err(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if text.String() != want || last != "response.completed" {
			t.Fatalf("call %d: text %q ending %s, want %q ending response.completed", i, text.String(), last, want)
		}
	}
	if g := e.LLM.Ledger().Get(prompt); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
	st := testutil.WaitState(t, e.URL, "k-responses-sdk", "completed", "Authorization", "Bearer sk-test")
	if st.Usage == nil || st.Usage.CompletionTokens != 12 {
		t.Errorf("usage %+v, want 12 completion tokens", st.Usage)
	}
	res, err := client.Responses.New(waitCtx(t, 20*time.Second), params, option.WithHeader("Idempotency-Key", "k-responses-json"))
	if err != nil {
		t.Fatal(err)
	}
	if res.OutputText() != want {
		t.Errorf("non-streamed text %q, want %q", res.OutputText(), want)
	}
}

// TestResponsesResume: a Responses stream dropped after k events resumes by
// the Location with Last-Event-ID: the missed named events, then the rest,
// byte-exact and once.
func TestResponsesResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokenDelay(5*time.Millisecond))
	prompt := uniquePrompt(t, "[tokens=20]")
	resp := do(t, "POST", e.URL+responsesPath, responsesBody(prompt, true), "Idempotency-Key", "k-responses-resume")
	head := readEvents(t, resp, 7)
	loc := resp.Header.Get("Location")
	rest := readEvents(t, do(t, "GET", e.URL+loc, "", "Last-Event-ID", lastID(head)), -1)
	all := append(head, rest...)
	checkUnique(t, all)
	var text strings.Builder
	for _, ev := range all {
		if ev.Type == "" {
			t.Fatalf("event %s lost its name: %q", ev.ID, ev.Data)
		}
		if ev.Type == "response.output_text.delta" {
			text.WriteString(deltaOf(t, ev.Data))
		}
	}
	if want := strings.Join(mockllm.Content(prompt, 20, false), ""); text.String() != want {
		t.Errorf("text %q, want %q", text.String(), want)
	}
	if last := lastEvent(t, all); last.Type != "response.completed" {
		t.Errorf("last event %s", last.Type)
	}
	if g := e.LLM.Ledger().Get(prompt); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
}

// TestResponsesErrorEvent: an upstream error event mid-stream is no
// result: the readers get event: error, the key fails, the same key
// generates afresh.
func TestResponsesErrorEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=10] [error_after=6]")
	for try := 1; try <= 2; try++ {
		evs := readEvents(t, do(t, "POST", e.URL+responsesPath, responsesBody(prompt, true), "Idempotency-Key", "k-responses-error"), -1)
		last := lastEvent(t, evs)
		if last.Type != "error" || len(evs) != 7 {
			t.Fatalf("try %d: %d events ending %+v, want 6 then event: error", try, len(evs), last)
		}
		if code := testutil.ParseAPIError(t, last.Data).Code; code != "server_error" {
			t.Errorf("try %d: code %q, want the upstream's server_error", try, code)
		}
		if st := waitState(t, e, "k-responses-error", "failed"); st.Generation != try {
			t.Errorf("try %d: generation %d", try, st.Generation)
		}
	}
}

// TestMessagesSDK: anthropic-sdk-go streams through reprise with its
// x-api-key; the same key again is a replay; non-streamed too; the usage
// (input tokens from message_start, output from message_delta) is
// recorded.
func TestMessagesSDK(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := anthropic.NewClient(aoption.WithBaseURL(e.URL), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0))
	prompt := uniquePrompt(t, "[tokens=9]")
	want := strings.Join(mockllm.Content(prompt, 9, false), "")
	params := anthropic.MessageNewParams{
		Model: "mock-1", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	}
	for i := range 2 {
		s := client.Messages.NewStreaming(waitCtx(t, 20*time.Second), params, aoption.WithHeader("Idempotency-Key", "k-messages-sdk"))
		var msg anthropic.Message
		for s.Next() {
			if err := msg.Accumulate(s.Current()); err != nil {
				t.Fatalf("call %d: accumulate: %v", i, err)
			}
		}
		if err := s.Err(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if len(msg.Content) != 1 || msg.Content[0].Text != want || msg.StopReason != "end_turn" {
			t.Fatalf("call %d: %+v, want %q ending end_turn", i, msg.Content, want)
		}
	}
	if g := e.LLM.Ledger().Get(prompt); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
	words := int64(len(strings.Fields(prompt)))
	st := testutil.WaitState(t, e.URL, "k-messages-sdk", "completed", "X-Api-Key", "sk-ant-test")
	if st.Usage == nil || st.Usage.PromptTokens != words || st.Usage.CompletionTokens != 9 || st.Usage.TotalTokens != words+9 {
		t.Errorf("usage %+v, want %d + 9", st.Usage, words)
	}
	msg, err := client.Messages.New(waitCtx(t, 20*time.Second), params, aoption.WithHeader("Idempotency-Key", "k-messages-json"))
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != want {
		t.Errorf("non-streamed text %q", msg.Content[0].Text)
	}
}

// TestMessagesErrors: what reprise answers a /v1/messages caller is in
// Anthropic's shape, which the SDK parses; an overloaded_error event
// mid-stream is no result, reaches the SDK as an error, and the key
// generates afresh.
func TestMessagesErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := do(t, "POST", e.URL+messagesPath, `{"model":`, "Idempotency-Key", "k-messages-bad")
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, `"type":"invalid_request_error"`) {
		t.Errorf("bad JSON: %d %s, want 400 in Anthropic's shape", resp.StatusCode, body)
	}
	client := anthropic.NewClient(aoption.WithBaseURL(e.URL), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0))
	_, err := client.Messages.New(waitCtx(t, 20*time.Second), anthropic.MessageNewParams{Model: "mock-1", MaxTokens: 1,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}}, aoption.WithHeader("Idempotency-Key", strings.Repeat("k", 300)))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(apiErr.RawJSON(), "invalid_idempotency_key") {
		t.Errorf("invalid key through the SDK: %v", err)
	}

	prompt := uniquePrompt(t, "[tokens=8] [error_after=5]")
	params := anthropic.MessageNewParams{Model: "mock-1", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}}
	for try := 1; try <= 2; try++ {
		s := client.Messages.NewStreaming(waitCtx(t, 20*time.Second), params, aoption.WithHeader("Idempotency-Key", "k-messages-overloaded"))
		for s.Next() {
		}
		if err := s.Err(); err == nil || !strings.Contains(err.Error(), "overloaded") {
			t.Errorf("try %d: stream error %v, want the upstream's overloaded_error", try, err)
		}
		if st := testutil.WaitState(t, e.URL, "k-messages-overloaded", "failed", "X-Api-Key", "sk-ant-test"); st.Error != "overloaded_error" || st.Generation != try {
			t.Errorf("try %d: status %+v", try, st)
		}
	}
	if g := e.LLM.Ledger().Get(prompt); g.Generations != 2 {
		t.Errorf("ledger %+v, want 2 generations (a failed key generates afresh)", g)
	}
}

// deltaOf is a Responses text delta event's text.
func deltaOf(tb testing.TB, data string) string {
	tb.Helper()
	var v struct {
		Delta string `json:"delta"`
	}
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		tb.Fatalf("delta %q: %v", data, err)
	}
	return v.Delta
}

// TestMessagesResume: a Messages stream dropped after k events resumes by
// the Location with Last-Event-ID — named events, byte-exact text, one
// generation — and a replay by POST is the same stream.
func TestMessagesResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokenDelay(5*time.Millisecond))
	prompt := uniquePrompt(t, "[tokens=20]")
	body := `{"model":"mock-1","max_tokens":256,"stream":true,"messages":[{"role":"user","content":` + quote(prompt) + `}]}`
	resp := do(t, "POST", e.URL+messagesPath, body, "Idempotency-Key", "k-messages-resume")
	head := readEvents(t, resp, 6)
	rest := readEvents(t, do(t, "GET", e.URL+resp.Header.Get("Location"), "", "Last-Event-ID", lastID(head)), -1)
	all := append(head, rest...)
	checkUnique(t, all)
	var text strings.Builder
	for _, ev := range all {
		if ev.Type == "content_block_delta" {
			var v struct {
				Delta struct{ Text string } `json:"delta"`
			}
			if err := json.Unmarshal([]byte(ev.Data), &v); err != nil {
				t.Fatal(err)
			}
			text.WriteString(v.Delta.Text)
		}
	}
	if want := strings.Join(mockllm.Content(prompt, 20, false), ""); text.String() != want {
		t.Errorf("text %q, want %q", text.String(), want)
	}
	if last := lastEvent(t, all); last.Type != "message_stop" {
		t.Errorf("last event %s, want message_stop", last.Type)
	}
	replay := readEvents(t, do(t, "POST", e.URL+messagesPath, body, "Idempotency-Key", "k-messages-resume"), -1)
	if len(replay) != len(all) || replay[len(replay)-1].ID != all[len(all)-1].ID {
		t.Errorf("the replay has %d events ending %s, want %d ending %s", len(replay), lastEvent(t, replay).ID, len(all), lastEvent(t, all).ID)
	}
	if g := e.LLM.Ledger().Get(prompt); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
}
