package classify

import (
	"encoding/json"
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
	if len(body) == 0 || body[0] != '{' {
		return 0, false
	}
	var v struct {
		RetryAfter *float64 `json:"retry_after"`
		Error      *struct {
			RetryAfter *float64 `json:"retry_after"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0, false
	}
	s := v.RetryAfter
	if s == nil && v.Error != nil {
		s = v.Error.RetryAfter
	}
	if s == nil || *s < 0 || math.IsNaN(*s) || math.IsInf(*s, 0) {
		return 0, false
	}
	return capped(*s * float64(time.Second)), true
}

func capped(ns float64) time.Duration {
	if ns >= float64(MaxRetryAfter) {
		return MaxRetryAfter
	}
	return time.Duration(ns)
}
