package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestOpenAISDK: the official SDK streams through reprise via its base URL,
// and a second call with the same key is a replay, not a second generation.
func TestOpenAISDK(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	prompt := uniquePrompt(t, "[tokens=15]")
	params := openai.ChatCompletionNewParams{
		Model:    "mock-1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}
	want := strings.Join(mockllm.Content(prompt, 15, false), "")
	// Asking for the usage (as OpenAI wants it asked) gets the usage chunk,
	// replays too.
	streamed := params
	streamed.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	for i := range 2 {
		ctx := waitCtx(t, 20*time.Second)
		s := client.Chat.Completions.NewStreaming(ctx, streamed, option.WithHeader("Idempotency-Key", "k-sdk"))
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := acc.Choices[0].Message.Content; got != want {
			t.Fatalf("call %d: content %q, want %q", i, got, want)
		}
		if acc.Usage.CompletionTokens != 15 {
			t.Errorf("call %d: usage %+v", i, acc.Usage)
		}
	}
	res, err := client.Chat.Completions.New(waitCtx(t, 20*time.Second), params, option.WithHeader("Idempotency-Key", "k-sdk-json"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Choices[0].Message.Content != want {
		t.Errorf("non-streamed content %q", res.Choices[0].Message.Content)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("ledger %+v, want 2 generations (one per key)", g)
	}
}
