package engine

import (
	"encoding/json"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
)

// Messages is Anthropic's Messages API: "stream": true asks for SSE of
// named events — message_start (the input tokens), content_block_*,
// message_delta (the output tokens so far), ping, and message_stop, the
// terminal event. An error event (overloaded_error …) is no result. Its
// callers get Anthropic-shaped errors.
type Messages struct{}

// Path implements Protocol.
func (Messages) Path() string { return "/v1/messages" }

// Streams implements Protocol.
func (Messages) Streams(body []byte) (bool, error) { return streamField(body) }

// Shape implements Protocol.
func (Messages) Shape() apierr.Shape { return apierr.Anthropic }

type messagesUsage struct {
	Input  int64 `json:"input_tokens"`
	Output int64 `json:"output_tokens"`
}

func (u *messagesUsage) usage() *cost.Usage {
	if u == nil {
		return nil
	}
	v := cost.Usage{PromptTokens: u.Input, CompletionTokens: u.Output}
	return &v
}

// Inspect implements Protocol. Only message_start, message_delta and
// error are decoded; message_stop ends the stream.
func (Messages) Inspect(typ string, data []byte) Inspection {
	kind := typ
	if kind == "" {
		kind = dataType(data)
	}
	switch kind {
	case "content_block_delta":
		return Inspection{Content: true} // text, thinking or a tool call's input
	case "message_stop":
		return Inspection{Terminal: true}
	case "message_start":
		var v struct {
			Message struct {
				Usage *messagesUsage `json:"usage"`
			} `json:"message"`
		}
		if json.Unmarshal(data, &v) == nil {
			return Inspection{Usage: v.Message.Usage.usage()}
		}
	case "message_delta":
		var v struct {
			Usage *messagesUsage `json:"usage"`
		}
		if json.Unmarshal(data, &v) == nil && v.Usage != nil {
			// The delta reports output tokens so far; the input tokens
			// came with message_start.
			return Inspection{Usage: &cost.Usage{CompletionTokens: v.Usage.Output}}
		}
	case "error":
		var v struct {
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		e := apierr.New(apierr.UpstreamError)
		if json.Unmarshal(data, &v) == nil {
			e = withDetail(e, v.Error.Type, v.Error.Message)
			if v.Error.Type != "" {
				e.Type = v.Error.Type
			}
		}
		return Inspection{Failure: &e}
	}
	return Inspection{}
}

// EstimatePrompt implements Estimator.
func (Messages) EstimatePrompt(body []byte) int64 { return promptEstimate(body) }

// ResponseModel implements ModelNamer: message_start (the first event)
// carries the message, which names the model, as the answer does.
func (Messages) ResponseModel(_ string, data []byte) (string, bool) {
	return namedModel(data, "message")
}

// Whole implements Protocol: a JSON object.
func (Messages) Whole(contentType string, body []byte) bool { return jsonObject(contentType, body) }

// Result implements Protocol: a non-streamed answer is the message.
func (Messages) Result(_ string, body []byte) (cost.Usage, bool) {
	var v struct {
		Usage *messagesUsage `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil {
		return cost.Usage{}, false
	}
	return v.Usage.usage().Filled(), true
}
