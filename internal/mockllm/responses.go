package mockllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// ResponsesPath is the OpenAI Responses API.
const ResponsesPath = "/v1/responses"

// responsesRequest is the subset of a Responses request the fake reads:
// input is a string or a list of messages whose content is a string or
// input_text parts.
type responsesRequest struct {
	Model  string          `json:"model"`
	Input  json.RawMessage `json:"input"`
	Stream bool            `json:"stream"`
}

// responsesPrompt is the ledger key of a Responses request: the input
// string, or the text of the last input message.
func responsesPrompt(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", errors.New("input is required")
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var items []chatMessage
	if err := json.Unmarshal(raw, &items); err != nil || len(items) == 0 {
		return "", errors.New("input must be a string or a non-empty array of messages")
	}
	return promptOf(chatRequest{Messages: items})
}

type (
	responseObject struct {
		ID        string           `json:"id"`
		Object    string           `json:"object"`
		CreatedAt int64            `json:"created_at"`
		Status    string           `json:"status"`
		Model     string           `json:"model"`
		Output    []responseItem   `json:"output"`
		Usage     *responsesUsage  `json:"usage"`
		Error     *json.RawMessage `json:"error"`
		// Background is set for a background response only.
		Background bool `json:"background,omitempty"`
	}
	responseItem struct {
		ID      string         `json:"id"`
		Type    string         `json:"type"`
		Role    string         `json:"role"`
		Status  string         `json:"status"`
		Content []responsePart `json:"content"`
	}
	responsePart struct {
		Type        string   `json:"type"`
		Text        string   `json:"text"`
		Annotations []string `json:"annotations"`
	}
	responsesUsage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
)

// responsesFormat is the OpenAI Responses API.
var responsesFormat = textFormat{
	idPrefix: "resp",
	request: func(body []byte) (string, string, bool, error) {
		var req responsesRequest
		if err := decode(body, &req); err != nil {
			return "", "", false, err
		}
		prompt, err := responsesPrompt(req.Input)
		return prompt, req.Model, req.Stream, err
	},
	background: wantsBackground,
	fault:      "event: error\ndata: " + `{"type":"error","code":"server_error","message":"mock error mid-stream","param":null}` + "\n\n",
	stream:     (*Server).streamResponse,
	complete:   (*Server).completeResponse,
}

func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request) {
	s.serveText(w, r, responsesFormat)
}

// response is the response object of job in status, with text so far.
func (j chatJob) response(status, text string) responseObject {
	o := responseObject{ID: j.id, Object: "response", CreatedAt: j.created, Status: status, Model: j.model, Output: []responseItem{}, Background: j.background}
	if status == "completed" {
		o.Output = []responseItem{{ID: "msg_" + j.id, Type: "message", Role: "assistant", Status: "completed",
			Content: []responsePart{{Type: "output_text", Text: text, Annotations: []string{}}}}}
		p, n := countWords(j.prompt), len(j.tokens)
		o.Usage = &responsesUsage{InputTokens: p, OutputTokens: n, TotalTokens: p + n}
	}
	return o
}

// streamResponse writes response.created, the output item and its text
// deltas, then response.completed, each a named event with its
// sequence_number.
func (s *Server) streamResponse(e *emitter, job chatJob) error {
	if err := e.start("text/event-stream"); err != nil {
		return err
	}
	seq := 0
	send := func(name string, fields map[string]any, tokens int, content []byte) error {
		fields["type"], fields["sequence_number"] = name, seq
		seq++
		b, _ := json.Marshal(fields)
		return e.event(name, b, tokens, content)
	}
	item := map[string]any{"id": "msg_" + job.id, "type": "message", "role": "assistant", "status": "in_progress", "content": []any{}}
	part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
	steps := []struct {
		name   string
		fields map[string]any
	}{
		{"response.created", map[string]any{"response": job.response("in_progress", "")}},
		{"response.in_progress", map[string]any{"response": job.response("in_progress", "")}},
		{"response.output_item.added", map[string]any{"output_index": 0, "item": item}},
		{"response.content_part.added", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0, "part": part}},
	}
	for _, st := range steps {
		if err := send(st.name, st.fields, 0, nil); err != nil {
			return err
		}
	}
	var text strings.Builder
	for _, tok := range job.tokens {
		if err := sleep(e.ctx, job.delay); err != nil {
			return err
		}
		text.WriteString(tok)
		if err := send("response.output_text.delta", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0, "delta": tok}, 1, []byte(tok)); err != nil {
			return err
		}
	}
	done := job.response("completed", text.String())
	for _, st := range []struct {
		name   string
		fields map[string]any
	}{
		{"response.output_text.done", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0, "text": text.String()}},
		{"response.content_part.done", map[string]any{"item_id": "msg_" + job.id, "output_index": 0, "content_index": 0, "part": done.Output[0].Content[0]}},
		{"response.output_item.done", map[string]any{"output_index": 0, "item": done.Output[0]}},
		{"response.completed", map[string]any{"response": done}},
	} {
		if err := send(st.name, st.fields, 0, nil); err != nil {
			return err
		}
	}
	return nil
}

// completeResponse generates every token, then writes the response object.
func (s *Server) completeResponse(e *emitter, job chatJob) error {
	text, err := generateAll(e, job)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(job.response("completed", text))
	return writeWhole(e, body)
}
