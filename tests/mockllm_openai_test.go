package tests

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// TestMockLLMOpenAIClientCompat checks that the official openai-go client
// accepts the fake model's wire format, streamed and not.
func TestMockLLMOpenAIClientCompat(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	fake := mockllm.New(mockllm.Config{Readable: true})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	const prompt = "compat [tokens=12]"
	want := strings.Join(mockllm.Content(prompt, 12, true), "")
	params := openai.ChatCompletionNewParams{
		Model:         "mock-1",
		Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	}

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if len(acc.Choices) != 1 || acc.Choices[0].Message.Content != want || acc.Choices[0].FinishReason != "stop" || acc.Usage.CompletionTokens != 12 {
		t.Errorf("accumulated = %+v, want content %q", acc.ChatCompletion, want)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{}
	completion, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatalf("non-stream: %v", err)
	}
	if completion.Choices[0].Message.Content != want || completion.Usage.TotalTokens != completion.Usage.PromptTokens+12 {
		t.Errorf("completion = %+v", completion)
	}
	if err := fake.Ledger().Wait(ctx, prompt, 2); err != nil {
		t.Fatal(err)
	}
	if got := fake.Ledger().Get(prompt); got != (mockllm.Entry{Requests: 2, Generations: 2, Completed: 2, Tokens: 24}) {
		t.Errorf("ledger = %+v", got)
	}
}
