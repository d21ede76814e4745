package engine

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
)

func TestInspect(t *testing.T) {
	usage := func(p, c, total int64) *cost.Usage {
		return &cost.Usage{PromptTokens: p, CompletionTokens: c, TotalTokens: total}
	}
	tests := []struct {
		name      string
		proto     Protocol
		typ, data string
		terminal  bool
		failure   string // the failure's code, "" for none
		usage     *cost.Usage
	}{
		{"chat done", Chat{}, "", "[DONE]", true, "", nil},
		{"chat chunk", Chat{}, "", `{"choices":[]}`, false, "", nil},
		{"chat chunk with null usage", Chat{}, "", `{"choices":[{"delta":{"content":"hi"}}],"usage":null}`, false, "", nil},
		{"chat usage chunk", Chat{}, "", `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`, false, "", usage(5, 7, 12)},
		{"chat usage without total", Chat{}, "", `{"choices":[],"usage" : {"prompt_tokens":5,"completion_tokens":7}}`, false, "", usage(5, 7, 12)},
		{"chat DONE with spaces", Chat{}, "", " [DONE]", false, "", nil},
		{"chat speech done is not terminal", Chat{}, "", `{"type":"speech.audio.done"}`, false, "", nil},
		{"chat error chunk", Chat{}, "", `{"error":{"message":"overloaded","type":"server_error","code":"overloaded"}}`, false, "overloaded", nil},
		{"chat error chunk, null code", Chat{}, "", `{"error":{"message":"boom","type":"server_error","code":null}}`, false, apierr.UpstreamError, nil},
		{"chat content mentioning error", Chat{}, "", `{"choices":[{"delta":{"content":"\"error\": no"}}]}`, false, "", nil},
		{"chat error as a typed event", Chat{}, "", `{"type":"error","message":"m","code":"c"}`, false, "c", nil},
		{"speech done", Speech{}, "", `{"type":"speech.audio.done","usage":{"input_tokens":3,"output_tokens":9,"total_tokens":12}}`, true, "", usage(3, 9, 12)},
		{"speech done as event type", Speech{}, "speech.audio.done", `{}`, true, "", nil},
		{"speech delta", Speech{}, "", `{"type":"speech.audio.delta","audio":"AAA="}`, false, "", nil},
		{"speech mention is not the type", Speech{}, "", `{"type":"x","note":"speech.audio.done"}`, false, "", nil},
		{"speech DONE is not terminal", Speech{}, "", "[DONE]", false, "", nil},
		{"speech error", Speech{}, "", `{"type":"error","error":{"message":"m","type":"server_error"}}`, false, apierr.UpstreamError, nil},
		{"responses delta", Responses{}, "response.output_text.delta", `{"type":"response.output_text.delta","delta":"hi","sequence_number":5}`, false, "", nil},
		{"responses completed", Responses{}, "response.completed", `{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}}}`, true, "", usage(3, 4, 7)},
		{"responses completed by data type", Responses{}, "", `{"type":"response.completed","response":{}}`, true, "", nil},
		{"responses incomplete", Responses{}, "response.incomplete", `{"type":"response.incomplete","response":{"usage":{"input_tokens":1,"output_tokens":2}}}`, true, "", usage(1, 2, 3)},
		{"responses failed", Responses{}, "response.failed", `{"type":"response.failed","response":{"error":{"code":"server_error","message":"m"}}}`, false, "server_error", nil},
		{"responses error event", Responses{}, "error", `{"type":"error","code":"rate_limit_exceeded","message":"slow"}`, false, "rate_limit_exceeded", nil},
		{"responses [DONE] is not terminal", Responses{}, "", "[DONE]", false, "", nil},
		{"messages start", Messages{}, "message_start", `{"type":"message_start","message":{"usage":{"input_tokens":25,"output_tokens":1}}}`, false, "", usage(25, 1, 0)},
		{"messages delta", Messages{}, "message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`, false, "", usage(0, 15, 0)},
		{"messages stop", Messages{}, "message_stop", `{"type":"message_stop"}`, true, "", nil},
		{"messages ping", Messages{}, "ping", `{"type":"ping"}`, false, "", nil},
		{"messages overloaded", Messages{}, "error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, false, "overloaded_error", nil},
		{"messages stop by data type", Messages{}, "", `{"type":"message_stop"}`, true, "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.proto.Inspect(tc.typ, []byte(tc.data))
			if in.Terminal != tc.terminal {
				t.Errorf("Terminal = %v, want %v", in.Terminal, tc.terminal)
			}
			switch {
			case tc.failure == "" && in.Failure != nil:
				t.Errorf("Failure = %+v, want none", in.Failure)
			case tc.failure != "" && (in.Failure == nil || in.Failure.Code != tc.failure || in.Failure.Message == ""):
				t.Errorf("Failure = %+v, want code %s with a message", in.Failure, tc.failure)
			}
			switch {
			case tc.usage == nil && in.Usage != nil:
				t.Errorf("Usage = %+v, want none", in.Usage)
			case tc.usage != nil && (in.Usage == nil || *in.Usage != *tc.usage):
				t.Errorf("Usage = %+v, want %+v", in.Usage, tc.usage)
			}
		})
	}
}

func TestStreams(t *testing.T) {
	tests := []struct {
		proto   Protocol
		body    string
		want    bool
		wantErr bool
	}{
		{Chat{}, `{"stream":true}`, true, false},
		{Chat{}, `{"stream":false,"stream_format":"sse"}`, false, false},
		{Chat{}, `{}`, false, false},
		{Chat{}, `{"stream":"yes"}`, false, true},
		{Speech{}, `{"stream_format":"sse"}`, true, false},
		{Speech{}, `{"stream":true}`, false, false},
		{Speech{}, `{"stream_format":1}`, false, true},
		{Responses{}, `{"stream":true,"input":"x"}`, true, false},
		{Messages{}, `{"stream":true}`, true, false},
		{Messages{}, `{"stream":"1"}`, false, true},
	}
	for _, tc := range tests {
		got, err := tc.proto.Streams([]byte(tc.body))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("%s.Streams(%s) = %v, %v; want %v, error %v", tc.proto.Path(), tc.body, got, err, tc.want, tc.wantErr)
		}
	}
}

// TestWhole: what each format takes as the whole answer of an upstream
// that ignored a request's "stream"; anything else is no result.
func TestWhole(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto Protocol
		ct    string
		body  string
		want  bool
	}{
		{"chat object", Chat{}, "application/json", `{"object":"chat.completion"}`, true},
		{"chat object with charset", Chat{}, "application/json; charset=utf-8", " \n{}", true},
		{"problem+json", Responses{}, "application/problem+json", `{"title":"x"}`, true},
		{"messages object", Messages{}, "application/json", `{"type":"message"}`, true},
		{"empty", Chat{}, "application/json", "", false},
		{"array", Chat{}, "application/json", `[1]`, false},
		{"broken JSON", Messages{}, "application/json", `{"type":`, false},
		{"HTML", Responses{}, "text/html", `<html></html>`, false},
		{"no content type", Chat{}, "", `{}`, false},
		{"unparsable content type", Chat{}, "application/json; =", `{}`, false},
		{"plain text", Messages{}, "text/plain", `{}`, false},
		{"audio", Speech{}, "audio/mpeg", "ID3\x03", true},
		{"empty audio", Speech{}, "audio/mpeg", "", false},
		{"speech JSON", Speech{}, "application/json", `{"error":null}`, true},
		{"speech HTML", Speech{}, "text/html", "<html>", false},
		{"generic anything", Generic{}, "", "", true},
	} {
		if got := tc.proto.Whole(tc.ct, []byte(tc.body)); got != tc.want {
			t.Errorf("%s: %T.Whole(%q, %q) = %v, want %v", tc.name, tc.proto, tc.ct, tc.body, got, tc.want)
		}
	}
}

func TestResultUsage(t *testing.T) {
	u, ok := Chat{}.Result("application/json", []byte(`{"id":"x","usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}`))
	want := cost.Usage{PromptTokens: 2, CompletionTokens: 3, TotalTokens: 5}
	if !ok || u != want {
		t.Errorf("chat result usage = %+v, %v", u, ok)
	}
	if _, ok := (Speech{}).Result("audio/wav", []byte("RIFF....")); ok {
		t.Error("an audio answer reported usage")
	}
}

func TestProtocolOf(t *testing.T) {
	for _, p := range Protocols() {
		if got, ok := ProtocolOf(p.Path()); !ok || got.Path() != p.Path() {
			t.Errorf("ProtocolOf(%s) = %v, %v", p.Path(), got, ok)
		}
	}
	if _, ok := ProtocolOf("/v1/embeddings"); ok {
		t.Error("a format for /v1/embeddings")
	}
}

func TestUpstreamError(t *testing.T) {
	e := upstreamError(&classify.Error{Status: http.StatusTooManyRequests, Body: []byte(`{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limited"}}`)})
	if e.Status != 429 || e.Message != "slow down" || e.Code != "rate_limited" || e.Type != "rate_limit_error" {
		t.Errorf("kept error %+v", e)
	}
	e = upstreamError(&classify.Error{Status: http.StatusBadGateway, Body: []byte(`<html>bad gateway</html>`)})
	if e.Status != 502 || e.Code != "upstream_error" || e.Type != "server_error" || e.Message == "" {
		t.Errorf("wrapped error %+v", e)
	}
	e = upstreamError(&classify.Error{Status: http.StatusBadRequest, Body: []byte(`{"error":{"message":"m"}}`)})
	if e.Code != "upstream_error" || e.Type != "invalid_request_error" || e.Status != 400 {
		t.Errorf("filled error %+v", e)
	}
	e = upstreamError(&classify.Error{Status: 503, Code: classify.CodeUnavailable, RetryAfter: 1500 * time.Millisecond})
	if e.Code != classify.CodeUnavailable || e.Message == "" || e.RetryAfter != 2 || e.Type != "server_error" || e.Status != 503 {
		t.Errorf("proxy error %+v", e)
	}
}

// TestCodesCatalogued: every code classify and the engine can end a
// generation with has its status, type and message in the catalogue.
func TestCodesCatalogued(t *testing.T) {
	for _, code := range Codes() {
		if !apierr.Known(code) {
			t.Errorf("%s is not in the catalogue", code)
			continue
		}
		e := apierr.New(code)
		if e.Status < 400 || e.Message == "" || e.Type == "" || e.Code != code {
			t.Errorf("%s: %+v", code, e)
		}
	}
	if got := upstreamError(&classify.Error{Status: 502, Code: classify.CodeBadResponse}); got.Message == "" {
		t.Errorf("upstream_bad_response reaches clients with no message: %+v", got)
	}
}

func TestUpstreamServes(t *testing.T) {
	everyone := Upstream{}
	claude := Upstream{Paths: []string{"/v1/messages"}}
	gpt := Upstream{Models: []string{"gpt-*", "o3"}}
	for _, tc := range []struct {
		u           Upstream
		path, model string
		want        bool
	}{
		{everyone, "/v1/chat/completions", "x", true},
		{claude, "/v1/messages", "claude-4", true},
		{claude, "/v1/messages/count_tokens", "", true},
		{claude, "/v1/chat/completions", "claude-4", false},
		{gpt, "/v1/chat/completions", "gpt-5", true},
		{gpt, "/v1/responses", "o3", true},
		{gpt, "/v1/responses", "o3-mini", false},
		{gpt, "/v1/models", "", true}, // a request that names no model
	} {
		if got := tc.u.serves(tc.path, tc.model); got != tc.want {
			t.Errorf("%+v serves(%s, %q) = %v, want %v", tc.u, tc.path, tc.model, got, tc.want)
		}
	}
}

// TestChatAskUsage: a streamed chat request is made to ask for its usage,
// keeping the rest of its body; one that asked already is left alone.
func TestChatAskUsage(t *testing.T) {
	tests := []struct {
		name, body string
		changed    bool
		want       string // stream_options after the change
	}{
		{name: "absent", body: `{"model":"m","stream":true}`, changed: true, want: `{"include_usage":true}`},
		{name: "false", body: `{"stream":true,"stream_options":{"include_usage":false}}`, changed: true, want: `{"include_usage":true}`},
		{name: "other options kept", body: `{"stream":true,"stream_options":{"x":1}}`, changed: true, want: `{"include_usage":true,"x":1}`},
		{name: "asked", body: `{"stream":true,"stream_options":{"include_usage":true}}`},
		{name: "not an object", body: `{"stream":true,"stream_options":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, changed := Chat{}.AskUsage([]byte(tt.body))
			if changed != tt.changed {
				t.Fatalf("changed %v, want %v (%s)", changed, tt.changed, out)
			}
			if !changed {
				if string(out) != tt.body {
					t.Errorf("body %s, want it unchanged", out)
				}
				return
			}
			var v map[string]json.RawMessage
			if err := json.Unmarshal(out, &v); err != nil {
				t.Fatal(err)
			}
			if string(v["stream_options"]) != tt.want || string(v["stream"]) != "true" {
				t.Errorf("body %s, want stream_options %s and stream kept", out, tt.want)
			}
		})
	}
	if in := (Chat{}).Inspect("", []byte(`{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3}}`)); !in.UsageOnly || in.Usage == nil || in.Usage.TotalTokens != 5 {
		t.Errorf("usage chunk: %+v, want UsageOnly with 5 tokens", in)
	}
	if in := (Chat{}).Inspect("", []byte(`{"choices":[{"delta":{}}],"usage":{"prompt_tokens":2}}`)); in.UsageOnly {
		t.Errorf("a chunk with choices is not usage only: %+v", in)
	}
}

// TestResponseModel: each format's adapter reads the model its answer
// names, in its first event or the whole answer; an event that names none
// answers false.
func TestResponseModel(t *testing.T) {
	long := strings.Repeat("m", 300)
	for _, tc := range []struct {
		name  string
		proto ModelNamer
		typ   string
		data  string
		want  string
	}{
		{"chat chunk", Chat{}, "", `{"id":"c","object":"chat.completion.chunk","model":"gpt-4o-2024-08-06","choices":[]}`, "gpt-4o-2024-08-06"},
		{"chat answer", Chat{}, "", `{"id":"c","object":"chat.completion","model":"gpt-4o-mini-2024-07-18","choices":[]}`, "gpt-4o-mini-2024-07-18"},
		{"chat done", Chat{}, "", `[DONE]`, ""},
		{"responses created", Responses{}, "response.created", `{"type":"response.created","response":{"id":"r","model":"gpt-4.1-2025-04-14"}}`, "gpt-4.1-2025-04-14"},
		{"responses delta", Responses{}, "response.output_text.delta", `{"type":"response.output_text.delta","delta":"model"}`, ""},
		{"responses answer", Responses{}, "", `{"id":"r","object":"response","model":"o3-2025-04-16"}`, "o3-2025-04-16"},
		{"messages start", Messages{}, "message_start", `{"type":"message_start","message":{"id":"m","model":"claude-sonnet-4-5-20250929"}}`, "claude-sonnet-4-5-20250929"},
		{"messages answer", Messages{}, "", `{"id":"m","type":"message","model":"claude-haiku-4-5"}`, "claude-haiku-4-5"},
		{"not a string", Chat{}, "", `{"model":7}`, ""},
		{"bounded", Chat{}, "", `{"model":"` + long + `"}`, long[:maxModelName]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.proto.ResponseModel(tc.typ, []byte(tc.data))
			if got != tc.want || ok != (tc.want != "") {
				t.Fatalf("ResponseModel = %q, %v; want %q", got, ok, tc.want)
			}
		})
	}
}
