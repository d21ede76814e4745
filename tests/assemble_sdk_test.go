package tests

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
)

// TestAssembledAnswersParse: the answers the engine assembles from
// completed streams parse with the official SDKs' non-streamed calls —
// openai-go's Chat.Completions.New and Responses.New, anthropic-sdk-go's
// Messages.New — with their text, tool calls and stop reasons.
func TestAssembledAnswersParse(t *testing.T) {
	t.Parallel()
	chat := assembled(t, engine.Chat{}, &cost.Usage{PromptTokens: 9, CompletionTokens: 6},
		`{"id":"chatcmpl-A","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-A","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":"}}]},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-A","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-A","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"CET\"}"}}]},"logprobs":null,"finish_reason":null}]}`,
		`{"id":"chatcmpl-A","object":"chat.completion.chunk","created":1700000000,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}`,
		`[DONE]`,
	)
	resp := assembled(t, engine.Responses{}, nil,
		"response.created\n"+`{"type":"response.created","sequence_number":0,"response":{"id":"resp_A","object":"response","created_at":1700000000,"status":"in_progress","model":"gpt-4o","output":[]}}`,
		"response.output_text.delta\n"+`{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_A","output_index":0,"content_index":0,"delta":"Hello"}`,
		"response.completed\n"+`{"type":"response.completed","sequence_number":2,"response":{"id":"resp_A","object":"response","created_at":1700000000,"status":"completed","model":"gpt-4o",`+
			`"output":[{"id":"msg_A","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Hello"}]},`+
			`{"id":"fc_A","type":"function_call","status":"completed","call_id":"call_c","name":"lookup","arguments":"{\"q\":\"x\"}"}],`+
			`"usage":{"input_tokens":3,"output_tokens":5,"total_tokens":8}}}`,
	)
	msg := assembled(t, engine.Messages{}, nil,
		"message_start\n"+`{"type":"message_start","message":{"id":"msg_A","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":12,"cache_read_input_tokens":4,"output_tokens":1}}}`,
		"content_block_start\n"+`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		"content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Weather, "}}`,
		"content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"then."}}`,
		"content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig=="}}`,
		"content_block_start\n"+`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}`,
		"content_block_delta\n"+`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Checking."}}`,
		"content_block_start\n"+`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_A","name":"get_weather","input":{}}}`,
		"content_block_delta\n"+`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"location\":"}}`,
		"content_block_delta\n"+`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":" \"Paris\"}"}}`,
		"message_delta\n"+`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}`,
		"message_stop\n"+`{"type":"message_stop"}`,
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answers := map[string][]byte{"/v1/chat/completions": chat, "/v1/responses": resp, "/v1/messages": msg}
		body, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	ctx := waitCtx(t, 20*time.Second)

	oa := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	cc, err := oa.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather and time?")},
	})
	if err != nil {
		t.Fatalf("Chat.Completions.New: %v\n%s", err, chat)
	}
	if len(cc.Choices) != 1 || cc.Choices[0].FinishReason != "tool_calls" || cc.Choices[0].Message.Content != "" || cc.Usage.TotalTokens != 15 {
		t.Fatalf("chat completion %+v, want one choice ending in tool_calls, no content, 15 tokens", cc)
	}
	calls := cc.Choices[0].Message.ToolCalls
	if len(calls) != 2 || calls[0].ID != "call_a" || calls[0].Function.Name != "get_weather" || calls[0].Function.Arguments != `{"city":"Paris"}` ||
		calls[1].ID != "call_b" || calls[1].Function.Name != "get_time" || calls[1].Function.Arguments != `{"tz":"CET"}` {
		t.Fatalf("tool calls %+v, want get_weather {city:Paris} then get_time {tz:CET}", calls)
	}
	if raw := cc.Choices[0].Message.JSON.Content.Raw(); raw != "null" {
		t.Fatalf("content %s, want null beside tool calls", raw)
	}

	r, err := oa.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-4o",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")},
	})
	if err != nil {
		t.Fatalf("Responses.New: %v\n%s", err, resp)
	}
	if r.Status != responses.ResponseStatusCompleted || r.OutputText() != "Hello" || len(r.Output) != 2 || r.Usage.TotalTokens != 8 {
		t.Fatalf("response %+v, want completed, text Hello, two items, 8 tokens", r)
	}
	if fc := r.Output[1].AsFunctionCall(); fc.Name != "lookup" || fc.CallID != "call_c" || fc.Arguments != `{"q":"x"}` {
		t.Fatalf("function call %+v, want lookup {q:x}", fc)
	}

	an := anthropic.NewClient(aoption.WithBaseURL(srv.URL), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0))
	m, err := an.Messages.New(ctx, anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("weather?"))},
	})
	if err != nil {
		t.Fatalf("Messages.New: %v\n%s", err, msg)
	}
	if m.StopReason != anthropic.StopReasonToolUse || len(m.Content) != 3 || m.Usage.InputTokens != 12 || m.Usage.OutputTokens != 42 || m.Usage.CacheReadInputTokens != 4 {
		t.Fatalf("message %+v, want tool_use, three blocks, 12 in (4 cached), 42 out", m)
	}
	th, text, tool := m.Content[0].AsThinking(), m.Content[1].AsText(), m.Content[2].AsToolUse()
	if th.Thinking != "Weather, then." || th.Signature != "sig==" || text.Text != "Checking." || tool.Name != "get_weather" || tool.ID != "toolu_A" {
		t.Fatalf("blocks %+v %+v %+v, want the thinking signed, the text, the get_weather call", th, text, tool)
	}
	var input map[string]string
	if err := json.Unmarshal(tool.Input, &input); err != nil || input["location"] != "Paris" {
		t.Fatalf("tool input %s (%v), want location Paris", tool.Input, err)
	}
}

// assembled is the answer proto assembles from events, each "type\ndata"
// or data alone.
func assembled(tb testing.TB, proto engine.Assembler, usage *cost.Usage, events ...string) []byte {
	tb.Helper()
	evs := make([]journal.Event, len(events))
	for i, s := range events {
		if typ, data, ok := strings.Cut(s, "\n"); ok {
			evs[i] = journal.Event{Offset: uint64(i + 1), Type: typ, Data: []byte(data)}
		} else {
			evs[i] = journal.Event{Offset: uint64(i + 1), Data: []byte(s)}
		}
	}
	out, err := proto.Assemble(evs, usage)
	if err != nil {
		tb.Fatalf("Assemble: %v", err)
	}
	return out
}
