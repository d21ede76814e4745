package tests

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/tests/testutil"
	"github.com/reprise-dev/reprise/web/mockllm"
)

// TestJSClientNode runs tests/js (node --test) with the npm openai SDK and
// web/client/reprise.js as its fetch, against this proxy through links
// that cut each stream three times (and one that cuts the POST's answer
// before its head, which the SDK retries itself); then checks the upstream
// ledger: one request and one generation per stream. It runs
// helper.test.mjs too: how the helper ends a stream its Location cannot
// continue, against a node:http server, and that a Location on another
// origin gets no credential. CI installs tests/js
// with npm ci; the test skips only where there is no node.
func TestJSClientNode(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node in PATH")
	}
	dir, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		t.Fatalf("tests/js is not installed (run npm ci in tests/js): %v", err)
	}
	e := newClientEnv(t)

	type jsCase struct {
		Name       string `json:"name"`
		API        string `json:"api"`
		BaseURL    string `json:"baseURL"`
		Prompt     string `json:"prompt"`
		Want       string `json:"want"`
		Tokens     int    `json:"tokens"`
		MaxRetries int    `json:"maxRetries"`
		Drops      int    `json:"drops"`
		link       *dropLink
		cuts       int64
	}
	cases := []*jsCase{
		{Name: "chat, three drops", API: "chat", Tokens: clientTokens, Drops: clientDrops},
		{Name: "responses, three drops", API: "responses", Tokens: clientTokens, Drops: clientDrops},
		// The POST's answer is cut at its first byte: the SDK retries the
		// POST, the helper gives the retry the first try's key, it attaches.
		{Name: "the SDK's retry attaches", API: "chat", Tokens: 20, MaxRetries: 2},
	}
	for _, c := range cases {
		c.Prompt = uniquePrompt(t, "["+c.API+"] [tokens="+itoa(c.Tokens)+"]")
		c.Want = strings.Join(mockllm.Content(c.Prompt, c.Tokens, false), "")
		if c.Drops > 0 {
			c.link, c.cuts = newDropLink(t, e.addr, clientCutBytes, clientDrops), clientDrops
		} else {
			c.link, c.cuts = newDropLink(t, e.addr, 1, 1), 1
		}
		c.BaseURL = c.link.URL
	}
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "reprise.test.mjs", "helper.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REPRISE_CASES="+string(b), "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node --test: %v\n%s", err, out)
	}
	t.Logf("node --test:\n%s", out)
	for _, c := range cases {
		if g := testutil.Settled(t, e.LLM.Ledger(), c.Prompt, 1); g.Generations != 1 || g.Requests != 1 {
			t.Errorf("%s: upstream ledger %+v, want 1 request and 1 generation", c.Name, g)
		}
		if n := c.link.cuts(); n != c.cuts {
			t.Errorf("%s: the link cut %d connections, want %d", c.Name, n, c.cuts)
		}
	}
}
