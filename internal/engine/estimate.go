package engine

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/reprise-dev/reprise/internal/cost"
)

// An Estimator is a Protocol whose usage reprise can estimate for a stream
// that failed or was cancelled before the upstream reported it (whole):
// the prompt by EstimatePrompt, the completion by the events Inspect says
// carry content (Inspection.Content), about one token each. The text
// formats are; speech is not (its deltas are audio).
type Estimator interface {
	// EstimatePrompt estimates the prompt tokens of a request body.
	EstimatePrompt(body []byte) int64
}

// bytesPerToken is the rule of thumb the estimate of a prompt divides its
// text's UTF-8 bytes by: about 4 for English with OpenAI's and Anthropic's
// tokenizers.
const bytesPerToken = 4

// promptEstimate estimates the prompt tokens of a JSON request body: the
// UTF-8 bytes of its text — every string value but identifiers, enums and
// media (model, role, type, ids, URLs, base64 data) — divided by
// bytesPerToken, rounded up. The messages' framing tokens are not counted.
func promptEstimate(body []byte) int64 {
	var v any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return 0
	}
	n := textBytes(v)
	return (n + bytesPerToken - 1) / bytesPerToken
}

// notText are the keys whose string values are no text a model reads as
// tokens (identifiers, enums, media).
var notText = map[string]bool{
	"model": true, "role": true, "type": true, "id": true, "url": true, "image_url": true, "file_id": true,
	"data": true, "file_data": true, "media_type": true, "detail": true, "format": true, "voice": true,
	"tool_call_id": true, "call_id": true, "previous_response_id": true, "service_tier": true, "effort": true,
	"reasoning_effort": true, "tool_choice": true, "response_format": true, "stop_reason": true,
}

// textBytes sums the bytes of v's text (promptEstimate).
func textBytes(v any) int64 {
	switch v := v.(type) {
	case string:
		if strings.HasPrefix(v, "data:") {
			return 0 // an inline image or file: not billed by its bytes
		}
		return int64(len(v))
	case []any:
		var n int64
		for _, e := range v {
			n += textBytes(e)
		}
		return n
	case map[string]any:
		var n int64
		for k, e := range v {
			if !notText[k] {
				n += textBytes(e)
			}
		}
		return n
	}
	return 0
}

// nonEmptyString reports whether data holds key (ending in its value's
// opening quote) followed by a non-empty string.
func nonEmptyString(data []byte, key string) bool {
	for rest := data; ; {
		i := bytes.Index(rest, []byte(key))
		if i < 0 {
			return false
		}
		rest = rest[i+len(key):]
		if len(rest) > 0 && rest[0] != '"' {
			return true
		}
	}
}

// estimated is the usage of a stream that ended without a result: what
// the upstream reported before it broke (reported, nil when nothing),
// completed by estimates where it reported less — the prompt by est's
// EstimatePrompt of body, the completion by content, the events that
// carried content. Its basis is Estimated when an estimate was used,
// Reported when the upstream had reported it all.
func estimated(est Estimator, body []byte, reported *cost.Usage, content int64) (*cost.Usage, cost.Basis) {
	var u cost.Usage
	if reported != nil {
		u = *reported
	}
	basis := cost.Reported
	if u.PromptTokens <= 0 {
		u.PromptTokens, basis = est.EstimatePrompt(body), cost.Estimated
	}
	if content > u.CompletionTokens {
		u.CompletionTokens, basis = content, cost.Estimated
	}
	if basis == cost.Estimated || u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return &u, basis
}
