package tests

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/stream/proxy"
	"github.com/reprise-dev/reprise/web/mockllm"
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
