package classify

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter caps any server-directed wait.
const MaxRetryAfter = 24 * time.Hour

// RetryAfter reads a server-directed wait from, in order: the retry-after-ms
// header (milliseconds, possibly fractional), Retry-After (delay-seconds or
// an HTTP-date relative to now), and a JSON body's retry_after (seconds,
// top level or inside "error"). ok is false when none holds a usable value.
func RetryAfter(h http.Header, body []byte, now time.Time) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if d, ok := parseMillis(v); ok {
			return d, true
		}
	}
	if v := h.Get("Retry-After"); v != "" {
		if d, ok := ParseRetryAfter(v, now); ok {
			return d, true
		}
	}
	return bodyRetryAfter(body)
}

// ParseRetryAfter parses a Retry-After value: delay-seconds or an HTTP-date.
// A date in the past is a zero wait.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if errors.Is(err, strconv.ErrRange) {
			return MaxRetryAfter, true // all digits, just huge
		}
		if err != nil {
			return 0, false
		}
		return capped(float64(n) * float64(time.Second)), true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := t.Sub(now); d > 0 {
		return min(d, MaxRetryAfter), true
	}
	return 0, true
}

func parseMillis(v string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return capped(f * float64(time.Millisecond)), true
}

func bodyRetryAfter(body []byte) (time.Duration, bool) {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return 0, false
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return 0, false
	}
	raw, ok := top["retry_after"]
	if !ok || string(raw) == "null" { // {"error": {"retry_after": …}}; "error" may also be a plain string
		var inner map[string]json.RawMessage
		if json.Unmarshal(top["error"], &inner) != nil {
			return 0, false
		}
		raw = inner["retry_after"]
	}
	var secs float64
	if len(raw) == 0 || string(raw) == "null" || json.Unmarshal(raw, &secs) != nil || secs < 0 || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return 0, false
	}
	return capped(secs * float64(time.Second)), true
}

func capped(ns float64) time.Duration {
	if ns >= float64(MaxRetryAfter) {
		return MaxRetryAfter
	}
	return time.Duration(ns)
}
