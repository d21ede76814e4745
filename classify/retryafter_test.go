package classify_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
)

// fixedNow is a Sunday; every HTTP-date below is relative to it.
var fixedNow = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{"seconds", "120", 120 * time.Second, true},
		{"one second", "1", time.Second, true},
		{"zero", "0", 0, true},
		{"leading zeros", "007", 7 * time.Second, true},
		{"surrounding spaces", "  5  ", 5 * time.Second, true},
		{"tab", "\t5", 5 * time.Second, true},
		{"one day exactly", "86400", classify.MaxRetryAfter, true},
		{"just over a day capped", "86401", classify.MaxRetryAfter, true},
		{"large capped", "31536000", classify.MaxRetryAfter, true},
		{"max uint64 capped", "18446744073709551615", classify.MaxRetryAfter, true},
		{"IMF-fixdate future", "Sun, 01 Jun 2025 12:01:30 GMT", 90 * time.Second, true},
		{"IMF-fixdate now", "Sun, 01 Jun 2025 12:00:00 GMT", 0, true},
		{"IMF-fixdate past", "Sat, 31 May 2025 23:00:00 GMT", 0, true},
		{"IMF-fixdate far past", "Thu, 01 Jan 1970 00:00:00 GMT", 0, true},
		{"IMF-fixdate beyond a day capped", "Tue, 03 Jun 2025 12:00:00 GMT", classify.MaxRetryAfter, true},
		{"IMF-fixdate with spaces", "  Sun, 01 Jun 2025 12:00:10 GMT ", 10 * time.Second, true},
		{"RFC 850 date", "Sunday, 01-Jun-25 12:01:00 GMT", time.Minute, true},
		{"ANSI C date", "Sun Jun  1 12:02:00 2025", 2 * time.Minute, true},
		{"empty", "", 0, false},
		{"only spaces", "   ", 0, false},
		{"negative", "-1", 0, false},
		{"plus sign", "+5", 0, false},
		{"fraction", "1.5", 0, false},
		{"unit suffix", "5s", 0, false},
		{"two numbers", "1 2", 0, false},
		{"hex", "0x10", 0, false},
		{"garbage", "soon", 0, false},
		{"non-ASCII digit", "٣", 0, false},
		{"invalid date", "Sun, 32 Jun 2025 12:00:00 GMT", 0, false},
		{"date without zone", "Sun, 01 Jun 2025 12:00:00", 0, false},
		{"ISO 8601 is not HTTP", "2025-06-01T12:01:00Z", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := classify.ParseRetryAfter(tt.value, fixedNow)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestParseRetryAfterOverflow: delay-seconds is 1*DIGIT with no upper
// bound (RFC 9110 §10.2.3); RFC 9111 §1.2.2 asks a value too large to
// represent to be taken as the greatest one. ParseRetryAfter instead
// rejects it (strconv.ParseUint range error → ok false), so a 429 saying
// "not for a very long time" is retried after plain backoff.
func TestParseRetryAfterOverflow(t *testing.T) {
	got, ok := classify.ParseRetryAfter("18446744073709551616", fixedNow)
	if got != classify.MaxRetryAfter || !ok {
		t.Errorf("ParseRetryAfter(2^64) = %v, %v; want %v, true", got, ok, classify.MaxRetryAfter)
	}
}

func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		ms, ra string // retry-after-ms and Retry-After headers ("" = absent)
		body   string
		want   time.Duration
		wantOK bool
	}{
		{name: "nothing"},
		{name: "ms beats Retry-After", ms: "250", ra: "10", want: 250 * time.Millisecond, wantOK: true},
		{name: "ms beats body", ms: "250", body: `{"retry_after":9}`, want: 250 * time.Millisecond, wantOK: true},
		{name: "ms fractional", ms: "1.5", want: 1500 * time.Microsecond, wantOK: true},
		{name: "ms sub-millisecond", ms: "0.25", want: 250 * time.Microsecond, wantOK: true},
		{name: "ms zero", ms: "0", ra: "10", want: 0, wantOK: true},
		{name: "ms with spaces", ms: " 40 ", want: 40 * time.Millisecond, wantOK: true},
		{name: "ms exponent", ms: "1e3", want: time.Second, wantOK: true},
		{name: "ms huge capped", ms: "1e12", want: classify.MaxRetryAfter, wantOK: true},
		{name: "ms invalid falls back to Retry-After", ms: "soon", ra: "3", want: 3 * time.Second, wantOK: true},
		{name: "ms negative falls back", ms: "-5", ra: "3", want: 3 * time.Second, wantOK: true},
		{name: "ms NaN falls back", ms: "NaN", ra: "3", want: 3 * time.Second, wantOK: true},
		{name: "ms Inf falls back", ms: "+Inf", ra: "3", want: 3 * time.Second, wantOK: true},
		{name: "ms out of float range falls back", ms: "1e400", ra: "3", want: 3 * time.Second, wantOK: true},
		{name: "ms invalid, nothing else", ms: "x", wantOK: false},
		{name: "Retry-After seconds", ra: "4", want: 4 * time.Second, wantOK: true},
		{name: "Retry-After beats body", ra: "4", body: `{"retry_after":9}`, want: 4 * time.Second, wantOK: true},
		{name: "Retry-After date", ra: "Sun, 01 Jun 2025 12:00:20 GMT", want: 20 * time.Second, wantOK: true},
		{name: "Retry-After past date is zero", ra: "Sun, 01 Jun 2025 11:00:00 GMT", body: `{"retry_after":9}`, want: 0, wantOK: true},
		{name: "Retry-After invalid falls back to body", ra: "soon", body: `{"retry_after":1.5}`, want: 1500 * time.Millisecond, wantOK: true},
		{name: "body top level", body: `{"retry_after": 1.5}`, want: 1500 * time.Millisecond, wantOK: true},
		{name: "body inside error", body: `{"error":{"message":"slow down","retry_after":2}}`, want: 2 * time.Second, wantOK: true},
		{name: "body top level beats error", body: `{"retry_after":1,"error":{"retry_after":5}}`, want: time.Second, wantOK: true},
		{name: "body null top level uses error", body: `{"retry_after":null,"error":{"retry_after":2}}`, want: 2 * time.Second, wantOK: true},
		{name: "body zero", body: `{"retry_after":0}`, want: 0, wantOK: true},
		{name: "body huge capped", body: `{"retry_after":1e300}`, want: classify.MaxRetryAfter, wantOK: true},
		{name: "body negative", body: `{"retry_after":-1}`},
		{name: "body string", body: `{"retry_after":"5"}`},
		{name: "body no field", body: `{"error":{"message":"slow down"}}`},
		{name: "body error null", body: `{"error":null}`},
		{name: "body truncated", body: `{"retry_after":1`},
		{name: "body array", body: `[{"retry_after":1}]`},
		{name: "body html", body: `<html>429</html>`},
		{name: "body number", body: `5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.ms != "" {
				h.Set("Retry-After-Ms", tt.ms)
			}
			if tt.ra != "" {
				h.Set("Retry-After", tt.ra)
			}
			var body []byte
			if tt.body != "" {
				body = []byte(tt.body)
			}
			got, ok := classify.RetryAfter(h, body, fixedNow)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("RetryAfter(ms=%q, ra=%q, body=%q) = %v, %v; want %v, %v", tt.ms, tt.ra, tt.body, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestRetryAfterHeaderCase: the header names are matched whatever their
// case on the wire (Go canonicalizes them on receipt; Set does here).
func TestRetryAfterHeaderCase(t *testing.T) {
	h := http.Header{}
	h.Set("retry-after-ms", "20")
	h.Set("RETRY-AFTER", "9")
	if got, ok := classify.RetryAfter(h, nil, fixedNow); got != 20*time.Millisecond || !ok {
		t.Errorf("RetryAfter = %v, %v; want 20ms, true", got, ok)
	}
}

// TestRetryAfterBodyLenient: two bodies an upstream may plausibly send
// whose retry_after is ignored. encoding/json fails the whole decode when
// "error" is a string (the type mismatch on the sibling field), and the
// '{' check refuses JSON with leading whitespace.
func TestRetryAfterBodyLenient(t *testing.T) {
	for _, body := range []string{
		`{"error":"rate limited","retry_after":3}`,
		" \n{\"retry_after\":3}",
	} {
		if got, ok := classify.RetryAfter(http.Header{}, []byte(body), fixedNow); got != 3*time.Second || !ok {
			t.Errorf("RetryAfter(body %q) = %v, %v; want 3s, true", body, got, ok)
		}
	}
}

func checkRange(tb testing.TB, what string, d time.Duration, ok bool) {
	tb.Helper()
	if d < 0 || d > classify.MaxRetryAfter {
		tb.Fatalf("%s = %v, outside [0, %v]", what, d, classify.MaxRetryAfter)
	}
	if !ok && d != 0 {
		tb.Fatalf("%s = %v with ok false", what, d)
	}
}

func FuzzParseRetryAfter(f *testing.F) {
	now := fixedNow.Unix()
	for _, v := range []string{
		"0", "1", "120", "86401", "18446744073709551615", "18446744073709551616", "-1", "1.5", " 7 ", "",
		"Sun, 01 Jun 2025 12:01:30 GMT", "Sunday, 01-Jun-25 12:01:00 GMT", "Sun Jun  1 12:02:00 2025",
		"Thu, 01 Jan 1970 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", "soon", "٣",
	} {
		f.Add(v, now)
	}
	f.Add("Sun, 01 Jun 2025 12:01:30 GMT", int64(-1<<63))
	f.Add("Sun, 01 Jun 2025 12:01:30 GMT", int64(1<<62))
	f.Fuzz(func(t *testing.T, v string, unix int64) {
		at := time.Unix(unix, 0)
		d, ok := classify.ParseRetryAfter(v, at)
		checkRange(t, "ParseRetryAfter", d, ok)
		if d2, ok2 := classify.ParseRetryAfter(v, at); d2 != d || ok2 != ok {
			t.Fatalf("ParseRetryAfter(%q) not deterministic: %v,%v then %v,%v", v, d, ok, d2, ok2)
		}
		if s := strings.TrimSpace(v); s != "" && len(s) <= 19 && strings.Trim(s, "0123456789") == "" && !ok {
			t.Fatalf("ParseRetryAfter(%q): delay-seconds rejected", v)
		}
	})
}

func FuzzRetryAfter(f *testing.F) {
	f.Add("", "", []byte(nil))
	f.Add("1500", "9", []byte(`{"retry_after":3}`))
	f.Add("1.5", "", []byte(nil))
	f.Add("NaN", "3", []byte(nil))
	f.Add("1e400", "", []byte(`{"retry_after":1e300}`))
	f.Add("", "soon", []byte(`{"retry_after": 1.5}`))
	f.Add("", "", []byte(`{"error":{"retry_after":2}}`))
	f.Add("", "", []byte(`{"retry_after":-1,"error":{"retry_after":"x"}}`))
	f.Add("-0", "Sun, 01 Jun 2025 12:01:30 GMT", []byte(`{`))
	f.Fuzz(func(t *testing.T, ms, ra string, body []byte) {
		h := http.Header{}
		if ms != "" {
			h.Set("Retry-After-Ms", ms)
		}
		if ra != "" {
			h.Set("Retry-After", ra)
		}
		d, ok := classify.RetryAfter(h, body, fixedNow)
		checkRange(t, "RetryAfter", d, ok)
		// Retry-After is read only when retry-after-ms is absent or unusable.
		if ms == "" && ra != "" {
			if want, wantOK := classify.ParseRetryAfter(ra, fixedNow); wantOK && (d != want || !ok) {
				t.Fatalf("RetryAfter(ra=%q) = %v,%v; ParseRetryAfter says %v", ra, d, ok, want)
			}
		}
	})
}
