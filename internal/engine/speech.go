package engine

import (
	"bytes"
	"encoding/json"
	"mime"
	"strings"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
)

// Speech is OpenAI text to speech: "stream_format": "sse" asks for SSE
// (speech.audio.delta events, then speech.audio.done with the usage); any
// other answer is the audio itself, which carries no usage.
type Speech struct{}

// Path implements Protocol.
func (Speech) Path() string { return "/v1/audio/speech" }

// Shape implements Protocol.
func (Speech) Shape() apierr.Shape { return apierr.OpenAI }

// Streams implements Protocol.
func (Speech) Streams(body []byte) (bool, error) {
	var req struct {
		StreamFormat string `json:"stream_format"`
	}
	err := json.Unmarshal(body, &req)
	return req.StreamFormat == "sse", err
}

const speechDone = "speech.audio.done"

// Inspect implements Protocol. The terminal event is speech.audio.done, by
// its SSE event type or by its data's "type".
func (Speech) Inspect(typ string, data []byte) Inspection {
	if typ != speechDone && !bytes.Contains(data, []byte(speechDone)) {
		if f := upstreamFailure(data); f != nil {
			return Inspection{Failure: f}
		}
		return Inspection{}
	}
	var v struct {
		Type  string `json:"type"`
		Usage *struct {
			Input  int64 `json:"input_tokens"`
			Output int64 `json:"output_tokens"`
			Total  int64 `json:"total_tokens"`
		} `json:"usage"`
	}
	ok := len(data) > 0 && data[0] == '{' && json.Unmarshal(data, &v) == nil
	if typ != speechDone && (!ok || v.Type != speechDone) {
		return Inspection{}
	}
	in := Inspection{Terminal: true}
	if ok && v.Usage != nil {
		u := cost.Usage{PromptTokens: v.Usage.Input, CompletionTokens: v.Usage.Output, TotalTokens: v.Usage.Total}.Filled()
		in.Usage = &u
	}
	return in
}

// Whole implements Protocol: the audio itself (an upstream that ignored
// stream_format), or a JSON object.
func (Speech) Whole(contentType string, body []byte) bool {
	mt, _, _ := mime.ParseMediaType(contentType)
	return strings.HasPrefix(mt, "audio/") && len(body) > 0 || jsonObject(contentType, body)
}

// Result implements Protocol: an audio answer reports no usage.
func (Speech) Result(string, []byte) (cost.Usage, bool) { return cost.Usage{}, false }
