package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/tests/testutil"
)

// End-to-end tests of requests whose key reprise cannot serve safely:
// they are refused before anything reaches the upstream.

// sendWithKeys posts body to path with one Idempotency-Key header per key.
func sendWithKeys(tb testing.TB, url, body string, keys ...string) *http.Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(waitCtx(tb, testutil.RequestTimeout), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// anthropicError reads resp as Anthropic's error shape and returns its
// error type and reprise's code.
func anthropicError(tb testing.TB, resp *http.Response) (typ, code string) {
	tb.Helper()
	body := readBody(tb, resp)
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Type != "error" || v.Error.Message == "" {
		tb.Fatalf("%d %q is not an Anthropic error", resp.StatusCode, body)
	}
	return v.Error.Type, v.Error.Code
}

// TestUnsafeKeysRefused: the keys "." and ".." (dot segments: their
// Location URL would resolve to another path, so the key could never be
// read back) and a request with two Idempotency-Key headers (which one is
// meant is unknowable) get 400 invalid_idempotency_key in the caller's API
// shape, on every path that takes a key, and cost no upstream call.
func TestUnsafeKeysRefused(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up))
	messages := `{"model":"mock-1","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}`
	tests := []struct {
		name, path, body string
		keys             []string
	}{
		{"dot", chatPath, chatBody("x", true), []string{"."}},
		{"dot dot", chatPath, chatBody("x", true), []string{".."}},
		{"quoted dot dot", chatPath, chatBody("x", false), []string{`".."`}},
		{"two keys", chatPath, chatBody("x", true), []string{"k-one", "k-two"}},
		{"the same key twice", chatPath, chatBody("x", true), []string{"k-same", "k-same"}},
		{"an empty key and a key", chatPath, chatBody("x", true), []string{"", "k-two"}},
		{"two keys on a pass-through", "/v1/embeddings", `{"model":"mock-embed","input":"x"}`, []string{"k-one", "k-two"}},
		{"dot dot on a pass-through", "/v1/embeddings", `{"model":"mock-embed","input":"x"}`, []string{".."}},
		{"dot on messages", messagesPath, messages, []string{"."}},
		{"two keys on messages", messagesPath, messages, []string{"k-one", "k-two"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := sendWithKeys(t, e.URL+tc.path, tc.body, tc.keys...)
			if tc.path == messagesPath {
				if typ, code := anthropicError(t, resp); resp.StatusCode != http.StatusBadRequest || typ != "invalid_request_error" || code != "invalid_idempotency_key" {
					t.Errorf("got %d %s %s, want 400 invalid_request_error invalid_idempotency_key", resp.StatusCode, typ, code)
				}
				return
			}
			testutil.ExpectAPIError(t, resp, http.StatusBadRequest, "invalid_idempotency_key")
		})
	}
	if n := len(up.authorizations()); n != 0 {
		t.Errorf("refused requests reached the upstream %d times", n)
	}
	// One key, sent once, still works: the key itself is fine.
	if evs := readEvents(t, sendWithKeys(t, e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), "k-one"), -1); !hasDone(evs) {
		t.Error("a single key was refused")
	}
}
