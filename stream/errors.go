package stream

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/reprise-dev/reprise/resume"
)

// apiError is the OpenAI error shape every client-visible error takes.
type apiError struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	// RetryAfter, when positive, is sent as Retry-After (seconds).
	RetryAfter int `json:"-"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func (e *apiError) body() []byte {
	b, _ := json.Marshal(struct {
		Error *apiError `json:"error"`
	}{e})
	return b
}

func errorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "authentication_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func newError(status int, code, msg string) *apiError {
	return &apiError{Status: status, Code: code, Message: msg, Type: errorType(status)}
}

func writeError(w http.ResponseWriter, e *apiError) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.body())
}

// Errors reprise itself answers with.
var (
	errNotFound       = newError(http.StatusNotFound, "not_found", "no such route")
	errKeyNotFound    = newError(http.StatusNotFound, "key_not_found", "no stream for this key")
	errBadCursor      = newError(http.StatusBadRequest, "invalid_last_event_id", "Last-Event-ID is not a position this proxy issued")
	errBadKey         = newError(http.StatusBadRequest, "invalid_idempotency_key", "Idempotency-Key must be 1-255 visible ASCII characters (bare or as a structured-field string)")
	errInvalidJSON    = newError(http.StatusBadRequest, "invalid_json", "request body is not valid JSON")
	errNotObject      = newError(http.StatusBadRequest, "invalid_request", "request body must be a JSON object")
	errTooLarge       = newError(http.StatusRequestEntityTooLarge, "request_too_large", "request body is over the limit")
	errMediaType      = newError(http.StatusUnsupportedMediaType, "unsupported_media_type", "Content-Type must be application/json")
	errMismatch       = newError(http.StatusUnprocessableEntity, "idempotency_key_mismatch", "this Idempotency-Key was used with a different request body")
	errInProgress     = &apiError{Status: http.StatusConflict, Type: "invalid_request_error", Code: "idempotency_key_in_progress", Message: "a request with this Idempotency-Key is still in progress; retry later", RetryAfter: 1}
	errUnavailable    = &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "journal_unavailable", Message: "the journal is not available", RetryAfter: 1}
	errShuttingDown   = &apiError{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "shutting_down", Message: "this instance is shutting down", RetryAfter: 1}
	errInterrupted    = newError(http.StatusBadGateway, "upstream_interrupted", "the upstream stream broke before it completed; no result was stored")
	errOwnerLost      = newError(http.StatusBadGateway, resume.OwnerLost, "the instance running this generation stopped before it completed")
	errUnreachable    = newError(http.StatusBadGateway, "upstream_unreachable", "the upstream could not be reached")
	errUpstreamBody   = newError(http.StatusBadGateway, "upstream_invalid_response", "the upstream response could not be read")
	errProxyShutdown  = newError(http.StatusServiceUnavailable, "proxy_shutdown", "the proxy shut down before the generation completed")
	errJournalFailure = newError(http.StatusServiceUnavailable, "journal_failure", "the journal could not store the stream")
	errNoKey          = newError(http.StatusUnauthorized, "missing_api_key", "this proxy needs an API key: Authorization: Bearer <key>")
	errBadProxyKey    = newError(http.StatusUnauthorized, "invalid_api_key", "the API key is not valid for this proxy")
	errTooManyGens    = &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "too_many_generations", Message: "too many generations are running for this caller; retry later", RetryAfter: 1}
	errTooManyReaders = &apiError{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "too_many_readers", Message: "too many readers are connected to this key", RetryAfter: 1}
	errStreamTooLarge = newError(http.StatusBadGateway, "stream_too_large", "the upstream stream exceeded the proxy's events or bytes limit; no result was stored")
	errInvalidEvent   = newError(http.StatusBadGateway, "upstream_invalid_event", "the upstream sent an event that is not valid UTF-8 SSE; no result was stored")
	errBadRange       = newError(http.StatusBadRequest, "invalid_range", "the Range header is malformed; want bytes=<first>-[<last>] or bytes=-<suffix>")
	errUnsatisfiable  = newError(http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable", "the Range is outside the stored result")
)

// methodNotAllowed answers 405 with the allowed methods.
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, newError(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed; use "+allow))
	}
}
