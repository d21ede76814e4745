package engine

import (
	"encoding/json"

	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream/apierr"
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
	if u, ok := chatUsage(data); ok {
		return Inspection{Usage: usagePtr(u)}
	}
	return Inspection{}
}

// Whole implements Protocol: a JSON object.
func (Chat) Whole(contentType string, body []byte) bool { return jsonObject(contentType, body) }

// Result implements Protocol.
func (Chat) Result(_ string, body []byte) (resume.Usage, bool) { return chatUsage(body) }

// usagePtr is u on the heap: only an event that reports usage pays the
// allocation (&u of a variable declared beside the test would make every
// event pay it).
func usagePtr(u resume.Usage) *resume.Usage { return &u }

// chatUsage reads {"usage":{"prompt_tokens","completion_tokens","total_tokens"}}.
func chatUsage(data []byte) (resume.Usage, bool) {
	if !hasObject(data, "usage") {
		return resume.Usage{}, false
	}
	var v struct {
		Usage *resume.Usage `json:"usage"`
	}
	if json.Unmarshal(data, &v) != nil || v.Usage == nil {
		return resume.Usage{}, false
	}
	return v.Usage.Filled(), true
}
