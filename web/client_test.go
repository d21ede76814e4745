package web

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientHelperServed: /reprise.js is the embedded module, with a
// JavaScript content type (browsers refuse a module script without one).
func TestClientHelperServed(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/reprise.js", nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, want := range []string{"export function createFetch", "export const fetch", "Last-Event-ID"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/reprise.js lacks %q", want)
		}
	}
}
