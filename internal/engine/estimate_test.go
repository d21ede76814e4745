package engine

import (
	"testing"

	"github.com/reprise-dev/reprise/internal/cost"
)

// TestInspectContent: the events that carry generated content, about a
// token each, and only those, in each text format.
func TestInspectContent(t *testing.T) {
	tests := []struct {
		name      string
		proto     Protocol
		typ, data string
		content   bool
	}{
		{"chat role chunk", Chat{}, "", `{"choices":[{"delta":{"role":"assistant","content":""}}]}`, false},
		{"chat content", Chat{}, "", `{"choices":[{"delta":{"content":" word"}}]}`, true},
		{"chat reasoning", Chat{}, "", `{"choices":[{"delta":{"reasoning_content":"hm"}}]}`, true},
		{"chat tool arguments", Chat{}, "", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]}}]}`, true},
		{"chat empty arguments", Chat{}, "", `{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":""}}]}}]}`, false},
		{"chat refusal", Chat{}, "", `{"choices":[{"delta":{"refusal":"no"}}]}`, true},
		{"chat stop", Chat{}, "", `{"choices":[{"delta":{},"finish_reason":"stop"}]}`, false},
		{"chat null content", Chat{}, "", `{"choices":[{"delta":{"content":null}}]}`, false},
		{"chat usage chunk", Chat{}, "", `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}`, false},
		{"chat done", Chat{}, "", "[DONE]", false},
		{"responses text delta", Responses{}, "response.output_text.delta", `{"delta":"hi"}`, true},
		{"responses arguments delta by data type", Responses{}, "", `{"type":"response.function_call_arguments.delta","delta":"{"}`, true},
		{"responses audio delta", Responses{}, "response.audio.delta", `{"delta":"AAA="}`, false},
		{"responses text done", Responses{}, "response.output_text.done", `{"text":"hi"}`, false},
		{"responses created", Responses{}, "response.created", `{"response":{"id":"r"}}`, false},
		{"messages text delta", Messages{}, "content_block_delta", `{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}`, true},
		{"messages block start", Messages{}, "content_block_start", `{"type":"content_block_start"}`, false},
		{"messages ping", Messages{}, "ping", `{"type":"ping"}`, false},
		{"speech delta", Speech{}, "", `{"type":"speech.audio.delta","audio":"AAA="}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.proto.Inspect(tc.typ, []byte(tc.data)).Content; got != tc.content {
				t.Errorf("Content = %v, want %v", got, tc.content)
			}
		})
	}
	if _, ok := Protocol(Speech{}).(Estimator); ok {
		t.Error("speech estimates usage: its deltas are audio, no tokens")
	}
}

// TestPromptEstimate: the prompt's text bytes / 4, rounded up; ids,
// enums and media are no text.
func TestPromptEstimate(t *testing.T) {
	tests := []struct {
		name string
		body string
		want int64
	}{
		{"chat", `{"model":"gpt-4o","messages":[{"role":"user","content":"12345678"}],"stream":true}`, 2},
		{"rounded up", `{"model":"m","messages":[{"role":"system","content":"abc"},{"role":"user","content":"de"}]}`, 2},
		{"parts and an image", `{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAAAAAAAAAA"}}]}]}`, 1},
		{"responses input and instructions", `{"model":"m","instructions":"abcd","input":"efgh"}`, 2},
		{"messages system", `{"model":"m","system":"abcdefgh","messages":[{"role":"user","content":"x"}],"max_tokens":5}`, 3},
		{"multi-byte", `{"messages":[{"role":"user","content":"日本語"}]}`, 3}, // 9 bytes
		{"not JSON", `{`, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := promptEstimate([]byte(tc.body)); got != tc.want {
				t.Errorf("promptEstimate = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestEstimated: what the upstream reported is kept; what it did not is
// estimated (the basis says so); a usage reported whole stays reported.
func TestEstimated(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"abcdefghijkl"}]}`) // 3 tokens
	tests := []struct {
		name     string
		reported *cost.Usage
		content  int64
		want     cost.Usage
		basis    cost.Basis
	}{
		{"nothing reported", nil, 7, cost.Usage{PromptTokens: 3, CompletionTokens: 7, TotalTokens: 10}, cost.Estimated},
		{"before any token", nil, 0, cost.Usage{PromptTokens: 3, TotalTokens: 3}, cost.Estimated},
		{"prompt reported (message_start)", &cost.Usage{PromptTokens: 25, CompletionTokens: 1}, 9, cost.Usage{PromptTokens: 25, CompletionTokens: 9, TotalTokens: 34}, cost.Estimated},
		{"all reported", &cost.Usage{PromptTokens: 5, CompletionTokens: 9, TotalTokens: 14}, 9, cost.Usage{PromptTokens: 5, CompletionTokens: 9, TotalTokens: 14}, cost.Reported},
		{"more reported than seen", &cost.Usage{PromptTokens: 5, CompletionTokens: 12}, 9, cost.Usage{PromptTokens: 5, CompletionTokens: 12, TotalTokens: 17}, cost.Reported},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, basis := estimated(Chat{}, body, tc.reported, tc.content)
			if *u != tc.want || basis != tc.basis {
				t.Errorf("estimated = %+v (%s), want %+v (%s)", *u, basis, tc.want, tc.basis)
			}
		})
	}
}
