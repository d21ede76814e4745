package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/journal"
)

// TestAssembleMatchesFake: for a prompt, the answer assembled from the
// fake model's stream (parsed by the engine's own reader) is the fake's
// non-streamed answer to the same prompt, byte for byte once the clock
// field is aligned, and equal as JSON without it.
//
// Each request goes to a fake of its own, whose ids count from 1: the
// streamed and the whole answer carry the same ids (chatcmpl-1, resp-1 and
// its item msg_resp-1, msg-1), so ids are compared too. The one field that
// legitimately differs is the clock: chat's "created" and Responses'
// "created_at" are the second each generation started, and two
// generations may straddle a second. Messages has no clock field.
func TestAssembleMatchesFake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		proto  Protocol
		cfg    mockllm.Config
		prompt string
		// unasked: the client did not ask for the usage chunk, which the
		// engine then does not journal: the usage comes as recorded.
		unasked bool
	}{
		{"chat", Chat{}, mockllm.Config{}, "assemble me [tokens=12]", false},
		{"chat readable", Chat{}, mockllm.Config{Readable: true}, "a readable one [tokens=30]", false},
		{"chat usage not journaled", Chat{}, mockllm.Config{}, "usage as recorded [tokens=5]", true},
		{"chat no content", Chat{}, mockllm.Config{}, "nothing [tokens=0]", false},
		{"chat model named by the answer", Chat{}, mockllm.Config{}, "snapshot [model=m-2026<x>&y] [tokens=3]", false},
		{"responses", Responses{}, mockllm.Config{}, "assemble me [tokens=12]", false},
		{"responses readable", Responses{}, mockllm.Config{Readable: true}, "a readable one [tokens=30]", false},
		{"responses no content", Responses{}, mockllm.Config{}, "nothing [tokens=0]", false},
		{"messages", Messages{}, mockllm.Config{}, "assemble me [tokens=12]", false},
		{"messages readable", Messages{}, mockllm.Config{Readable: true}, "a readable one [tokens=30]", false},
		{"messages no content", Messages{}, mockllm.Config{}, "nothing [tokens=0]", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			events, usage := fakeStream(t, tt.cfg, tt.proto, tt.prompt, tt.unasked)
			whole := bytes.TrimSpace(fakePost(t, tt.cfg, tt.proto.Path(), fakeRequest(tt.proto.Path(), tt.prompt, false)))

			got, err := tt.proto.(Assembler).Assemble(events, usage)
			if err != nil {
				t.Fatalf("Assemble: %v", err)
			}
			if g, w := withoutClock(t, got), withoutClock(t, whole); !reflect.DeepEqual(g, w) {
				t.Fatalf("assembled answer differs from the fake's whole answer:\n got %s\nwant %s", got, whole)
			}
			if aligned := alignClock(whole, got); !bytes.Equal(got, aligned) {
				t.Fatalf("assembled answer is not the fake's byte for byte:\n got %s\nwant %s", got, aligned)
			}
		})
	}
}

// clockField is a clock member of an answer: chat's created, Responses'
// created_at.
var clockField = regexp.MustCompile(`"created(_at)?":\d+`)

// alignClock is want with its clock fields set to got's.
func alignClock(want, got []byte) []byte {
	clock := clockField.Find(got)
	if clock == nil {
		return want
	}
	return clockField.ReplaceAllLiteral(want, clock)
}

// withoutClock is an answer parsed, less its clock fields.
func withoutClock(tb testing.TB, answer []byte) map[string]any {
	tb.Helper()
	var v map[string]any
	if err := json.Unmarshal(answer, &v); err != nil {
		tb.Fatalf("answer is no JSON object: %v: %s", err, answer)
	}
	delete(v, "created")
	delete(v, "created_at")
	return v
}

// fakeStream runs a streamed request for prompt on a fake of its own and
// returns its events as the engine journals them, and the usage the
// stream reported; unasked drops chat's usage chunk, as the engine does
// for a client that did not ask for it.
func fakeStream(tb testing.TB, cfg mockllm.Config, proto Protocol, prompt string, unasked bool) ([]journal.Event, *cost.Usage) {
	tb.Helper()
	body := fakePost(tb, cfg, proto.Path(), fakeRequest(proto.Path(), prompt, true))
	var events []journal.Event
	lim := upstreamLimits{maxEvent: 1 << 20, maxEvents: 1 << 16, maxBytes: 1 << 30}
	_, usage, err := readUpstream(bytes.NewReader(body), proto, lim, func(typ string, data []byte, in Inspection, _ *cost.Usage) error {
		if !unasked || !in.UsageOnly {
			events = append(events, journal.Event{Offset: uint64(len(events) + 1), Type: typ, Data: bytes.Clone(data)})
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("reading the fake's stream: %v\n%s", err, body)
	}
	if unasked && usage == nil {
		tb.Fatal("the fake's stream reported no usage")
	}
	return events, usage
}

// fakeRequest is the body of a request for prompt in the format served at
// path; a streamed chat request asks for the usage chunk.
func fakeRequest(path, prompt string, stream bool) string {
	p, _ := json.Marshal(prompt)
	switch path {
	case Chat{}.Path():
		opts := ""
		if stream {
			opts = `,"stream_options":{"include_usage":true}`
		}
		return fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":%s}],"stream":%t%s}`, p, stream, opts)
	case Responses{}.Path():
		return fmt.Sprintf(`{"model":"m","input":%s,"stream":%t}`, p, stream)
	default:
		return fmt.Sprintf(`{"model":"m","max_tokens":64,"messages":[{"role":"user","content":%s}],"stream":%t}`, p, stream)
	}
}

// fakePost posts body to a fake of its own and returns its 200 answer.
func fakePost(tb testing.TB, cfg mockllm.Config, path, body string) []byte {
	tb.Helper()
	srv := httptest.NewServer(mockllm.New(cfg))
	defer srv.Close()
	resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("fake answered %d (%v): %s", resp.StatusCode, err, b)
	}
	return b
}

// ev is an event of a hand-written fixture: "type\ndata", or only data.
func ev(s string) journal.Event {
	if typ, data, ok := strings.Cut(s, "\n"); ok {
		return journal.Event{Type: typ, Data: []byte(data)}
	}
	return journal.Event{Data: []byte(s)}
}

func evs(ss ...string) []journal.Event {
	out := make([]journal.Event, len(ss))
	for i, s := range ss {
		out[i] = ev(s)
	}
	return out
}

// assembleFixtures are streams the fake does not produce, in the shapes
// OpenAI and Anthropic document and send, with the whole answer each
// assembles to.
var assembleFixtures = []struct {
	name   string
	proto  Assembler
	events []journal.Event
	usage  *cost.Usage
	want   string
}{
	{
		name:  "chat tool calls across chunks, interleaved",
		proto: Chat{},
		events: evs(
			`{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}],"refusal":null},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x"}`,
			`{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris <&>\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"\"CET\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}`,
			`{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}`,
			`{"id":"chatcmpl-T","object":"chat.completion.chunk","created":1,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":80,"completion_tokens":40,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":0}}}`,
			`[DONE]`,
		),
		usage: &cost.Usage{PromptTokens: 1, CompletionTokens: 1}, // the journaled usage chunk wins
		want: `{"id":"chatcmpl-T","object":"chat.completion","created":1,"model":"gpt-4o-2024-08-06","choices":[{"index":0,"message":{"role":"assistant","content":null,` +
			`"tool_calls":[{"id":"call_a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris <&>\"}"}},{"id":"call_b","type":"function","function":{"name":"get_time","arguments":"{\"tz\":\"CET\"}"}}],` +
			`"refusal":null},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":80,"completion_tokens":40,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":0}},"service_tier":"default","system_fingerprint":"fp_1"}`,
	},
	{
		name:  "chat n=2, choices interleaved, usage as recorded",
		proto: Chat{},
		events: evs(
			`{"id":"c","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":null},{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":1,"delta":{"content":"Bon"},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":1,"delta":{"content":"jour"},"finish_reason":"stop"}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"length"}]}`,
			`[DONE]`,
		),
		usage: &cost.Usage{PromptTokens: 5, CompletionTokens: 7},
		want: `{"id":"c","object":"chat.completion","created":2,"model":"m","choices":[` +
			`{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"length"},` +
			`{"index":1,"message":{"role":"assistant","content":"Bonjour"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`,
	},
	{
		name:  "chat empty content then a tool call: content null",
		proto: Chat{},
		events: evs(
			`{"id":"c","object":"chat.completion.chunk","created":4,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":4,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":4,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"arguments":""}}]},"finish_reason":"tool_calls"}]}`,
			`[DONE]`,
		),
		want: `{"id":"c","object":"chat.completion","created":4,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`,
	},
	{
		name:  "chat refusal, logprobs and reasoning, usage unknown",
		proto: Chat{},
		events: evs(
			`{"id":"c","object":"chat.completion.chunk","created":3,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Think","refusal":null},"logprobs":{"content":[],"refusal":null},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":3,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"ing","content":"No"},"logprobs":{"content":[{"token":"No","logprob":-0.1,"bytes":[78,111],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]}`,
			`{"id":"c","object":"chat.completion.chunk","created":3,"model":"m","choices":[{"index":0,"delta":{"content":"pe"},"logprobs":{"content":[{"token":"pe","logprob":-0.2,"bytes":[112,101],"top_logprobs":[]}],"refusal":null},"finish_reason":"stop"}]}`,
			`[DONE]`,
		),
		want: `{"id":"c","object":"chat.completion","created":3,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Nope","refusal":null,"reasoning_content":"Thinking"},` +
			`"logprobs":{"content":[{"token":"No","logprob":-0.1,"bytes":[78,111],"top_logprobs":[]},{"token":"pe","logprob":-0.2,"bytes":[112,101],"top_logprobs":[]}],"refusal":null},"finish_reason":"stop"}]}`,
	},
	{
		name:  "messages text then tool_use with input_json_delta",
		proto: Messages{},
		events: evs(
			"message_start\n"+`{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":2}}}`,
			"content_block_start\n"+`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			"ping\n"+`{"type":"ping"}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me check <that>"}}`,
			"content_block_stop\n"+`{"type":"content_block_stop","index":0}`,
			"content_block_start\n"+`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\"}"}}`,
			"content_block_stop\n"+`{"type":"content_block_stop","index":1}`,
			"content_block_start\n"+`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_2","name":"now","input":{}}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}`,
			"content_block_stop\n"+`{"type":"content_block_stop","index":2}`,
			"message_delta\n"+`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}`,
			"message_stop\n"+`{"type":"message_stop"}`,
		),
		want: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[` +
			`{"type":"text","text":"Let me check <that>"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"location":"San Francisco, CA"}},{"type":"tool_use","id":"toolu_2","name":"now","input":{}}],` +
			`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":89}}`,
	},
	{
		name:  "messages thinking with signature_delta, redacted thinking, citations",
		proto: Messages{},
		events: evs(
			"message_start\n"+`{"type":"message_start","message":{"id":"msg_2","type":"message","role":"assistant","model":"claude-opus-4","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}`,
			"content_block_start\n"+`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me solve "}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"this."}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}}`,
			"content_block_stop\n"+`{"type":"content_block_stop","index":0}`,
			"content_block_start\n"+`{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"}}`,
			"content_block_stop\n"+`{"type":"content_block_stop","index":1}`,
			"content_block_start\n"+`{"type":"content_block_start","index":2,"content_block":{"type":"text","text":"","citations":[]}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":2,"delta":{"type":"citations_delta","citation":{"type":"char_location","cited_text":"grass is green","document_index":0,"start_char_index":0,"end_char_index":14}}}`,
			"content_block_delta\n"+`{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Green."}}`,
			"content_block_stop\n"+`{"type":"content_block_stop","index":2}`,
			"message_delta\n"+`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":30}}`,
			"message_stop\n"+`{"type":"message_stop"}`,
		),
		want: `{"id":"msg_2","type":"message","role":"assistant","model":"claude-opus-4","content":[` +
			`{"type":"thinking","thinking":"Let me solve this.","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix"},` +
			`{"type":"text","text":"Green.","citations":[{"type":"char_location","cited_text":"grass is green","document_index":0,"start_char_index":0,"end_char_index":14}]}],` +
			`"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":30}}`,
	},
	{
		name:  "messages events unnamed, stop sequence, usage as recorded",
		proto: Messages{},
		events: evs(
			`{"type":"message_start","message":{"id":"msg_3","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"one two"}}`,
			`{"type":"message_delta","delta":{"stop_reason":"stop_sequence","stop_sequence":"END"}}`,
			`{"type":"message_stop"}`,
		),
		usage: &cost.Usage{PromptTokens: 4, CompletionTokens: 2},
		want:  `{"id":"msg_3","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"one two"}],"stop_reason":"stop_sequence","stop_sequence":"END","usage":{"input_tokens":4,"output_tokens":2}}`,
	},
	{
		name:  "responses incomplete",
		proto: Responses{},
		events: evs(
			"response.created\n"+`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}}`,
			"response.output_text.delta\n"+`{"type":"response.output_text.delta","sequence_number":1,"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Once"}`,
			"response.incomplete\n"+`{"type":"response.incomplete","sequence_number":2,"response":{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"id":"msg_1","type":"message","status":"incomplete","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Once"}]}],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}}`,
		),
		want: `{"id":"resp_1","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[{"id":"msg_1","type":"message","status":"incomplete","role":"assistant","content":[{"type":"output_text","annotations":[],"text":"Once"}]}],"usage":{"input_tokens":3,"output_tokens":1,"total_tokens":4}}`,
	},
	{
		name:  "responses completed without its output: the items done",
		proto: Responses{},
		events: evs(
			`{"type":"response.output_item.done","sequence_number":5,"output_index":1,"item":{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}","status":"completed"}}`,
			`{"type":"response.output_item.done","sequence_number":4,"output_index":0,"item":{"type":"reasoning","id":"rs_1","summary":[]}}`,
			`{"type":"response.completed","sequence_number":6,"response":{"id":"resp_2","object":"response","status":"completed","output":[],"usage":null}}`,
		),
		want: `{"id":"resp_2","object":"response","status":"completed","output":[{"type":"reasoning","id":"rs_1","summary":[]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}","status":"completed"}],"usage":null}`,
	},
}

// TestAssembleFixtures: the streams the fake does not produce (tool
// calls, several choices, thinking, citations, an incomplete response)
// assemble to the whole answer their format defines.
func TestAssembleFixtures(t *testing.T) {
	t.Parallel()
	for _, tt := range assembleFixtures {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.proto.Assemble(tt.events, tt.usage)
			if err != nil {
				t.Fatalf("Assemble: %v", err)
			}
			if string(got) != tt.want {
				t.Fatalf("assembled\n got %s\nwant %s", got, tt.want)
			}
		})
	}
}

// TestAssembleRefuses: events that make no whole answer are ErrAssemble.
func TestAssembleRefuses(t *testing.T) {
	t.Parallel()
	const (
		chunk = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`
		start = "message_start\n" + `{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`
		block = "content_block_start\n" + `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"n","input":{}}}`
		stop  = "message_stop\n" + `{"type":"message_stop"}`
	)
	tests := []struct {
		name   string
		proto  Assembler
		events []journal.Event
	}{
		{"chat without [DONE]", Chat{}, evs(chunk)},
		{"chat nothing but [DONE]", Chat{}, evs(`[DONE]`)},
		{"chat error event", Chat{}, evs(chunk, `{"error":{"message":"boom","type":"server_error"}}`, `[DONE]`)},
		{"chat chunk not JSON", Chat{}, evs(chunk, `{"choices":[`, `[DONE]`)},
		{"chat choices not an array", Chat{}, evs(`{"choices":{}}`, `[DONE]`)},
		{"chat index not an integer", Chat{}, evs(`{"choices":[{"index":"0"}]}`, `[DONE]`)},
		{"no events", Messages{}, nil},
		{"responses without its terminal event", Responses{}, evs(`{"type":"response.created","response":{"id":"r"}}`)},
		{"responses failed", Responses{}, evs("response.failed\n" + `{"type":"response.failed","response":{"id":"r","status":"failed"}}`)},
		{"responses completed without a response", Responses{}, evs("response.completed\n" + `{"type":"response.completed"}`)},
		{"responses error event", Responses{}, evs("error\n"+`{"type":"error","code":"server_error","message":"m"}`, "response.completed\n"+`{"response":{}}`)},
		{"messages without message_stop", Messages{}, evs(start, block)},
		{"messages block before message_start", Messages{}, evs(block, stop)},
		{"messages delta of a block never started", Messages{}, evs(start, "content_block_delta\n"+`{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}`, stop)},
		{"messages block started twice", Messages{}, evs(start, block, block, stop)},
		{"messages tool input not JSON", Messages{}, evs(start, block, "content_block_delta\n"+`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`, stop)},
		{"messages error event", Messages{}, evs(start, "error\n"+`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, stop)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.proto.Assemble(tt.events, nil)
			if !errors.Is(err, ErrAssemble) {
				t.Fatalf("Assemble = %s, %v; want ErrAssemble", got, err)
			}
		})
	}
}

// TestAssemblers: the three text formats assemble; speech, whose stream is
// no JSON answer, does not.
func TestAssemblers(t *testing.T) {
	t.Parallel()
	for _, p := range Protocols() {
		_, ok := p.(Assembler)
		if want := p.Path() != (Speech{}).Path(); ok != want {
			t.Errorf("%s: is an Assembler: %v, want %v", p.Path(), ok, want)
		}
	}
}

// FuzzAssemble: no sequence of events makes an Assembler panic; what one
// assembles is a JSON object, and what it refuses is ErrAssemble. The input
// is events separated by a blank line, each "type\ndata" or data alone.
func FuzzAssemble(f *testing.F) {
	for _, fx := range assembleFixtures {
		var b strings.Builder
		for i, e := range fx.events {
			if i > 0 {
				b.WriteString("\n\n")
			}
			if e.Type != "" {
				b.WriteString(e.Type + "\n")
			}
			b.Write(e.Data)
		}
		f.Add(b.String(), fx.usage != nil)
	}
	f.Add(`{"choices":[{"index":-9,"delta":{"tool_calls":[{"index":1e3},{"index":null},7]}}]}`+"\n\n[DONE]", false)
	f.Fuzz(func(t *testing.T, input string, withUsage bool) {
		var events []journal.Event
		for s := range strings.SplitSeq(input, "\n\n") {
			events = append(events, ev(s))
		}
		var usage *cost.Usage
		if withUsage {
			usage = &cost.Usage{PromptTokens: 3, CompletionTokens: 4}
		}
		for _, p := range Protocols() {
			a, ok := p.(Assembler)
			if !ok {
				continue
			}
			out, err := a.Assemble(events, usage)
			if err != nil {
				if !errors.Is(err, ErrAssemble) {
					t.Fatalf("%s: error %v is not ErrAssemble", p.Path(), err)
				}
				continue
			}
			var v map[string]json.RawMessage
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatalf("%s: assembled %q, no JSON object: %v", p.Path(), out, err)
			}
		}
	})
}

// BenchmarkAssembleChat: assembling a chat stream of 4,000 content chunks
// (a long answer), per answer.
func BenchmarkAssembleChat(b *testing.B) {
	events := make([]journal.Event, 0, 4001)
	for i := range 4000 {
		events = append(events, journal.Event{Data: fmt.Appendf(nil, `{"id":"chatcmpl-B","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":" word%d"},"logprobs":null,"finish_reason":null}],"obfuscation":"abc"}`, i)})
	}
	events = append(events, journal.Event{Data: []byte("[DONE]")})
	for b.Loop() {
		if _, err := (Chat{}).Assemble(events, nil); err != nil {
			b.Fatal(err)
		}
	}
}
