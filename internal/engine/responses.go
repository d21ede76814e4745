package engine

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
)

// Responses is the OpenAI Responses API: "stream": true asks for SSE whose
// events are named (event: response.output_text.delta …) and numbered
// (sequence_number). The stream completes with response.completed or
// response.incomplete, whose response carries the usage; response.failed
// or an error event is no result.
type Responses struct{}

// Path implements Protocol.
func (Responses) Path() string { return "/v1/responses" }

// Streams implements Protocol.
func (Responses) Streams(body []byte) (bool, error) { return streamField(body) }

// Shape implements Protocol.
func (Responses) Shape() apierr.Shape { return apierr.OpenAI }

// responseEvent is what reprise reads of a Responses stream event.
type responseEvent struct {
	Type     string `json:"type"`
	Response *struct {
		ID    string          `json:"id"`
		Usage *responsesUsage `json:"usage"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"response"`
	Code    json.RawMessage `json:"code"`
	Message string          `json:"message"`
}

type responsesUsage struct {
	Input  int64 `json:"input_tokens"`
	Output int64 `json:"output_tokens"`
	Total  int64 `json:"total_tokens"`
}

func (u *responsesUsage) usage() *cost.Usage {
	if u == nil {
		return nil
	}
	v := cost.Usage{PromptTokens: u.Input, CompletionTokens: u.Output, TotalTokens: u.Total}.Filled()
	return &v
}

// Inspect implements Protocol. The event's kind is its SSE type, or the
// data's "type" when the upstream sends no event lines; only the few
// events that end a stream are decoded.
func (Responses) Inspect(typ string, data []byte) Inspection {
	kind := typ
	if kind == "" {
		kind = dataType(data)
	}
	switch kind {
	case "response.created", "response.completed", "response.incomplete", "response.failed", "error":
	default:
		// Text, reasoning, refusal and arguments deltas are content;
		// audio deltas are no tokens reprise can count.
		return Inspection{Content: strings.HasSuffix(kind, ".delta") && !strings.Contains(kind, "audio")}
	}
	var ev responseEvent
	if json.Unmarshal(data, &ev) != nil {
		ev = responseEvent{}
	}
	switch kind {
	case "response.created":
		if ev.Response != nil {
			return Inspection{Name: ev.Response.ID}
		}
		return Inspection{}
	case "response.completed", "response.incomplete":
		in := Inspection{Terminal: true}
		if ev.Response != nil {
			in.Usage = ev.Response.Usage.usage()
		}
		return in
	case "response.failed":
		e := apierr.New(apierr.UpstreamError).WithMessage("the upstream's response failed")
		if ev.Response != nil && ev.Response.Error != nil {
			e = withDetail(e, ev.Response.Error.Code, ev.Response.Error.Message)
		}
		return Inspection{Failure: &e}
	}
	e := withDetail(apierr.New(apierr.UpstreamError), codeString(ev.Code), ev.Message)
	return Inspection{Failure: &e}
}

// EstimatePrompt implements Estimator.
func (Responses) EstimatePrompt(body []byte) int64 { return promptEstimate(body) }

// ResponseModel implements ModelNamer: response.created (the first event)
// and response.completed carry the response, which names the model, as
// the answer does.
func (Responses) ResponseModel(_ string, data []byte) (string, bool) {
	return namedModel(data, "response")
}

// Whole implements Protocol: a JSON object.
func (Responses) Whole(contentType string, body []byte) bool { return jsonObject(contentType, body) }

// Result implements Protocol: a non-streamed answer is the response object.
func (Responses) Result(_ string, body []byte) (cost.Usage, bool) {
	var v struct {
		Usage *responsesUsage `json:"usage"`
	}
	if json.Unmarshal(body, &v) != nil || v.Usage == nil {
		return cost.Usage{}, false
	}
	return *v.Usage.usage(), true
}

// dataType is the "type" of an event's JSON data, read cheaply: the field
// is first in every event OpenAI and Anthropic send; elsewhere it is
// decoded.
func dataType(data []byte) string {
	const key = `{"type":"`
	if bytes.HasPrefix(data, []byte(key)) {
		rest := data[len(key):]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && !bytes.Contains(rest[:i], []byte(`\`)) {
			return string(rest[:i])
		}
	}
	if len(data) == 0 || data[0] != '{' || !bytes.Contains(data, []byte(`"type"`)) {
		return ""
	}
	var v struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(data, &v)
	return v.Type
}

// withDetail is e with the upstream's code and message, where given.
func withDetail(e apierr.Error, code, msg string) apierr.Error {
	if code = strings.TrimSpace(code); code != "" {
		e.Code = code
	}
	if msg != "" {
		e.Message = msg
	}
	return e
}

// streamField reads a request's "stream": true.
func streamField(body []byte) (bool, error) {
	var req struct {
		Stream bool `json:"stream"`
	}
	err := json.Unmarshal(body, &req)
	return req.Stream, err
}

// Background implements Backgrounder: the request with "background": true,
// so that the upstream runs it on when the connection drops.
func (Responses) Background(body []byte) ([]byte, bool) {
	var req map[string]json.RawMessage
	if json.Unmarshal(body, &req) != nil {
		return body, false
	}
	req["background"] = json.RawMessage("true")
	out, err := json.Marshal(req)
	if err != nil {
		return body, false
	}
	return out, true
}

// Resumable implements Backgrounder: a response.created event of a
// response whose "background" is true names it.
func (Responses) Resumable(typ string, data []byte) (string, bool) {
	if typ == "" {
		typ = dataType(data)
	}
	var ev struct {
		Response *struct {
			ID         string `json:"id"`
			Background bool   `json:"background"`
		} `json:"response"`
	}
	if typ != "response.created" || json.Unmarshal(data, &ev) != nil || ev.Response == nil || !ev.Response.Background || !plainID(ev.Response.ID) {
		return "", false
	}
	return ev.Response.ID, true
}

// plainID reports whether id is an id that is one path segment as it is
// (OpenAI's are resp_ and hex): letters, digits, _ and -.
func plainID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	return strings.IndexFunc(id, func(c rune) bool {
		return (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '_' && c != '-'
	}) < 0
}

// Sequence implements Backgrounder: the event's sequence_number.
func (Responses) Sequence(data []byte) (uint64, bool) {
	var ev struct {
		Seq *uint64 `json:"sequence_number"`
	}
	if json.Unmarshal(data, &ev) != nil || ev.Seq == nil {
		return 0, false
	}
	return *ev.Seq, true
}

// Resume implements Backgrounder: GET /v1/responses/{id}?stream=true&
// starting_after=N.
func (Responses) Resume(id string, after uint64) (path, query string) {
	return "/v1/responses/" + id, "stream=true&starting_after=" + strconv.FormatUint(after, 10)
}

// Cancel implements Backgrounder: POST /v1/responses/{id}/cancel.
func (Responses) Cancel(id string) string { return "/v1/responses/" + id + "/cancel" }
