package mockllm

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is the OpenAI error envelope.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// errorKind maps a status to OpenAI-style type and code strings.
func errorKind(status int) (typ, code string) {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error", "invalid_request"
	case http.StatusUnauthorized:
		return "invalid_request_error", "invalid_api_key"
	case http.StatusForbidden:
		return "permission_error", "forbidden"
	case http.StatusNotFound:
		return "invalid_request_error", "not_found"
	case http.StatusMethodNotAllowed:
		return "invalid_request_error", "method_not_allowed"
	case http.StatusTooManyRequests:
		return "requests", "rate_limit_exceeded"
	case http.StatusServiceUnavailable:
		return "server_error", "service_unavailable"
	}
	if status >= 500 {
		return "server_error", "server_error"
	}
	return "invalid_request_error", "status_" + strconv.Itoa(status)
}

// writeError writes an OpenAI-shaped JSON error.
func writeError(w http.ResponseWriter, status int, message string) {
	typ, code := errorKind(status)
	body, _ := json.Marshal(apiError{Error: apiErrorBody{Message: message, Type: typ, Code: code}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeAnthropicError writes an Anthropic-shaped JSON error.
func writeAnthropicError(w http.ResponseWriter, status int, message string) {
	typ := "api_error"
	switch {
	case status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case status == 529 || status == http.StatusServiceUnavailable:
		typ = "overloaded_error"
	case status < 500:
		typ = "invalid_request_error"
	}
	body, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": message}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// writeInjectedError answers the request with the status a status directive
// demands, adding retry hints for 429 and 503, in the path's API shape.
func writeInjectedError(w http.ResponseWriter, path string, status int, d Directives) {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if d.RetryAfter >= 0 {
			w.Header().Set("Retry-After", strconv.Itoa(d.RetryAfter))
		}
		if d.RetryAfterMS >= 0 {
			w.Header().Set("retry-after-ms", strconv.Itoa(d.RetryAfterMS))
		}
	}
	if path == MessagesPath {
		writeAnthropicError(w, status, fmt.Sprintf("mock status %d", status))
		return
	}
	writeError(w, status, fmt.Sprintf("mock status %d", status))
}
