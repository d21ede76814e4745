package mockllm

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"
)

// chatRequest is the subset of a chat completion request the fake reads.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Stream   bool          `json:"stream"`
	// StreamOptions.IncludeUsage asks a stream for its usage chunk.
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// promptOf returns the ledger key of a chat request: the content of the last
// message (text parts concatenated when content is an array).
func promptOf(req chatRequest) (string, error) {
	if len(req.Messages) == 0 {
		return "", errors.New("messages must be a non-empty array")
	}
	return messageText(req.Messages[len(req.Messages)-1].Content, nil)
}

// messageText is a message's content: the string, or its text parts
// concatenated, less those drop says are not the prompt (nil: none is).
func messageText(raw json.RawMessage, drop func(text string) bool) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("message content must be a string or an array of parts")
	}
	var buf bytes.Buffer
	for _, p := range parts {
		if (p.Type == "text" || p.Type == "input_text") && (drop == nil || !drop(p.Text)) {
			buf.WriteString(p.Text)
		}
	}
	return buf.String(), nil
}

// Wire shapes of chat completion responses.
type (
	chatChunk struct {
		ID      string        `json:"id"`
		Object  string        `json:"object"`
		Created int64         `json:"created"`
		Model   string        `json:"model"`
		Choices []chunkChoice `json:"choices"`
		Usage   *chatUsage    `json:"usage,omitempty"`
	}
	chunkChoice struct {
		Index        int        `json:"index"`
		Delta        chunkDelta `json:"delta"`
		FinishReason *string    `json:"finish_reason"`
	}
	chunkDelta struct {
		Role    string  `json:"role,omitempty"`
		Content *string `json:"content,omitempty"`
	}
	chatUsage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	}
	chatCompletion struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Created int64        `json:"created"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		Usage   chatUsage    `json:"usage"`
	}
	chatChoice struct {
		Index        int             `json:"index"`
		Message      assistantOutput `json:"message"`
		FinishReason string          `json:"finish_reason"`
	}
	assistantOutput struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
)

// chatJob is one accepted chat generation.
type chatJob struct {
	id      string
	created int64
	model   string
	prompt  string
	tokens  []string
	delay   time.Duration
	// usage: a stream ends with the usage chunk (chat: only when the
	// request set stream_options.include_usage, as OpenAI does).
	reportUsage bool
	// background: a Responses background response (its objects say so).
	background bool
}

func (j chatJob) usage() chatUsage {
	p, n := countWords(j.prompt), len(j.tokens)
	return chatUsage{PromptTokens: p, CompletionTokens: n, TotalTokens: p + n}
}

func (j chatJob) chunk(choices []chunkChoice, usage *chatUsage) []byte {
	b, _ := json.Marshal(chatChunk{
		ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: j.model,
		Choices: choices, Usage: usage,
	})
	return b
}

// chatFormat is OpenAI chat completions.
var chatFormat = textFormat{
	idPrefix: "chatcmpl",
	request: func(body []byte) (string, string, bool, error) {
		var req chatRequest
		if err := decode(body, &req); err != nil {
			return "", "", false, err
		}
		prompt, err := promptOf(req)
		return prompt, req.Model, req.Stream, err
	},
	streamUsage: func(body []byte) bool {
		var req chatRequest
		return json.Unmarshal(body, &req) == nil && req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	},
	fault:    "data: " + `{"error":{"message":"mock error mid-stream","type":"server_error","param":null,"code":"server_error"}}` + "\n\n",
	stream:   (*Server).streamChat,
	complete: (*Server).completeChat,
}

func (s *Server) serveChat(w http.ResponseWriter, r *http.Request) { s.serveText(w, r, chatFormat) }

// streamChat writes the SSE chunk sequence: role, content tokens, stop,
// usage (when the request asked for it), [DONE].
func (s *Server) streamChat(e *emitter, job chatJob) error {
	if err := e.start("text/event-stream"); err != nil {
		return err
	}
	empty := ""
	role := []chunkChoice{{Delta: chunkDelta{Role: "assistant", Content: &empty}}}
	if err := e.sse(job.chunk(role, nil), 0, nil); err != nil {
		return err
	}
	for _, tok := range job.tokens {
		if err := sleep(e.ctx, job.delay); err != nil {
			return err
		}
		delta := []chunkChoice{{Delta: chunkDelta{Content: &tok}}}
		if err := e.sse(job.chunk(delta, nil), 1, []byte(tok)); err != nil {
			return err
		}
	}
	stop := "stop"
	if err := e.sse(job.chunk([]chunkChoice{{FinishReason: &stop}}, nil), 0, nil); err != nil {
		return err
	}
	if job.reportUsage {
		usage := job.usage()
		if err := e.sse(job.chunk([]chunkChoice{}, &usage), 0, nil); err != nil {
			return err
		}
	}
	return e.sse([]byte("[DONE]"), 0, nil)
}

// completeChat generates all tokens (booking each as generated), then writes
// one chat.completion object. abort_after / hang_after apply right after the
// headers, since the body is a single write.
func (s *Server) completeChat(e *emitter, job chatJob) error {
	text, err := generateAll(e, job)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(chatCompletion{
		ID: job.id, Object: "chat.completion", Created: job.created, Model: job.model,
		Choices: []chatChoice{{
			Message:      assistantOutput{Role: "assistant", Content: text},
			FinishReason: "stop",
		}},
		Usage: job.usage(),
	})
	return writeWhole(e, body)
}
