package stream

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCORSPreflight(t *testing.T) {
	t.Parallel()
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	tests := []struct {
		name      string
		origins   []string
		origin    string
		method    string // Access-Control-Request-Method, "" for none
		wantCode  int
		wantAllow string // Access-Control-Allow-Origin
	}{
		{"allowed", []string{"https://app.example"}, "https://app.example", "POST", http.StatusNoContent, "https://app.example"},
		{"allowed by a host pattern", []string{"https://*.example"}, "https://app.example", "GET", http.StatusNoContent, "https://app.example"},
		{"any", []string{"*"}, "https://other.example", "POST", http.StatusNoContent, "*"},
		{"another origin", []string{"https://app.example"}, "https://evil.example", "POST", http.StatusForbidden, ""},
		{"another port", []string{"https://app.example"}, "https://app.example:8443", "POST", http.StatusForbidden, ""},
		{"a method the API does not use", []string{"https://app.example"}, "https://app.example", "PUT", http.StatusNoContent, ""},
		{"a plain OPTIONS is no preflight", []string{"https://app.example"}, "https://app.example", "", http.StatusTeapot, "https://app.example"},
		{"no CORS configured", nil, "https://app.example", "POST", http.StatusTeapot, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, err := withCORS(tc.origins, next)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodOptions, "/v1/chat/completions", nil)
			req.Header.Set("Origin", tc.origin)
			if tc.method != "" {
				req.Header.Set("Access-Control-Request-Method", tc.method)
				req.Header.Set("Access-Control-Request-Headers", "authorization,content-type,idempotency-key,last-event-id,x-api-key,anthropic-version,x-stainless-retry-count")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			res := rec.Result()
			if res.StatusCode != tc.wantCode {
				t.Fatalf("status %d, want %d", res.StatusCode, tc.wantCode)
			}
			if got := res.Header.Get("Access-Control-Allow-Origin"); got != tc.wantAllow {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tc.wantAllow)
			}
			if res.Header.Get("Access-Control-Allow-Credentials") != "" {
				t.Error("credentials allowed")
			}
			switch {
			case tc.wantCode == http.StatusForbidden:
				if !strings.Contains(rec.Body.String(), `"cors_origin_not_allowed"`) {
					t.Errorf("refusal %s, want cors_origin_not_allowed", rec.Body)
				}
			case tc.wantAllow != "" && tc.method != "":
				if got := res.Header.Get("Access-Control-Allow-Methods"); got != tc.method {
					t.Errorf("Access-Control-Allow-Methods %q", got)
				}
				for _, h := range []string{"authorization", "idempotency-key", "last-event-id", "x-api-key", "anthropic-version", "x-stainless-retry-count"} {
					if !strings.Contains(res.Header.Get("Access-Control-Allow-Headers"), h) {
						t.Errorf("Access-Control-Allow-Headers %q lacks %s", res.Header.Get("Access-Control-Allow-Headers"), h)
					}
				}
				if res.Header.Get("Access-Control-Max-Age") != "600" {
					t.Errorf("Access-Control-Max-Age %q", res.Header.Get("Access-Control-Max-Age"))
				}
			}
		})
	}
}

// TestCORSActualRequest: an allowed origin's request gets the headers a
// client resumes with exposed; another origin's gets no CORS header.
func TestCORSActualRequest(t *testing.T) {
	t.Parallel()
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("Location", "/v1/streams/k") })
	h, err := withCORS([]string{"https://app.example"}, next)
	if err != nil {
		t.Fatal(err)
	}
	for origin, allowed := range map[string]bool{"https://app.example": true, "https://evil.example": false} {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		req.Header.Set("Origin", origin)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		exposed := rec.Header().Get("Access-Control-Expose-Headers")
		if !allowed {
			if rec.Header().Get("Access-Control-Allow-Origin") != "" || exposed != "" {
				t.Errorf("%s: CORS headers %v", origin, rec.Header())
			}
			continue
		}
		if rec.Header().Get("Access-Control-Allow-Origin") != origin {
			t.Errorf("%s: Access-Control-Allow-Origin %q", origin, rec.Header().Get("Access-Control-Allow-Origin"))
		}
		for _, want := range []string{"Location", "Idempotency-Key", "Idempotent-Replayed", "Reprise-Attached", "Reprise-Attempts", "Reprise-Upstream"} {
			if !strings.Contains(exposed, want) {
				t.Errorf("Access-Control-Expose-Headers %q lacks %s", exposed, want)
			}
		}
	}
}

func TestCORSInvalidOrigins(t *testing.T) {
	t.Parallel()
	for _, o := range []string{"app.example", "https://app.example/", "https://app.example/path", "ftp://x", "https://*.*.example", "", "https://u@app.example"} {
		if _, err := withCORS([]string{o}, http.NotFoundHandler()); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%q: %v, want ErrInvalidOption", o, err)
		}
	}
}

func TestParseOrigins(t *testing.T) {
	t.Parallel()
	got, err := ParseOrigins(" https://a.example, http://localhost:3000 ,,*")
	if err != nil || strings.Join(got, " ") != "https://a.example http://localhost:3000 *" {
		t.Errorf("ParseOrigins = %q, %v", got, err)
	}
	if _, err := ParseOrigins("https://a.example,a.example"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("a bare host: %v, want ErrInvalidOption", err)
	}
}
