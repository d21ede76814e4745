package mockllm

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
)

// MessagesPath is Anthropic's Messages API.
const MessagesPath = "/v1/messages"

// messagesRequest is the subset of a Messages request the fake reads; its
// messages' content is a string or text blocks, as chat's.
type messagesRequest struct {
	Model     string        `json:"model"`
	MaxTokens int           `json:"max_tokens"`
	Messages  []chatMessage `json:"messages"`
	Stream    bool          `json:"stream"`
}

type (
	messageObject struct {
		ID           string         `json:"id"`
		Type         string         `json:"type"`
		Role         string         `json:"role"`
		Model        string         `json:"model"`
		Content      []messageBlock `json:"content"`
		StopReason   *string        `json:"stop_reason"`
		StopSequence *string        `json:"stop_sequence"`
		Usage        messagesUsage  `json:"usage"`
	}
	messageBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	messagesUsage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	}
)

// messagesFormat is Anthropic's Messages API.
var messagesFormat = textFormat{
	idPrefix: "msg",
	request: func(body []byte) (string, string, bool, error) {
		var req messagesRequest
		if err := decode(body, &req); err != nil {
			return "", "", false, err
		}
		prompt, err := messagesPrompt(req.Messages)
		return prompt, req.Model, req.Stream, err
	},
	fault:    "event: error\ndata: " + `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded (mock)"}}` + "\n\n",
	stream:   (*Server).streamMessage,
	complete: (*Server).completeMessage,
}

// messagesPrompt is the ledger key of a Messages request: the text of its
// last user message, less the text blocks an agent adds to the user's turn
// for the model alone (Claude Code's <system-reminder> blocks). A message
// after it in another role (Claude Code ends its requests with a "system"
// message describing its environment) is not the prompt either.
func messagesPrompt(msgs []chatMessage) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("messages must be a non-empty array")
	}
	last := msgs[len(msgs)-1]
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			last = msgs[i]
			break
		}
	}
	return messageText(last.Content, isSystemReminder)
}

// isSystemReminder says whether a text block is wholly a
// <system-reminder> element.
func isSystemReminder(text string) bool {
	t := strings.TrimSpace(text)
	return strings.HasPrefix(t, "<system-reminder>") && strings.HasSuffix(t, "</system-reminder>")
}

func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	s.serveText(w, r, messagesFormat)
}

// message is job's message object with text and the given stop reason.
func (j chatJob) message(text string, stop *string, output int) messageObject {
	content := []messageBlock{}
	if stop != nil {
		content = []messageBlock{{Type: "text", Text: text}}
	}
	return messageObject{ID: j.id, Type: "message", Role: "assistant", Model: j.model, Content: content, StopReason: stop,
		Usage: messagesUsage{InputTokens: countWords(j.prompt), OutputTokens: output}}
}

// streamMessage writes message_start, one text block (start, a ping,
// text_delta per token, stop), message_delta with the stop reason and the
// output tokens, and message_stop.
func (s *Server) streamMessage(e *emitter, job chatJob) error {
	if err := e.start("text/event-stream"); err != nil {
		return err
	}
	send := func(name string, v any, tokens int, content []byte) error {
		b, _ := json.Marshal(v)
		return e.event(name, b, tokens, content)
	}
	if err := send("message_start", map[string]any{"type": "message_start", "message": job.message("", nil, 1)}, 0, nil); err != nil {
		return err
	}
	if err := send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": messageBlock{Type: "text"}}, 0, nil); err != nil {
		return err
	}
	if err := send("ping", map[string]any{"type": "ping"}, 0, nil); err != nil {
		return err
	}
	for _, tok := range job.tokens {
		if err := sleep(e.ctx, job.delay); err != nil {
			return err
		}
		delta := map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": tok}}
		if err := send("content_block_delta", delta, 1, []byte(tok)); err != nil {
			return err
		}
	}
	stop := "end_turn"
	for _, ev := range []struct {
		name string
		v    any
	}{
		{"content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}},
		{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": len(job.tokens)}}},
		{"message_stop", map[string]any{"type": "message_stop"}},
	} {
		if err := send(ev.name, ev.v, 0, nil); err != nil {
			return err
		}
	}
	return nil
}

// completeMessage generates every token, then writes the message.
func (s *Server) completeMessage(e *emitter, job chatJob) error {
	text, err := generateAll(e, job)
	if err != nil {
		return err
	}
	stop := "end_turn"
	body, _ := json.Marshal(job.message(text, &stop, len(job.tokens)))
	return writeWhole(e, body)
}
