package mockllm

import (
	"strconv"
	"strings"
	"time"
)

// Limits applied by ParseDirectives so a prompt cannot make the fake allocate
// or sleep without bound.
const (
	// MaxTokens caps the tokens directive.
	MaxTokens = 100_000
	// MaxDelay caps the delay directive.
	MaxDelay = time.Minute
	// MaxStatuses caps the length of the status directive list.
	MaxStatuses = 1000
	// MaxModel caps the model directive's length.
	MaxModel = 64
)

// Directives are the controls parsed from a prompt. Integer fields use -1 for
// "not given".
type Directives struct {
	// Tokens is the number of content tokens (chat) or audio chunks
	// (speech); -1 means use the default.
	Tokens int
	// Delay overrides Config.TokenDelay when >= 0; -1 means not given.
	Delay time.Duration
	// AbortAfter kills the connection after that many events were written;
	// -1 means never.
	AbortAfter int
	// Statuses: the k-th request for the prompt (1-based) fails with
	// Statuses[k-1] while k <= len(Statuses). Entries outside 400..599
	// (including unparsable ones, stored as 0) let that request succeed.
	Statuses []int
	// RetryAfter is the Retry-After header value in seconds for 429/503
	// failures; -1 means no header.
	RetryAfter int
	// RetryAfterMS is the retry-after-ms header value for 429/503 failures;
	// -1 means no header.
	RetryAfterMS int
	// Hang: accept the request, then never write headers until the request
	// context is done.
	Hang bool
	// HangAfter writes that many events, then stalls until the request
	// context is done; -1 means never.
	HangAfter int
	// ErrorAfter writes that many events, then the format's error event
	// (chat's data {"error":…}, Responses' and Messages' event: error)
	// and ends the stream cleanly, as an API that fails mid-generation
	// does; -1 means never.
	ErrorAfter int
	// Model, when set, is the model the answer names instead of the
	// request's, as a provider names the dated snapshot that answered
	// (at most MaxModel bytes).
	Model string
}

// ParseDirectives extracts directives from bracketed segments anywhere in the
// prompt. A segment is "[...]" holding one or more whitespace-separated items
// of the form key=value or key. Keys are case-insensitive; unknown keys and
// invalid values are ignored; a later occurrence of a key overrides an
// earlier one. Recognised keys:
//
//	tokens=N  delay=DUR  abort_after=N  status=C1,C2,...
//	retry_after=S  retry_after_ms=M  hang  hang_after=N  error_after=N
//	model=NAME
func ParseDirectives(prompt string) Directives {
	d := Directives{Tokens: -1, Delay: -1, AbortAfter: -1, RetryAfter: -1, RetryAfterMS: -1, HangAfter: -1, ErrorAfter: -1}
	for _, segment := range bracketSegments(prompt) {
		for _, item := range strings.Fields(segment) {
			key, value, _ := strings.Cut(item, "=")
			d.apply(strings.ToLower(key), value)
		}
	}
	return d
}

// bracketSegments returns the texts between '[' and the next ']', using the
// innermost '[' when brackets nest.
func bracketSegments(s string) []string {
	var out []string
	for {
		open := strings.IndexByte(s, '[')
		if open < 0 {
			return out
		}
		s = s[open+1:]
		end := strings.IndexAny(s, "[]")
		if end < 0 {
			return out
		}
		if s[end] == ']' {
			out = append(out, s[:end])
			s = s[end+1:]
			continue
		}
		s = s[end:] // another '[' before ']': restart from it
	}
}

func (d *Directives) apply(key, value string) {
	switch key {
	case "tokens":
		if n, ok := parseCount(value); ok {
			d.Tokens = min(n, MaxTokens)
		}
	case "delay":
		if dur, err := time.ParseDuration(value); err == nil && dur >= 0 {
			d.Delay = min(dur, MaxDelay)
		}
	case "abort_after":
		if n, ok := parseCount(value); ok {
			d.AbortAfter = n
		}
	case "status":
		d.Statuses = parseStatuses(value)
	case "retry_after":
		if n, ok := parseCount(value); ok {
			d.RetryAfter = n
		}
	case "retry_after_ms":
		if n, ok := parseCount(value); ok {
			d.RetryAfterMS = n
		}
	case "hang":
		d.Hang = value == "" || value == "true" || value == "1"
	case "hang_after":
		if n, ok := parseCount(value); ok {
			d.HangAfter = n
		}
	case "error_after":
		if n, ok := parseCount(value); ok {
			d.ErrorAfter = n
		}
	case "model":
		if value != "" {
			d.Model = value[:min(len(value), MaxModel)]
		}
	}
}

// parseCount parses a non-negative decimal int that fits comfortably.
func parseCount(s string) (int, bool) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return 0, false
	}
	return int(n), true
}

func parseStatuses(value string) []int {
	if value == "" {
		return nil
	}
	parts := strings.Split(value, ",")
	if len(parts) > MaxStatuses {
		parts = parts[:MaxStatuses]
	}
	out := make([]int, len(parts))
	for i, p := range parts {
		if n, ok := parseCount(strings.TrimSpace(p)); ok {
			out[i] = n
		}
	}
	return out
}

// failureFor returns the error status the k-th request (1-based) must get, or
// 0 when it should succeed.
func (d Directives) failureFor(k int) int {
	if k < 1 || k > len(d.Statuses) {
		return 0
	}
	if c := d.Statuses[k-1]; c >= 400 && c <= 599 {
		return c
	}
	return 0
}
