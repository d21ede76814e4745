package mockllm

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// MaxSpeechChunks caps the audio chunks of one speech response.
const MaxSpeechChunks = 1000

// speechRequest is the subset of a speech request the fake reads.
type speechRequest struct {
	Model          string `json:"model"`
	Input          string `json:"input"`
	Voice          string `json:"voice"`
	ResponseFormat string `json:"response_format"`
	StreamFormat   string `json:"stream_format"`
}

// Wire shapes of speech SSE events.
type (
	speechDelta struct {
		Type  string `json:"type"`
		Audio string `json:"audio"`
	}
	speechDone struct {
		Type  string      `json:"type"`
		Usage speechUsage `json:"usage"`
	}
	speechUsage struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	}
)

// speechJob is one accepted speech generation.
type speechJob struct {
	input  string
	pcm    []byte
	chunks int
	delay  time.Duration
}

func (j speechJob) chunk(i int) []byte { return j.pcm[i*ChunkBytes : (i+1)*ChunkBytes] }

func (s *Server) serveSpeech(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		s.rejectBadRequest(w, r, "could not read body: "+err.Error())
		return
	}
	var req speechRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.rejectBadRequest(w, r, "invalid JSON body: "+err.Error())
		return
	}
	if req.Input == "" {
		s.rejectBadRequest(w, r, "input is required")
		return
	}
	d := ParseDirectives(req.Input)
	rec := s.admit(w, r, req.Input, d)
	if rec == nil {
		return
	}
	defer rec.abort() // no-op once completed; books panics and early returns

	chunks := DefaultSpeechChunks
	if d.Tokens >= 0 {
		chunks = min(d.Tokens, MaxSpeechChunks)
	}
	job := speechJob{input: req.Input, pcm: Audio(req.Input, chunks), chunks: chunks, delay: s.delay(d)}
	e := newEmitter(w, r, rec, d)
	e.fault = []byte("data: " + `{"type":"error","error":{"message":"mock error mid-stream","type":"server_error"}}` + "\n\n")
	switch {
	case req.StreamFormat == "sse":
		err = s.streamSpeech(e, job)
	case req.ResponseFormat == "pcm":
		err = s.rawSpeech(e, job, "audio/pcm", nil)
	default: // "wav" and every format the fake cannot encode
		err = s.rawSpeech(e, job, "audio/wav", wavHeader(len(job.pcm)))
	}
	s.finish(r, rec, err)
}

// streamSpeech writes speech.audio.delta events then speech.audio.done.
func (s *Server) streamSpeech(e *emitter, job speechJob) error {
	if err := e.start("text/event-stream"); err != nil {
		return err
	}
	for i := range job.chunks {
		if err := sleep(e.ctx, job.delay); err != nil {
			return err
		}
		pcm := job.chunk(i)
		ev, _ := json.Marshal(speechDelta{Type: "speech.audio.delta", Audio: base64.StdEncoding.EncodeToString(pcm)})
		if err := e.sse(ev, 1, pcm); err != nil {
			return err
		}
	}
	in := countWords(job.input)
	done, _ := json.Marshal(speechDone{Type: "speech.audio.done", Usage: speechUsage{
		InputTokens: in, OutputTokens: job.chunks, TotalTokens: in + job.chunks,
	}})
	return e.sse(done, 0, nil)
}

// rawSpeech writes header (if any) and the PCM chunk by chunk; each chunk is
// one event for abort_after / hang_after.
func (s *Server) rawSpeech(e *emitter, job speechJob, contentType string, header []byte) error {
	e.w.Header().Set("Content-Length", strconv.Itoa(len(header)+len(job.pcm)))
	if err := e.start(contentType); err != nil {
		return err
	}
	for i := range job.chunks {
		if err := sleep(e.ctx, job.delay); err != nil {
			return err
		}
		pcm := job.chunk(i)
		frame := pcm
		if i == 0 && len(header) > 0 {
			frame = append(append([]byte{}, header...), pcm...)
		}
		if err := e.raw(frame, 1, pcm); err != nil {
			return err
		}
	}
	if job.chunks == 0 && len(header) > 0 {
		return e.body(header)
	}
	return nil
}
