package testutil

import (
	"encoding/json"
	"net/http"
	"testing"
)

// APIError is an OpenAI-shaped error answer,
// {"error":{"message","type","code"}}, with what came with it.
type APIError struct {
	Status      int    // the HTTP status (0 for a body parsed on its own)
	ContentType string // the answer's Content-Type
	RetryAfter  string // the answer's Retry-After
	Body        string // the body as received
	Message     string
	Type        string
	Code        string // "" when absent or not a string
}

// ParseAPIError parses body as an OpenAI-shaped error (an HTTP body, or the
// data of an event: error), failing the test unless it is one with a
// message and a type.
func ParseAPIError(tb testing.TB, body string) APIError {
	tb.Helper()
	e, ok := parseAPIError(body)
	if !ok {
		tb.Fatalf("%q is not an OpenAI error", body)
	}
	return e
}

// ReadAPIError reads (and closes) resp's body as an OpenAI-shaped error,
// failing the test unless it is one.
func ReadAPIError(tb testing.TB, resp *http.Response) APIError {
	tb.Helper()
	body := ReadBody(tb, resp)
	e, ok := parseAPIError(body)
	if !ok {
		tb.Fatalf("%d %q is not an OpenAI error", resp.StatusCode, body)
	}
	e.Status, e.ContentType, e.RetryAfter = resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Retry-After")
	return e
}

// ExpectAPIError reads resp as an OpenAI-shaped error and fails the test
// unless it has status and code and is served as application/json.
func ExpectAPIError(tb testing.TB, resp *http.Response, status int, code string) APIError {
	tb.Helper()
	e := ReadAPIError(tb, resp)
	if e.Status != status || e.Code != code {
		tb.Fatalf("got %d %s (%s), want %d %s", e.Status, e.Code, e.Body, status, code)
	}
	if e.ContentType != "application/json" {
		tb.Errorf("error Content-Type %q, want application/json", e.ContentType)
	}
	return e
}

func parseAPIError(body string) (APIError, bool) {
	var v struct {
		Error *struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error == nil || v.Error.Message == "" || v.Error.Type == "" {
		return APIError{}, false
	}
	code, _ := v.Error.Code.(string)
	return APIError{Body: body, Message: v.Error.Message, Type: v.Error.Type, Code: code}, true
}
