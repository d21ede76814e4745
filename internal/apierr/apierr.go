// Package apierr is reprise's one catalogue of the errors a client can see:
// every code the proxy names itself, with its HTTP status, its type and its
// message, and the JSON a client gets for it.
//
// It owns the table and the wire shape of an error, nothing else: it does
// not decide when an error happens (the HTTP surface and the engine do) and
// it does no I/O. Values are copied out of the table, so a caller that
// adjusts one (a detail in the message, the upstream's status) cannot
// change what the next caller gets.
package apierr

import (
	"encoding/json"
	"net/http"
)

// Error is a client-visible error: OpenAI's shape
// {"error":{"message","type","code"}} plus the status and Retry-After that
// go with it.
type Error struct {
	Status  int    `json:"-"`
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	// RetryAfter, when positive, is sent as Retry-After (seconds).
	RetryAfter int `json:"-"`
	// NoRetry: a retry of the same request cannot change the answer, or
	// would undo or pay again for what it reports, whatever the status
	// says; it is sent as X-Should-Retry: false (as for every Final
	// status).
	NoRetry bool `json:"-"`
}

func (e Error) Error() string { return e.Code + ": " + e.Message }

// Body is the error as a JSON body (or an SSE error event's data).
func (e Error) Body() []byte {
	b, _ := json.Marshal(struct {
		Error Error `json:"error"`
	}{e})
	return b
}

// WithMessage returns e with another message (a detail the table cannot know).
func (e Error) WithMessage(msg string) Error {
	e.Message = msg
	return e
}

// Write answers w with e in OpenAI's shape: its status, Retry-After and
// JSON body.
func (e Error) Write(w http.ResponseWriter) { e.WriteIn(w, OpenAI) }

// TypeFor is OpenAI's error type for a status.
func TypeFor(status int) string {
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

// New returns the catalogue's error for code. A code the catalogue does not
// know (a defect: Known tells) is a 502 server_error that says so.
func New(code string) Error {
	if e, ok := catalogue[code]; ok {
		e.Code = code
		if e.Type == "" {
			e.Type = TypeFor(e.Status)
		}
		return e
	}
	return Error{Status: http.StatusBadGateway, Type: "server_error", Code: code, Message: "the proxy failed (" + code + ")"}
}

// ShouldNotRetry reports whether an answer of status that names code is
// one to send with X-Should-Retry: false: a Final status, or a code of the
// catalogue marked NoRetry. An upstream's own code is never one of the
// catalogue's (Foreign).
func ShouldNotRetry(status int, code string) bool {
	return Final(status) || catalogue[code].NoRetry
}

// Known reports whether the catalogue has code.
func Known(code string) bool {
	_, ok := catalogue[code]
	return ok
}

// upstreamPrefix marks a code an upstream named that is one of the
// catalogue's (which never holds a colon).
const upstreamPrefix = "upstream:"

// Foreign is the code an upstream's own error named code is kept under:
// code itself, unless the catalogue has it (owner_lost, journal_failure,
// upstream_timeout …), then "upstream:"+code — so that neither a reader of
// a key's record nor reprise itself takes the upstream's error for one of
// reprise's. upstream_error, the code reprise gives an upstream's error
// that named none, stays as it is.
func Foreign(code string) string {
	if code == UpstreamError || !Known(code) {
		return code
	}
	return upstreamPrefix + code
}
