package mockllm_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// testTimeout bounds every test; nothing should get close to it.
const testTimeout = 5 * time.Second

func newFake(tb testing.TB, cfg mockllm.Config) (*mockllm.Server, *httptest.Server) {
	tb.Helper()
	fake := mockllm.New(cfg)
	srv := httptest.NewServer(fake)
	tb.Cleanup(srv.Close)
	return fake, srv
}

func testContext(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), testTimeout)
	tb.Cleanup(cancel)
	return ctx
}

func chatBody(prompt string, stream bool) map[string]any {
	return map[string]any{
		"model":          "test-model",
		"stream":         stream,
		"stream_options": map[string]any{"include_usage": true},
		"messages": []map[string]any{
			{"role": "system", "content": "ignored system prompt"},
			{"role": "user", "content": prompt},
		},
	}
}

// post sends body as JSON; the caller closes the response body.
func post(tb testing.TB, ctx context.Context, url string, body any) (*http.Response, error) {
	tb.Helper()
	var buf []byte
	switch b := body.(type) {
	case string:
		buf = []byte(b)
	default:
		var err error
		if buf, err = json.Marshal(b); err != nil {
			tb.Fatalf("marshal body: %v", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(buf))
	if err != nil {
		tb.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// mustPost is post that fails the test on transport errors.
func mustPost(tb testing.TB, ctx context.Context, url string, body any) *http.Response {
	tb.Helper()
	resp, err := post(tb, ctx, url, body)
	if err != nil {
		tb.Fatalf("POST %s: %v", url, err)
	}
	tb.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// readEvents returns the data of every SSE event and the read error (nil on
// a clean end of stream).
func readEvents(r io.Reader) ([]string, error) {
	var data []string
	for ev, err := range sse.Read(r, nil) {
		if err != nil {
			return data, err
		}
		data = append(data, ev.Data)
	}
	return data, nil
}

// wire shape of a chat chunk as a client sees it.
type chunk struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role    string  `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

func decodeChunk(tb testing.TB, data string) chunk {
	tb.Helper()
	var c chunk
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		tb.Fatalf("decode chunk %q: %v", data, err)
	}
	return c
}

// checkChatStream asserts the full chunk sequence for want content tokens.
func checkChatStream(tb testing.TB, events []string, model string, want []string) {
	tb.Helper()
	if got, exp := len(events), len(want)+4; got != exp {
		tb.Fatalf("got %d events, want %d: %q", got, exp, events)
	}
	first := decodeChunk(tb, events[0])
	if !strings.HasPrefix(first.ID, "chatcmpl-") || first.Object != "chat.completion.chunk" || first.Model != model || first.Created == 0 {
		tb.Errorf("bad first chunk header: %+v", first)
	}
	if !strings.Contains(events[0], `"finish_reason":null`) || len(first.Choices) != 1 ||
		first.Choices[0].Delta.Role != "assistant" || first.Choices[0].Delta.Content == nil || *first.Choices[0].Delta.Content != "" {
		tb.Errorf("bad role chunk: %s", events[0])
	}
	for i, tok := range want {
		c := decodeChunk(tb, events[1+i])
		if c.ID != first.ID || len(c.Choices) != 1 || c.Choices[0].Delta.Content == nil || *c.Choices[0].Delta.Content != tok || c.Choices[0].FinishReason != nil {
			tb.Errorf("content chunk %d = %s, want token %q", i, events[1+i], tok)
		}
	}
	stopData := events[len(want)+1]
	stop := decodeChunk(tb, stopData)
	if !strings.Contains(stopData, `"delta":{}`) || len(stop.Choices) != 1 || stop.Choices[0].FinishReason == nil || *stop.Choices[0].FinishReason != "stop" {
		tb.Errorf("bad stop chunk: %s", stopData)
	}
	usageData := events[len(want)+2]
	usage := decodeChunk(tb, usageData)
	if !strings.Contains(usageData, `"choices":[]`) || usage.Usage == nil || usage.Usage.CompletionTokens != len(want) ||
		usage.Usage.TotalTokens != usage.Usage.PromptTokens+len(want) || usage.Usage.PromptTokens < 1 {
		tb.Errorf("bad usage chunk: %s", usageData)
	}
	if last := events[len(events)-1]; last != "[DONE]" {
		tb.Errorf("last event = %q, want [DONE]", last)
	}
}

// TestChatStreamUsageAsked: like OpenAI, a stream ends with its usage chunk
// only when stream_options.include_usage asks for it; the ledger books the
// prompt tokens the usage reports either way.
func TestChatStreamUsageAsked(t *testing.T) {
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{})
	const prompt = "three word prompt [tokens=2]"
	body := chatBody(prompt, true)
	delete(body, "stream_options")
	resp := mustPost(t, ctx, srv.URL+mockllm.ChatPath, body)
	events, err := readEvents(resp.Body)
	if err != nil {
		t.Fatalf("read stream: %v", err)
	}
	if len(events) != 2+3 || strings.Contains(strings.Join(events, "\n"), `"usage"`) {
		t.Errorf("a stream that did not ask for usage: %q, want role, 2 tokens, stop, [DONE] and no usage", events)
	}
	if err := fake.Ledger().Wait(ctx, prompt, 1); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if gens := fake.Ledger().Generations(prompt); len(gens) != 1 || gens[0].PromptTokens != 4 || gens[0].Tokens != 2 || gens[0].Events != 5 {
		t.Errorf("generations %+v, want one of 4 prompt tokens, 2 tokens, 5 events", gens)
	}
}

func TestChatStream(t *testing.T) {
	tests := []struct {
		name     string
		cfg      mockllm.Config
		prompt   string
		body     func(prompt string) map[string]any
		model    string
		tokens   int
		readable bool
	}{
		{name: "default tokens", prompt: "hello", tokens: mockllm.DefaultTokens, model: "test-model"},
		{name: "config tokens readable", cfg: mockllm.Config{Tokens: 40, Readable: true}, prompt: "demo", tokens: 40, readable: true, model: "test-model"},
		{name: "tokens directive", cfg: mockllm.Config{Tokens: 40}, prompt: "x [tokens=3] [delay=1ms]", tokens: 3, model: "test-model"},
		{name: "zero tokens", prompt: "none [tokens=0]", tokens: 0, model: "test-model"},
		{
			name: "content parts and default model", prompt: "part one, part two", tokens: mockllm.DefaultTokens, model: mockllm.DefaultModel,
			body: func(string) map[string]any {
				return map[string]any{"stream": true, "stream_options": map[string]any{"include_usage": true}, "messages": []map[string]any{{"role": "user", "content": []map[string]any{
					{"type": "text", "text": "part one,"}, {"type": "image_url", "image_url": map[string]any{"url": "x"}}, {"type": "text", "text": " part two"},
				}}}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			fake, srv := newFake(t, tt.cfg)
			body := chatBody(tt.prompt, true)
			if tt.body != nil {
				body = tt.body(tt.prompt)
			}
			resp := mustPost(t, ctx, srv.URL+mockllm.ChatPath, body)
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatalf("read stream: %v", err)
			}
			want := mockllm.Content(tt.prompt, tt.tokens, tt.readable)
			checkChatStream(t, events, tt.model, want)

			if err := fake.Ledger().Wait(ctx, tt.prompt, 1); err != nil {
				t.Fatalf("wait: %v", err)
			}
			if got, exp := fake.Ledger().Get(tt.prompt), (mockllm.Entry{Requests: 1, Generations: 1, Completed: 1, Tokens: tt.tokens}); got != exp {
				t.Errorf("ledger = %+v, want %+v", got, exp)
			}
			gens := fake.Ledger().Generations(tt.prompt)
			if len(gens) != 1 || gens[0].Content != strings.Join(want, "") || gens[0].Events != tt.tokens+4 ||
				!gens[0].Completed || gens[0].Aborted || gens[0].Path != mockllm.ChatPath {
				t.Errorf("generation = %+v", gens)
			}
		})
	}
}

func TestChatNonStream(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{Readable: true})
	const prompt = "tell me [tokens=7]"
	resp := mustPost(t, ctx, srv.URL+mockllm.ChatPath, chatBody(prompt, false))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var got struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Model   string `json:"model"`
		Choices []struct {
			Message      struct{ Role, Content string } `json:"message"`
			FinishReason string                         `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatalf("decode: %v", err)
	}
	want := strings.Join(mockllm.Content(prompt, 7, true), "")
	if !strings.HasPrefix(got.ID, "chatcmpl-") || got.Object != "chat.completion" || got.Model != "test-model" || len(got.Choices) != 1 ||
		got.Choices[0].Message.Role != "assistant" || got.Choices[0].Message.Content != want || got.Choices[0].FinishReason != "stop" {
		t.Errorf("completion = %+v, want content %q", got, want)
	}
	if got.Usage.PromptTokens != 3 || got.Usage.CompletionTokens != 7 || got.Usage.TotalTokens != 10 {
		t.Errorf("usage = %+v", got.Usage)
	}
	if err := fake.Ledger().Wait(ctx, prompt, 1); err != nil {
		t.Fatal(err)
	}
	if g := fake.Ledger().Generations(prompt)[0]; g.Content != want || !g.Completed || g.Tokens != 7 || g.Events != 0 {
		t.Errorf("generation = %+v", g)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path, body string
		status                   int
	}{
		{"malformed json", http.MethodPost, mockllm.ChatPath, `{"messages": [`, http.StatusBadRequest},
		{"no messages", http.MethodPost, mockllm.ChatPath, `{"model":"m","messages":[]}`, http.StatusBadRequest},
		{"speech without input", http.MethodPost, mockllm.SpeechPath, `{"model":"m"}`, http.StatusBadRequest},
		{"unknown path", http.MethodPost, "/v1/fine_tuning/jobs", `{}`, http.StatusNotFound},
		{"embeddings without input", http.MethodPost, mockllm.EmbeddingsPath, `{}`, http.StatusBadRequest},
		{"wrong method", http.MethodGet, mockllm.ChatPath, ``, http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			fake, srv := newFake(t, mockllm.Config{})
			req, err := http.NewRequestWithContext(ctx, tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d", resp.StatusCode, tt.status)
			}
			checkErrorBody(t, resp.Body)
			if got := fake.Ledger().Total(); got != (mockllm.Entry{Requests: 1}) {
				t.Errorf("total = %+v, want one request and no generation", got)
			}
		})
	}
}

// checkErrorBody asserts an OpenAI-shaped error body and returns its message.
func checkErrorBody(tb testing.TB, r io.Reader) string {
	tb.Helper()
	var body struct {
		Error *struct{ Message, Type, Code string } `json:"error"`
	}
	if err := json.NewDecoder(r).Decode(&body); err != nil {
		tb.Fatalf("decode error body: %v", err)
	}
	if body.Error == nil || body.Error.Message == "" || body.Error.Type == "" || body.Error.Code == "" {
		tb.Fatalf("error body = %+v", body.Error)
	}
	return body.Error.Message
}

// isAbrupt reports whether err is what a client sees on a killed connection
// (unexpected EOF, reset), as opposed to a clean end of body.
func isAbrupt(err error) bool {
	return err != nil && !errors.Is(err, io.EOF)
}
