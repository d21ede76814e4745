package tests

import (
	"bufio"
	"net/http"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestCORSThroughProxy: with CORSOrigins, a page of an allowed origin can
// stream and resume: the preflights of the POST and of the Location are
// answered, the POST's answer and the Location's (a connection reprise
// takes over from net/http) allow the origin and expose Location and
// Idempotency-Key; another origin gets none of it.
func TestCORSThroughProxy(t *testing.T) {
	t.Parallel()
	const origin = "http://app.example"
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.HTTP.CORSOrigins = []string{origin} }))

	pre := testutil.Do(t, http.MethodOptions, e.URL+"/v1/chat/completions", "", "Origin", origin,
		"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type,idempotency-key")
	_ = testutil.ReadBody(t, pre)
	if pre.StatusCode != http.StatusNoContent || pre.Header.Get("Access-Control-Allow-Origin") != origin {
		t.Fatalf("preflight: %d %v", pre.StatusCode, pre.Header)
	}
	bad := testutil.Do(t, http.MethodOptions, e.URL+"/v1/chat/completions", "", "Origin", "http://evil.example",
		"Access-Control-Request-Method", "POST")
	if body := testutil.ReadBody(t, bad); bad.StatusCode != http.StatusForbidden || !strings.Contains(body, "cors_origin_not_allowed") {
		t.Errorf("preflight of another origin: %d %s", bad.StatusCode, body)
	}

	prompt := uniquePrompt(t, "[tokens=5]")
	resp := testutil.Do(t, http.MethodPost, e.URL+"/v1/chat/completions", chatBody(prompt, true),
		"Authorization", "Bearer sk-test", "Idempotency-Key", "k-cors", "Origin", origin)
	_ = testutil.ReadBody(t, resp)
	checkCORS(t, "POST", resp, origin)
	loc := resp.Header.Get("Location")
	if loc == "" {
		t.Fatal("no Location")
	}
	preGet := testutil.Do(t, http.MethodOptions, e.URL+loc, "", "Origin", origin,
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "last-event-id,authorization")
	_ = testutil.ReadBody(t, preGet)
	if preGet.StatusCode != http.StatusNoContent || !strings.Contains(preGet.Header.Get("Access-Control-Allow-Headers"), "last-event-id") {
		t.Errorf("preflight of the Location: %d %v", preGet.StatusCode, preGet.Header)
	}
	get := testutil.Do(t, http.MethodGet, e.URL+loc, "", "Accept", "text/event-stream", "Authorization", "Bearer sk-test", "Origin", origin)
	if body := testutil.ReadBody(t, get); !strings.Contains(body, "[DONE]") {
		t.Errorf("Location: %d %q", get.StatusCode, body)
	}
	checkCORS(t, "GET of the Location", get, origin)

	other := testutil.Do(t, http.MethodGet, e.URL+loc, "", "Accept", "text/event-stream", "Authorization", "Bearer sk-test", "Origin", "http://evil.example")
	_ = testutil.ReadBody(t, other)
	if v := other.Header.Get("Access-Control-Allow-Origin"); v != "" {
		t.Errorf("another origin allowed: %q", v)
	}
}

func checkCORS(t *testing.T, what string, resp *http.Response, origin string) {
	t.Helper()
	if v := resp.Header.Get("Access-Control-Allow-Origin"); v != origin {
		t.Errorf("%s: Access-Control-Allow-Origin %q", what, v)
	}
	exposed := resp.Header.Get("Access-Control-Expose-Headers")
	for _, h := range []string{"Location", "Idempotency-Key", "Idempotent-Replayed"} {
		if !strings.Contains(exposed, h) {
			t.Errorf("%s: Access-Control-Expose-Headers %q lacks %s", what, exposed, h)
		}
	}
}

// TestSSERetryField: every event stream reprise serves (the POST's answer,
// the Location's) starts with retry: 1000 on its first event, once.
func TestSSERetryField(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=5]")
	resp := testutil.Do(t, http.MethodPost, e.URL+"/v1/chat/completions", chatBody(prompt, true),
		"Authorization", "Bearer sk-test", "Idempotency-Key", "k-retry")
	post := testutil.ReadBody(t, resp)
	get := testutil.ReadBody(t, testutil.Do(t, http.MethodGet, e.URL+resp.Header.Get("Location"), "",
		"Accept", "text/event-stream", "Authorization", "Bearer sk-test"))
	for what, body := range map[string]string{"POST": post, "GET": get} {
		first, _, _ := strings.Cut(body, "\n\n")
		if !hasLine(first, "retry: 1000") {
			t.Errorf("%s: first event %q has no retry: 1000", what, first)
		}
		if n := strings.Count(body, "\nretry:") + strings.Count(body[:min(len(body), 6)], "retry:"); n != 1 {
			t.Errorf("%s: %d retry fields, want 1", what, n)
		}
	}
}

func hasLine(s, line string) bool {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if sc.Text() == line {
			return true
		}
	}
	return false
}
