package apierr

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Shape is the error shape of a caller's API.
type Shape int

// Shapes.
const (
	// OpenAI: {"error":{"message","type","code"}}.
	OpenAI Shape = iota
	// Anthropic: {"type":"error","error":{"type","message"}}, with the
	// proxy's code beside them (Anthropic's SDKs read type and message).
	Anthropic
)

// BodyIn is the error as a JSON body (or an SSE error event's data) in
// shape s.
func (e Error) BodyIn(s Shape) []byte {
	if s != Anthropic {
		return e.Body()
	}
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code,omitempty"`
		} `json:"error"`
	}{Type: "error", Error: struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    string `json:"code,omitempty"`
	}{anthropicType(e), e.Message, e.Code}})
	return b
}

// WriteIn answers w with e in shape s. An answer a retry cannot change
// says so (X-Should-Retry: false, which the OpenAI and Anthropic SDKs
// honour).
func (e Error) WriteIn(w http.ResponseWriter, s Shape) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	if e.NoRetry || Final(e.Status) {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.BodyIn(s))
}

// Final reports whether an answer of status is one a retry of the same
// request cannot change: 400, 401, 403, 404, 405, 413, 415, 416, 422.
func Final(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusRequestedRangeNotSatisfiable, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// anthropicType is Anthropic's error type for e: its own when the error
// came from an Anthropic upstream, else the one its status names.
func anthropicType(e Error) string {
	if strings.HasSuffix(e.Type, "_error") && e.Type != "server_error" && e.Type != "invalid_request_error" ||
		e.Type == "request_too_large" {
		return e.Type
	}
	switch e.Status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusConflict, http.StatusUnsupportedMediaType,
		http.StatusMethodNotAllowed, http.StatusRequestedRangeNotSatisfiable:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	return "api_error"
}
