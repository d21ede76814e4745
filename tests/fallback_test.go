package tests

import (
	"context"
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

// The non-streamed fallback: a client whose stream broke sends the same
// request again without "stream" (Claude Code does). That keyless request
// is the stream's retry: it is answered the format's non-streamed answer
// assembled from the journal, parsed here by the format's official SDK,
// and the upstream generates once.

// leaveStream reads a streamed SDK call until n events arrived, then
// cancels it: its client leaves before the result.
func leaveStream(t *testing.T, next func(context.Context) func() bool, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(waitCtx(t, 20*time.Second))
	defer cancel()
	more := next(ctx)
	for i := 0; i < n && more(); i++ {
	}
}

func TestFallbackChat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-fallback"), option.WithMaxRetries(0))
	prompt := uniquePrompt(t, "[tokens=30] [delay=20ms]")
	params := openai.ChatCompletionNewParams{Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	leaveStream(t, func(ctx context.Context) func() bool { return client.Chat.Completions.NewStreaming(ctx, params).Next }, 3)
	waitLeft(t, e.URL, 1)

	res, err := client.Chat.Completions.New(waitCtx(t, 30*time.Second), params)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(mockllm.Content(prompt, 30, false), "")
	if len(res.Choices) != 1 || res.Choices[0].Message.Content != want || res.Choices[0].FinishReason != "stop" || res.Object != "chat.completion" {
		t.Errorf("the fallback's answer %+v, want %q ending stop", res, want)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
	if got := metric(t, e, "reprise_requests_total", "retry"); got != 1 {
		t.Errorf("reprise_requests_total{decision=retry} = %v, want 1", got)
	}
	// The fallback received the result: the same request again is new.
	if _, err := client.Chat.Completions.New(waitCtx(t, 30*time.Second), params); err != nil {
		t.Fatal(err)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("after a regenerate: ledger %+v, want 2 generations", g)
	}
}

func TestFallbackMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := anthropic.NewClient(aoption.WithBaseURL(e.URL), aoption.WithAPIKey("sk-ant-fallback"), aoption.WithMaxRetries(0))
	prompt := uniquePrompt(t, "[tokens=30] [delay=20ms]")
	params := anthropic.MessageNewParams{
		Model: "mock-1", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	}
	leaveStream(t, func(ctx context.Context) func() bool { return client.Messages.NewStreaming(ctx, params).Next }, 4)
	waitLeft(t, e.URL, 1)

	msg, err := client.Messages.New(waitCtx(t, 30*time.Second), params)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(mockllm.Content(prompt, 30, false), "")
	if len(msg.Content) != 1 || msg.Content[0].Text != want || msg.StopReason != "end_turn" || msg.Usage.OutputTokens != 30 {
		t.Errorf("the fallback's answer %+v, want %q ending end_turn with 30 output tokens", msg, want)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
}

func TestFallbackResponses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-fallback"), option.WithMaxRetries(0))
	prompt := uniquePrompt(t, "[tokens=30] [delay=20ms]")
	params := responses.ResponseNewParams{Model: "mock-1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}}
	leaveStream(t, func(ctx context.Context) func() bool { return client.Responses.NewStreaming(ctx, params).Next }, 4)
	waitLeft(t, e.URL, 1)

	res, err := client.Responses.New(waitCtx(t, 30*time.Second), params)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(mockllm.Content(prompt, 30, false), ""); res.OutputText() != want || res.Status != "completed" {
		t.Errorf("the fallback's answer %q (%s), want %q completed", res.OutputText(), res.Status, want)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
}

// TestFallbackOfFailedStream: a stream that broke upstream left no result:
// its non-streamed fallback is a new request, and generates.
func TestFallbackOfFailedStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-fallback"), option.WithMaxRetries(0))
	prompt := uniquePrompt(t, "[tokens=30] [delay=20ms] [abort_after=15]")
	params := openai.ChatCompletionNewParams{Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	leaveStream(t, func(ctx context.Context) func() bool { return client.Chat.Completions.NewStreaming(ctx, params).Next }, 2)
	waitLeft(t, e.URL, 1)
	testutil.Settled(t, e.LLM.Ledger(), prompt, 1)

	_, _ = client.Chat.Completions.New(waitCtx(t, 30*time.Second), params) // the fake breaks this one too
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("ledger %+v, want 2 generations: the failed stream had nothing to give", g)
	}
}

// TestFallbackTokenLimit: a fallback may ask for fewer output tokens than
// the stream it retries (Claude Code halves max_tokens): the stream's
// answer serves it when it is no longer than that; a longer one is not
// its answer, and it generates.
func TestFallbackTokenLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := func(prompt string, stream bool, limit int) string {
		return `{"model":"mock-1","max_tokens":` + itoa(limit) + `,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
			`,"messages":[{"role":"user","content":` + quote(prompt) + `}]}`
	}
	for i, c := range []struct {
		limit, want int
	}{{64, 1}, {10, 2}} {
		prompt := uniquePrompt(t, "[tokens=30] [delay=5ms] [case="+itoa(c.limit)+"]")
		readEvents(t, do(t, "POST", e.URL+chatPath, body(prompt, true, 256)), 3)
		waitLeft(t, e.URL, float64(i+1))
		testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
		resp := do(t, "POST", e.URL+chatPath, body(prompt, false, c.limit))
		if b := readBody(t, resp); resp.StatusCode != 200 || !strings.Contains(b, `"chat.completion"`) {
			t.Fatalf("max_tokens %d: %d %s", c.limit, resp.StatusCode, b)
		}
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, c.want); g.Generations != c.want {
			t.Errorf("max_tokens %d against a 30-token answer: ledger %+v, want %d generation(s)", c.limit, g, c.want)
		}
	}
}
