package mockllm

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Endpoint paths served by Server.
const (
	ChatPath   = "/v1/chat/completions"
	SpeechPath = "/v1/audio/speech"
)

// DefaultTokens is the content token count when neither Config nor prompt give one.
const DefaultTokens = 16

// DefaultModel is reported when the request names no model.
const DefaultModel = "mock-1"

// maxBodyBytes bounds request bodies.
const maxBodyBytes = 8 << 20

// Config configures a Server. The zero value is valid.
type Config struct {
	// TokenDelay is the pause before each content token (or audio chunk).
	// Default 0 (as fast as possible). The demo uses ~33ms (≈30 tokens/s).
	TokenDelay time.Duration
	// Tokens is the default number of content tokens per chat completion
	// when the prompt gives none. Default DefaultTokens.
	Tokens int
	// Readable makes content readable English text (for the demo page);
	// otherwise deterministic pseudo-words. Both derive from the prompt.
	Readable bool
	// MaxPrompts bounds the prompts the ledger keeps (what each generated,
	// for tests to compare): past it the oldest is forgotten, so a fake
	// that runs for hours (the demo upstream, a soak) does not grow without
	// end. Totals are kept. Default DefaultMaxPrompts.
	MaxPrompts int
	// Background serves OpenAI's background mode on /v1/responses: a
	// streamed request with "background": true runs on after its
	// connection drops, and GET /v1/responses/{id}?stream=true&
	// starting_after=N resumes its events. Default false: the field is
	// ignored and GET /v1/responses/{id} answers 404, as from a provider
	// without it.
	Background bool
	// Logger is optional; nil discards logs.
	Logger *slog.Logger
}

// DefaultMaxPrompts is Config.MaxPrompts' default.
const DefaultMaxPrompts = 20_000

// Server is the fake upstream; it is an http.Handler. Abrupt connection kills
// are done with panic(http.ErrAbortHandler), so do not wrap it in middleware
// that swallows panics.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ledger *Ledger
	nextID atomic.Uint64
	bg     backgrounds
}

// New returns a Server with a fresh ledger.
func New(cfg Config) *Server {
	if cfg.Tokens <= 0 {
		cfg.Tokens = DefaultTokens
	}
	if cfg.TokenDelay < 0 {
		cfg.TokenDelay = 0
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxPrompts <= 0 {
		cfg.MaxPrompts = DefaultMaxPrompts
	}
	l := newLedger()
	l.max = cfg.MaxPrompts
	return &Server{cfg: cfg, log: log, ledger: l}
}

// Ledger returns the server's ledger.
func (s *Server) Ledger() *Ledger { return s.ledger }

// ServeHTTP routes to the chat, Responses, Messages and speech endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == ModelsPath && r.Method == http.MethodGet {
		s.serveModels(w, r)
		return
	}
	if strings.HasPrefix(r.URL.Path, ResponsesPath+"/") && (r.Method == http.MethodGet || r.Method == http.MethodPost) {
		s.serveRetrieve(w, r)
		return
	}
	var serve func(http.ResponseWriter, *http.Request)
	switch r.URL.Path {
	case ChatPath:
		serve = s.serveChat
	case SpeechPath:
		serve = s.serveSpeech
	case ResponsesPath:
		serve = s.serveResponses
	case MessagesPath:
		serve = s.serveMessages
	case EmbeddingsPath:
		serve = s.serveEmbeddings
	default:
		s.ledger.request("")
		s.log.Debug("mockllm: unknown path", "method", r.Method, "path", r.URL.Path)
		writeError(w, http.StatusNotFound, fmt.Sprintf("unknown path %s", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		s.ledger.request("")
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
		return
	}
	serve(w, r)
}

// readBody reads the whole request body so net/http can notice a client
// hang-up (and cancel the request context) while the handler runs.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	return io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
}

// rejectBadRequest books a prompt-less request and answers 400.
func (s *Server) rejectBadRequest(w http.ResponseWriter, r *http.Request, msg string) {
	s.ledger.request("")
	s.log.Debug("mockllm: bad request", "path", r.URL.Path, "error", msg)
	writeError(w, http.StatusBadRequest, msg)
}

// admit books the request and applies the status and hang directives. It
// returns a recorder for the new generation, or nil when the request was
// answered with an injected error.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, prompt string, d Directives) *recorder {
	k := s.ledger.request(prompt)
	if status := d.failureFor(k); status != 0 {
		s.log.Debug("mockllm: injected status", "path", r.URL.Path, "prompt", logPrompt(prompt), "attempt", k, "status", status)
		writeInjectedError(w, r.URL.Path, status, d)
		return nil
	}
	rec := s.ledger.begin(prompt, r.URL.Path)
	s.log.Debug("mockllm: generation started", "path", r.URL.Path, "prompt", logPrompt(prompt), "attempt", k)
	if d.Hang {
		hang(r.Context(), rec)
	}
	return rec
}

// delay returns the per-token delay for d.
func (s *Server) delay(d Directives) time.Duration {
	if d.Delay >= 0 {
		return d.Delay
	}
	return s.cfg.TokenDelay
}

// finish books the end of a generation: aborted if err != nil.
func (s *Server) finish(r *http.Request, rec *recorder, err error) {
	if err != nil {
		rec.abort()
		s.log.Debug("mockllm: generation aborted", "path", r.URL.Path, "error", err)
		return
	}
	rec.complete()
	s.log.Debug("mockllm: generation completed", "path", r.URL.Path)
}

// logPrompt shortens a prompt for log lines.
func logPrompt(p string) string {
	const limit = 80
	if r := []rune(p); len(r) > limit {
		return string(r[:limit]) + "…"
	}
	return p
}

// newID returns a fresh response id with the given prefix.
func (s *Server) newID(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, s.nextID.Add(1))
}
