package engine

import (
	"encoding/json"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
)

// Chat is OpenAI chat completions: "stream": true asks for SSE, whose
// terminal event is data: [DONE]; an error arrives as data
// {"error":{...}}; usage is in the last chunk (stream_options.include_usage)
// or the answer's "usage".
type Chat struct{}

// Path implements Protocol.
func (Chat) Path() string { return "/v1/chat/completions" }

// Streams implements Protocol.
func (Chat) Streams(body []byte) (bool, error) { return streamField(body) }

// Shape implements Protocol.
func (Chat) Shape() apierr.Shape { return apierr.OpenAI }

// Inspect implements Protocol.
func (Chat) Inspect(_ string, data []byte) Inspection {
	if string(data) == "[DONE]" {
		return Inspection{Terminal: true}
	}
	if f := upstreamFailure(data); f != nil {
		return Inspection{Failure: f}
	}
	if u, only, ok := chatUsage(data); ok {
		return Inspection{Usage: usagePtr(u), UsageOnly: only, Content: chatContent(data)}
	}
	return Inspection{Content: chatContent(data)}
}

// EstimatePrompt implements Estimator.
func (Chat) EstimatePrompt(body []byte) int64 { return promptEstimate(body) }

// chatContent reports whether a chunk carries generated content: a
// non-empty delta content (reasoning_content too), refusal or tool call
// arguments. Byte searches, no decode: it runs for every chunk.
func chatContent(data []byte) bool {
	return nonEmptyString(data, `content":"`) || nonEmptyString(data, `"arguments":"`) || nonEmptyString(data, `"refusal":"`)
}

// AskUsage implements UsageAsker: a stream reports its usage (a last chunk
// of no choices) only when stream_options.include_usage asks for it.
func (Chat) AskUsage(body []byte) ([]byte, bool) {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil {
		return body, false
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := req["stream_options"]; ok && json.Unmarshal(raw, &opts) != nil {
		return body, false // not an object: the upstream's to refuse
	}
	var asked bool
	if json.Unmarshal(opts["include_usage"], &asked) == nil && asked {
		return body, false
	}
	opts["include_usage"] = json.RawMessage("true")
	req["stream_options"], _ = json.Marshal(opts) // raw JSON values marshal
	out, err := json.Marshal(req)
	if err != nil {
		return body, false
	}
	return out, true
}

// ResponseModel implements ModelNamer: every chunk, and the answer, name
// the model.
func (Chat) ResponseModel(_ string, data []byte) (string, bool) { return namedModel(data, "") }

// Whole implements Protocol: a JSON object.
func (Chat) Whole(contentType string, body []byte) bool { return jsonObject(contentType, body) }

// Result implements Protocol.
func (Chat) Result(_ string, body []byte) (cost.Usage, bool) {
	u, _, ok := chatUsage(body)
	return u, ok
}

// usagePtr is u on the heap: only an event that reports usage pays the
// allocation (&u of a variable declared beside the test would make every
// event pay it).
func usagePtr(u cost.Usage) *cost.Usage { return &u }

// chatUsage reads {"usage":{"prompt_tokens","completion_tokens","total_tokens"}};
// only: the object has no choices (a stream's usage chunk).
func chatUsage(data []byte) (u cost.Usage, only, ok bool) {
	if !hasObject(data, "usage") {
		return cost.Usage{}, false, false
	}
	var v struct {
		Usage   *cost.Usage       `json:"usage"`
		Choices []json.RawMessage `json:"choices"`
	}
	if json.Unmarshal(data, &v) != nil || v.Usage == nil {
		return cost.Usage{}, false, false
	}
	return v.Usage.Filled(), len(v.Choices) == 0, true
}
