package engine

import (
	"bytes"
	"encoding/json"
	"mime"
	"strings"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
)

// A Protocol is what the engine knows of one upstream API format: which
// request asks for a stream, which event completes a stream (a result),
// which event carries an error (no result), and where the usage is. The
// pump, the tail and salvage are the same for every format; a new format
// is a new Protocol in a file of its own, listed in Protocols.
type Protocol interface {
	// Path is the request path the format is served at, e.g.
	// /v1/chat/completions.
	Path() string
	// Streams reports whether a request body (a JSON object) asks for an
	// event stream; an error names a field of the wrong type.
	Streams(body []byte) (bool, error)
	// Inspect says what one upstream event is. It runs for every event of
	// every stream: it must be cheap for the common event.
	Inspect(typ string, data []byte) Inspection
	// Result reads the usage of a non-streamed answer.
	Result(contentType string, body []byte) (cost.Usage, bool)
	// Whole reports whether a non-streamed 2xx answer to a request that
	// asked for a stream is still the format's answer (an upstream that
	// ignored "stream" and answered whole), not something that is none
	// (an HTML page, an empty body, no Content-Type): that is no result.
	Whole(contentType string, body []byte) bool
	// Shape is the error shape of the format's callers: of the error events
	// that end a stream without a result, and of the proxy's own answers.
	Shape() apierr.Shape
}

// Inspection is what an upstream event means.
type Inspection struct {
	// Terminal: the event completes the stream; it is the last journaled.
	Terminal bool
	// Failure, when set, is the upstream's error the event carries: the
	// stream ends as no result, and readers get Failure as an error event
	// instead of the upstream's own.
	Failure *apierr.Error
	// Usage, when set, is the token usage the event reports (it may come
	// in parts: a field it leaves zero keeps what was seen before).
	Usage *cost.Usage
	// UsageOnly: the event carries nothing but the usage (chat's last
	// chunk): a stream whose client did not ask for usage (UsageAsker)
	// does not journal it.
	UsageOnly bool
	// Name, when set, is the upstream's own id of the generation (a
	// Responses response id): clients may name the key by it.
	Name string
	// Content: the event carries generated content (a delta of text,
	// reasoning or a tool call's arguments): about one token. A stream
	// that ends before the upstream reported its usage has its completion
	// tokens estimated by these events (estimate.go).
	Content bool
}

// A UsageAsker is a Protocol whose streams report their usage only when the
// request asks (chat's stream_options.include_usage). The engine asks for
// every stream, so each generation's cost is known, and keeps the answer
// (Inspection.UsageOnly events) from clients that did not ask.
type UsageAsker interface {
	// AskUsage returns a streaming request's body changed to ask for the
	// usage, and true when it changed it (the client did not ask).
	AskUsage(body []byte) ([]byte, bool)
}

// A ModelNamer is a Protocol whose answers name the model that answered —
// which may not be the one the request named (a dated snapshot of it):
// OpenTelemetry's gen_ai.response.model.
type ModelNamer interface {
	// ResponseModel reads the model an upstream event (typ, data) or a
	// whole answer (typ "") names, if it names one. A stream's first
	// events and its terminal one are asked, until one names it.
	ResponseModel(typ string, data []byte) (string, bool)
}

// An Assembler is a Protocol that can give a non-streamed request the answer
// assembled from a completed streamed generation of the same request: what
// the upstream would have answered had the request not asked for a stream.
type Assembler interface {
	// Assemble returns the format's non-streamed answer (application/json)
	// built from the events of a completed stream, in order (the journaled
	// type and data of each), and usage, the generation's usage as recorded
	// (nil: unknown; the events may carry it too). An error wraps
	// ErrAssemble.
	Assemble(events []journal.Event, usage *cost.Usage) ([]byte, error)
}

// maxModelName bounds the response model reported (an upstream's string,
// in a metric attribute).
const maxModelName = 128

// namedModel reads the model a JSON object names: at its top level (a
// chunk or a whole answer), or in its field nest (an event that carries
// the response object).
func namedModel(data []byte, nest string) (string, bool) {
	if !bytes.Contains(data, []byte(`"model"`)) {
		return "", false
	}
	var v map[string]json.RawMessage
	if json.Unmarshal(data, &v) != nil {
		return "", false
	}
	raw := v["model"]
	if inner, ok := v[nest]; ok && nest != "" {
		var in map[string]json.RawMessage
		if json.Unmarshal(inner, &in) == nil && in["model"] != nil {
			raw = in["model"]
		}
	}
	var m string
	if json.Unmarshal(raw, &m) != nil || m == "" {
		return "", false
	}
	return m[:min(len(m), maxModelName)], true
}

// Protocols lists the formats the engine serves, one per path.
func Protocols() []Protocol { return []Protocol{Chat{}, Responses{}, Messages{}, Speech{}} }

// ProtocolOf returns the format served at path.
func ProtocolOf(path string) (Protocol, bool) {
	for _, p := range Protocols() {
		if p.Path() == path {
			return p, true
		}
	}
	return nil, false
}

// ShapeOf is the error shape of the format served at path: OpenAI's for a
// path no format serves.
func ShapeOf(path string) apierr.Shape {
	if p, ok := ProtocolOf(path); ok {
		return p.Shape()
	}
	return apierr.OpenAI
}

// upstreamFailure reads an error an upstream put in an event's data, in
// OpenAI's shape {"error":{"message","type","code"}} or as a typed event
// {"type":"error", "message", "code"} / {"type":"error","error":{...}}.
// Both name the error first, as the APIs write them: the check costs no
// scan of the (nearly always harmless) event.
func upstreamFailure(data []byte) *apierr.Error {
	if !leadsWith(data, `"error"`) && !leadsWith(data, `"type":"error"`) {
		return nil
	}
	type detail struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	var v struct {
		Type  string  `json:"type"`
		Error *detail `json:"error"`
		detail
	}
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	d := v.Error
	if d == nil {
		if v.Type != "error" {
			return nil
		}
		d = &v.detail
		d.Type = ""
	}
	e := apierr.New(apierr.UpstreamError)
	if d.Message != "" {
		e.Message = d.Message
	}
	if d.Type != "" {
		e.Type = d.Type
	}
	if code := codeString(d.Code); code != "" {
		e.Code = code
	}
	return &e
}

// jsonObject reports whether an answer is a JSON object served as JSON
// (application/json or a +json type): what the JSON APIs answer whole.
func jsonObject(contentType string, body []byte) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return false
	}
	t := bytes.TrimLeft(body, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(t)
}

// codeString is an error code given as a JSON string or number; "" for
// null or anything else.
func codeString(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var n json.Number
	if json.Unmarshal(raw, &n) == nil {
		return n.String()
	}
	return ""
}

// leadsWith reports whether data is a JSON object whose text starts with
// key (after the brace and any whitespace).
func leadsWith(data []byte, key string) bool {
	if len(data) == 0 || data[0] != '{' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(data[1:], " \t\r\n"), []byte(key))
}

// hasObject reports whether data may hold "field": {…}: a cheap check
// before a JSON decode on the per-event path.
func hasObject(data []byte, field string) bool {
	i := bytes.Index(data, []byte(`"`+field+`"`))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(data[i+len(field)+2:], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return false
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	return len(rest) > 0 && rest[0] == '{'
}
