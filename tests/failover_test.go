package tests

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
)

// TestFailover: with an ordered list of upstreams, a generation the first
// refuses before its first byte (503s until its policy gives up) is
// answered by the next; Reprise-Upstream and the status name the one that
// served; a stream that broke after its first event never moves.
func TestFailover(t *testing.T) {
	t.Parallel()
	var down atomic.Int32
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		down.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"message":"down","type":"server_error","code":"down"}}`))
	}))
	t.Cleanup(failing.Close)
	second := mockllm.New(mockllm.Config{})
	secondSrv := httptest.NewServer(second)
	t.Cleanup(secondSrv.Close)
	secondURL, _ := url.Parse(secondSrv.URL)
	failingURL, _ := url.Parse(failing.URL)
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.Upstream, c.Fallbacks = failingURL, []*url.URL{secondURL}
		c.Policy = fastRetries()
	}))

	prompt := uniquePrompt(t, "[tokens=4]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-failover")
	checkComplete(t, readEvents(t, resp, -1), prompt, 4)
	if got := resp.Header.Get("Reprise-Upstream"); got != secondURL.Host {
		t.Errorf("Reprise-Upstream %q, want the second upstream %q", got, secondURL.Host)
	}
	if n := down.Load(); n != int32(fastRetries().MaxAttempts) {
		t.Errorf("the first upstream got %d requests, want its policy's %d attempts", n, fastRetries().MaxAttempts)
	}
	if attempts := resp.Header.Get("Reprise-Attempts"); attempts != "4" {
		t.Errorf("Reprise-Attempts %s, want 4 (3 to the first, 1 to the second)", attempts)
	}
	st := waitState(t, e, "k-failover", "completed")
	if g := second.Ledger().Get(prompt); g.Generations != 1 {
		t.Errorf("the second upstream's ledger %+v, want 1 generation", g)
	}
	replay := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-failover")
	readEvents(t, replay, -1)
	if got := replay.Header.Get("Reprise-Upstream"); got != secondURL.Host {
		t.Errorf("a replay's Reprise-Upstream %q (status %+v)", got, st)
	}

	// Broken after the first event: no failover, the key fails.
	broken := uniquePrompt(t, "[tokens=10] [abort_after=3]")
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(broken, true), "Idempotency-Key", "k-failover-broken"), -1)
	if last := lastEvent(t, evs); last.Type != "error" || !strings.Contains(last.Data, classify.CodeInterrupted) {
		t.Errorf("a stream broken mid-way ended %+v, want upstream_interrupted", last)
	}
	if g := second.Ledger().Get(broken); g.Generations != 1 {
		t.Errorf("a broken stream was asked again: %+v", g)
	}
}

// TestRoutes: named upstreams route by path and by model, each with its
// own key in static auth; a request no route serves is a clear 502.
func TestRoutes(t *testing.T) {
	t.Parallel()
	type upstream struct {
		llm  *mockllm.Server
		url  *url.URL
		keys chan string
	}
	start := func() upstream {
		llm := mockllm.New(mockllm.Config{})
		keys := make(chan string, 16)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			keys <- r.Header.Get("Authorization") + r.Header.Get("X-Api-Key")
			llm.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		return upstream{llm, u, keys}
	}
	claude, gpt, rest := start(), start(), start()
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys = auth.Static, []string{"pk-1"}
		c.Routes = []proxy.Route{
			{Name: "claude", URL: claude.url, Key: "sk-claude", Paths: []string{"/v1/messages"}},
			{Name: "gpt", URL: gpt.url, Key: "sk-gpt", Models: []string{"gpt-*"}},
			{Name: "rest", URL: rest.url, Key: "sk-rest", Paths: []string{"/v1/chat/"}},
		}
	}))
	post := func(path, body, key string) *http.Response {
		return do(t, "POST", e.URL+path, body, "Idempotency-Key", key, "Authorization", "Bearer pk-1")
	}
	readEvents(t, post(messagesPath, `{"model":"claude-x","max_tokens":9,"stream":true,"messages":[{"role":"user","content":"to claude"}]}`, "k-r1"), -1)
	if got := <-claude.keys; got != "sk-claude" || claude.llm.Ledger().Get("to claude").Generations != 1 {
		t.Errorf("messages: claude saw key %q, ledger %+v", got, claude.llm.Ledger().Get("to claude"))
	}
	resp := post(chatPath, `{"model":"gpt-9","stream":true,"messages":[{"role":"user","content":"to gpt"}]}`, "k-r2")
	readEvents(t, resp, -1)
	if got := <-gpt.keys; got != "Bearer sk-gpt" || resp.Header.Get("Reprise-Upstream") != "gpt" {
		t.Errorf("chat for gpt-9: key %q, Reprise-Upstream %q", got, resp.Header.Get("Reprise-Upstream"))
	}
	resp = post(chatPath, `{"model":"llama","stream":true,"messages":[{"role":"user","content":"to rest"}]}`, "k-r3")
	readEvents(t, resp, -1)
	if got := <-rest.keys; got != "Bearer sk-rest" || resp.Header.Get("Reprise-Upstream") != "rest" {
		t.Errorf("chat for llama: key %q, Reprise-Upstream %q", got, resp.Header.Get("Reprise-Upstream"))
	}
	resp = post(responsesPath, `{"model":"llama","stream":true,"input":"nobody"}`, "k-r4")
	if body := readBody(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "no_upstream") {
		t.Errorf("a request no route serves: %d %s, want 404 no_upstream", resp.StatusCode, body)
	}
}
