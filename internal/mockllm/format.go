package mockllm

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// textFormat is what differs between the text endpoints (chat, Responses,
// Messages): how a request names its prompt, what an error event looks
// like, and how a generation is written, streamed or whole.
type textFormat struct {
	idPrefix string
	// request reads a body: the prompt, the model, whether it asks for a
	// stream; an error is a 400.
	request func(body []byte) (prompt, model string, stream bool, err error)
	// streamUsage, when set, reads whether a stream is to report its
	// usage; unset, every stream does.
	streamUsage func(body []byte) bool
	// fault is the format's error event, written by error_after.
	fault string
	// background, when set, reads whether a streamed request asks for
	// background mode (Config.Background).
	background       func(body []byte) bool
	stream, complete func(s *Server, e *emitter, job chatJob) error
}

// serveText serves one request of format f: read, admit (status and hang
// directives), generate, book.
func (s *Server) serveText(w http.ResponseWriter, r *http.Request, f textFormat) {
	body, err := readBody(w, r)
	if err != nil {
		s.rejectBadRequest(w, r, "could not read body: "+err.Error())
		return
	}
	prompt, model, stream, err := f.request(body)
	if err != nil {
		s.rejectBadRequest(w, r, err.Error())
		return
	}
	d := ParseDirectives(prompt)
	rec := s.admit(w, r, prompt, d)
	if rec == nil {
		return
	}
	owned := true // a background generation books its own end
	defer func() {
		if owned {
			rec.abort() // no-op once completed; books panics and early returns
		}
	}()

	n := s.cfg.Tokens
	if d.Tokens >= 0 {
		n = d.Tokens
	}
	job := chatJob{
		id: s.newID(f.idPrefix), created: time.Now().Unix(), model: model,
		prompt: prompt, tokens: Content(prompt, n, s.cfg.Readable), delay: s.delay(d),
		reportUsage: f.streamUsage == nil || f.streamUsage(body),
	}
	rec.prompt(countWords(prompt))
	if d.Model != "" {
		job.model = d.Model
	}
	if job.model == "" {
		job.model = DefaultModel
	}
	e := newEmitter(w, r, rec, d)
	e.fault = []byte(f.fault)
	if stream && s.cfg.Background && f.background != nil && f.background(body) {
		job.background, owned = true, false
		s.runBackground(w, r, f, job, rec, d)
		return
	}
	if stream {
		err = f.stream(s, e, job)
	} else {
		err = f.complete(s, e, job)
	}
	s.finish(r, rec, err)
}

// decode unmarshals a request body into v, naming the failure as a 400's
// message.
func decode(body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return errBadJSON{err}
	}
	return nil
}

type errBadJSON struct{ err error }

func (e errBadJSON) Error() string { return "invalid JSON body: " + e.err.Error() }

// generateAll generates every token of job, booking each as it is made
// (with a stream's pauses), and returns the text: what a non-streamed
// answer holds.
func generateAll(e *emitter, job chatJob) (string, error) {
	var text strings.Builder
	for _, tok := range job.tokens {
		if err := sleep(e.ctx, job.delay); err != nil {
			return "", err
		}
		text.WriteString(tok)
		e.rec.progress(0, 1, []byte(tok))
	}
	return text.String(), nil
}

// writeWhole answers with body as one JSON write: abort_after and
// hang_after act right after the headers, error_after not at all (no
// event stream to put an error event in).
func writeWhole(e *emitter, body []byte) error {
	e.d.AbortAfter, e.d.HangAfter, e.d.ErrorAfter = min(e.d.AbortAfter, 0), min(e.d.HangAfter, 0), -1
	if err := e.start("application/json"); err != nil {
		return err
	}
	return e.body(append(body, '\n'))
}
