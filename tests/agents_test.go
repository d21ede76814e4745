package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// The agent CLIs (Claude Code, Codex) are real clients of reprise here:
// the npm packages pinned in tests/agents (npm ci --prefix tests/agents),
// run as their users run them, keyless, through a toxiproxy link that
// cuts their first two streams. Their own retries must then cost no
// generation of their own.

const (
	// agentsDir is the nested npm project that pins the agent CLIs.
	agentsDir = "agents"
	// agentTimeout bounds one run of an agent CLI; a run takes a few
	// seconds (three attempts, two backoffs, one 2 s generation).
	agentTimeout = 90 * time.Second
	// agentTokens and agentDelay make the demo model's answer last about
	// 2 s, so that both cuts fall in the middle of its generation.
	agentTokens = 200
	agentDelay  = "10ms"
	// agentCutBytes is what each cut connection carries of the answer:
	// past the head and the first events, about a quarter of the stream
	// in either format.
	agentCutBytes = 6000
	// agentCuts is how many of a run's connections the link cuts.
	agentCuts = 2
	// agentKey is the credential the CLIs send: the tenant's.
	agentKey = "sk-agent-test"
)

// agentCLI returns the path of an agent CLI installed in tests/agents. The
// test skips where it is not installed, unless CI is set: then it fails.
func agentCLI(t *testing.T, name string) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join(agentsDir, "node_modules", ".bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed (CI is set): npm ci --prefix tests/agents: %v", name, err)
		}
		t.Skipf("%s is not installed (npm ci --prefix tests/agents; CI=1 makes this a failure): %v", name, err)
	}
	return bin
}

// agentLink is a toxiproxy link in front of reprise that cuts its first
// agentCuts connections once each carried agentCutBytes of an answer, and
// records every request the client sent through it.
type agentLink struct {
	URL   string
	cut   *cutFirst
	sniff *sniffRequests
}

func newAgentLink(t *testing.T, addr string) *agentLink {
	t.Helper()
	return newAgentLinkWith(t, addr, map[string]any{"bytes": agentCutBytes, "times": agentCuts})
}

// newAgentLinkWith is newAgentLink with the cut toxic's attributes (a
// cutFirst's: bytes, times, stall).
func newAgentLinkWith(t *testing.T, addr string, attrs map[string]any) *agentLink {
	t.Helper()
	l, err := newToxi().link(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	if err := l.add("sniff", sniffType, "upstream", nil); err != nil {
		t.Fatal(err)
	}
	if err := l.addCloser("cut", cutFirstType, "downstream", attrs); err != nil {
		t.Fatal(err)
	}
	if err := l.seal(); err != nil {
		t.Fatal(err)
	}
	cut, ok := l.p.Toxics.GetToxic("cut").Toxic.(*cutFirst)
	if !ok {
		t.Fatal("the cut toxic is not a cutFirst")
	}
	sniff, ok := l.p.Toxics.GetToxic("sniff").Toxic.(*sniffRequests)
	if !ok {
		t.Fatal("the sniff toxic is not a sniffRequests")
	}
	return &agentLink{URL: "http://" + l.addr, cut: cut, sniff: sniff}
}

// runAgent runs an agent CLI in dir with env only (nothing of the test's
// own environment but PATH leaks in), bounded by agentTimeout; the whole
// process group is killed when it ends, so nothing it started outlives it.
func runAgent(t *testing.T, bin string, args []string, dir string, env []string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), agentTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // what it left running, if anything
	}
	if ctx.Err() != nil {
		t.Fatalf("%s did not end within %s\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), agentTimeout, out.String(), errOut.String())
	}
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errOut.String())
	}
	t.Logf("%s ran %s", filepath.Base(bin), time.Since(start).Round(time.Millisecond))
	return out.String(), errOut.String()
}

// agentCase is one run of an agent CLI against a fresh reprise.
type agentCase struct {
	name string
	opts []envOption
	// optOut: the CLI sends Reprise-Keyless-Retry: off on every request,
	// set the way its users set a header.
	optOut bool
	// want is the generations the prompt costs.
	want int
}

// optOutHeader is the request header that opts a request out of keyless
// retry recognition.
const optOutHeader = "Reprise-Keyless-Retry"

// agentCases: the CLI's retries attach to the stream it left, unless its
// requests opt out or reprise recognises no keyless retry: then each retry
// generates again.
func agentCases() []agentCase {
	off := withConfig(func(c *proxy.Config) { c.HTTP.KeylessRetryWindow = -1 })
	return []agentCase{
		{name: "keyless retries attach", want: 1},
		{name: "opted out by header", optOut: true, want: agentCuts + 1},
		{name: "keyless retries off", opts: []envOption{off}, want: agentCuts + 1},
	}
}

// TestAgentClaudeCode runs Claude Code (claude -p, its JSON output) through
// a link that cuts its first two streams of /v1/messages. Its retries, the
// same body without a key, get the whole answer and cost no generation;
// opted out by header (ANTHROPIC_CUSTOM_HEADERS) or with recognition off,
// each costs one.
func TestAgentClaudeCode(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "claude")
	for _, c := range agentCases() {
		t.Run(c.name, func(t *testing.T) { // one at a time: a CLI is heavy beside the suite
			e := newEnv(t, c.opts...)
			link := newAgentLink(t, e.addr)
			prompt := uniquePrompt(t, fmt.Sprintf("[tokens=%d] [delay=%s]", agentTokens, agentDelay))
			env := claudeEnv(t, link.URL)
			if c.optOut {
				env = append(env, "ANTHROPIC_CUSTOM_HEADERS="+optOutHeader+": off")
			}
			stdout, _ := runAgent(t, bin, []string{"-p", prompt, "--output-format", "json"}, t.TempDir(), env)
			checkAgentRun(t, e, link, prompt, claudeResult(t, stdout), c)
		})
	}
}

// claudeEnv is Claude Code's environment for a run through the link at
// url: a home of its own, the test tenant's key, nothing sent elsewhere.
func claudeEnv(t *testing.T, url string) []string {
	t.Helper()
	home := t.TempDir()
	return []string{
		"HOME=" + home,
		"CLAUDE_CONFIG_DIR=" + filepath.Join(home, ".claude"),
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(home, ".local", "share"),
		"XDG_STATE_HOME=" + filepath.Join(home, ".local", "state"),
		"ANTHROPIC_BASE_URL=" + url,
		"ANTHROPIC_API_KEY=" + agentKey,
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_ERROR_REPORTING=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
}

// claudeResult reads claude -p's JSON output: its result, which must be a
// success.
func claudeResult(t *testing.T, stdout string) string {
	t.Helper()
	var res struct {
		Result  string `json:"result"`
		IsError bool   `json:"is_error"`
		Subtype string `json:"subtype"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("claude's output is no JSON result: %v\n%s", err, stdout)
	}
	if res.IsError || res.Subtype != "success" {
		t.Errorf("claude's result is an error (%s): %s", res.Subtype, stdout)
	}
	return res.Result
}

// codexConfigExample is the provider file docs show for Codex; the test
// runs Codex with it, its base_url pointed at the link.
const (
	codexConfigExample = "../docs/examples/codex-config.toml"
	codexExampleURL    = `base_url = "http://localhost:8080/v1"`
)

// TestAgentCodex runs Codex (codex exec, with the provider file of
// docs/examples) through a link that cuts its first two streams of
// /v1/responses. Its retries, the same JSON without a key, get the whole
// answer and cost no generation; opted out by header (the provider's
// http_headers) or with recognition off, each costs one.
func TestAgentCodex(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "codex")
	example, err := os.ReadFile(codexConfigExample)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(example, []byte(codexExampleURL)) {
		t.Fatalf("%s has no line %s", codexConfigExample, codexExampleURL)
	}
	for _, c := range agentCases() {
		t.Run(c.name, func(t *testing.T) { // one at a time: a CLI is heavy beside the suite
			e := newEnv(t, c.opts...)
			link := newAgentLink(t, e.addr)
			prompt := uniquePrompt(t, fmt.Sprintf("[tokens=%d] [delay=%s]", agentTokens, agentDelay))
			home, work := t.TempDir(), t.TempDir()
			config := bytes.Replace(example, []byte(codexExampleURL), []byte(`base_url = "`+link.URL+`/v1"`), 1)
			if c.optOut { // the example ends with the provider's table
				config = fmt.Appendf(config, "http_headers = { %q = \"off\" }\n", optOutHeader)
			}
			if err := os.WriteFile(filepath.Join(home, "config.toml"), config, 0o600); err != nil {
				t.Fatal(err)
			}
			last := filepath.Join(work, "last-message.txt")
			runAgent(t, bin, []string{
				"exec", "--skip-git-repo-check", "--ephemeral", "--sandbox", "read-only", "--color", "never",
				"--output-last-message", last, prompt,
			}, work, []string{
				"HOME=" + home,
				"CODEX_HOME=" + home,
				"OPENAI_API_KEY=" + agentKey,
			})
			got, err := os.ReadFile(last)
			if err != nil {
				t.Fatalf("codex wrote no last message: %v", err)
			}
			checkAgentRun(t, e, link, prompt, strings.TrimSuffix(string(got), "\n"), c)
		})
	}
}

// checkAgentRun checks what an agent CLI made of its run: the demo model's
// whole answer to prompt, c.want generations of it upstream, both cuts
// made, every request keyless (and opted out, if c says so); and logs
// what the CLI sent.
func checkAgentRun(t *testing.T, e *env, link *agentLink, prompt, got string, c agentCase) {
	t.Helper()
	want := c.want
	if text := strings.Join(mockllm.Content(prompt, agentTokens, false), ""); got != text {
		t.Errorf("the CLI's answer\n%q\nwant the demo model's whole answer\n%q", got, text)
	}
	cuts := min(link.cut.cuts.Load(), agentCuts)
	g := testutil.Settled(t, e.LLM.Ledger(), prompt, want)
	t.Logf("upstream generations of the prompt: %d (%d requests; the link cut %d streams)", g.Generations, g.Requests, cuts)
	if g.Generations != want {
		t.Errorf("upstream ledger %+v, want %d generation(s)", g, want)
	}
	if cuts != agentCuts {
		t.Errorf("the link cut %d streams, want %d", cuts, agentCuts)
	}
	reqs := link.sniff.requests()
	logAgentRequests(t, reqs, link.cut.cutAt())
	posts := 0
	for _, r := range reqs {
		if r.Method != http.MethodPost {
			continue
		}
		posts++
		if k := r.Header.Get("Idempotency-Key"); k != "" {
			t.Errorf("the CLI sent Idempotency-Key %q: this test is about keyless retries", k)
		}
		if v := r.Header.Get(optOutHeader); c.optOut != (v == "off") {
			t.Errorf("the CLI sent %s: %q (opted out: %v)", optOutHeader, v, c.optOut)
		}
	}
	if posts != agentCuts+1 {
		t.Errorf("the CLI sent %d POSTs, want %d: the first and a retry after each cut", posts, agentCuts+1)
	}
}

// logAgentRequests logs what the CLI sent through the link: each request's
// connection, path, the headers that name a retry or a session, whether
// its body is the first one's, and how long after the last cut it came.
func logAgentRequests(t *testing.T, reqs []sniffed, cuts []time.Time) {
	t.Helper()
	var first *sniffed
	for i := range reqs {
		r := &reqs[i]
		body := "other body"
		switch {
		case r.Method != http.MethodPost:
			body = "no body"
		case first == nil:
			first, body = r, fmt.Sprintf("%d bytes", len(r.Body))
		case bytes.Equal(r.Body, first.Body):
			body = "the first body, byte for byte"
		case bytes.Equal(canonicalJSON(r.Body), canonicalJSON(first.Body)):
			body = "the first body's JSON, other bytes"
		}
		after := ""
		for j := len(cuts) - 1; j >= 0; j-- {
			if cuts[j].Before(r.At) {
				after = fmt.Sprintf(" (%s after cut %d)", r.At.Sub(cuts[j]).Round(time.Millisecond), j+1)
				break
			}
		}
		var hs []string
		for _, h := range []string{"Idempotency-Key", "X-Stainless-Retry-Count", "X-Claude-Code-Session-Id", "Session-Id", "Last-Event-ID", optOutHeader} {
			if v := r.Header.Get(h); v != "" {
				hs = append(hs, h+": "+v)
			}
		}
		if first != nil && r != first {
			if d := headerChanges(first.Header, r.Header); d != "" {
				body += "; headers changed: " + d
			}
		}
		t.Logf("request %d%s: conn %d %s %s [%s] %s", i+1, after, r.Conn, r.Method, r.Target, strings.Join(hs, ", "), body)
		if r == first {
			t.Logf("request %d's headers: %s", i+1, headerNames(r.Header))
		}
	}
}

// headerNames lists h's names, sorted.
func headerNames(h http.Header) string {
	names := slices.Sorted(maps.Keys(h))
	return strings.Join(names, ", ")
}

// headerChanges names the headers whose values differ between a and b.
func headerChanges(a, b http.Header) string {
	var changed []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if !slices.Equal(a[k], b[k]) {
			changed = append(changed, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			changed = append(changed, k+" (new)")
		}
	}
	return strings.Join(changed, ", ")
}

// TestAgentDocs: the Codex provider the docs show is the example file the
// test runs Codex with, less its comments.
func TestAgentDocs(t *testing.T) {
	t.Parallel()
	example, err := os.ReadFile(codexConfigExample)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for line := range strings.Lines(string(example)) {
		if !strings.HasPrefix(line, "#") {
			want = append(want, line)
		}
	}
	for _, doc := range []string{"../README.md", "../docs/agents.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		_, block, ok := strings.Cut(string(b), "```toml\n")
		block, _, closed := strings.Cut(block, "```")
		if !ok || !closed {
			t.Errorf("%s shows no ```toml block", doc)
			continue
		}
		if block != strings.Join(want, "") {
			t.Errorf("%s shows the Codex provider\n%s\nwant %s without its comments\n%s", doc, block, codexConfigExample, strings.Join(want, ""))
		}
	}
}

// TestAgentClaudeCodeFallback: Claude Code whose first stream ends
// cleanly before its first event (a middlebox ended the answer after its
// head) falls back to the same request without "stream" ("Stream completed
// without receiving message_start event - triggering non-streaming
// fallback"). reprise answers that fallback with the Messages answer
// assembled from the stream's journal: the command succeeds with the whole
// answer, and the upstream generated once (twice with keyless recognition
// off).
func TestAgentClaudeCodeFallback(t *testing.T) {
	t.Parallel()
	bin := agentCLI(t, "claude")
	for _, c := range []agentCase{
		{name: "served from the journal", want: 1},
		{name: "keyless retries off", opts: []envOption{withConfig(func(c *proxy.Config) { c.HTTP.KeylessRetryWindow = -1 })}, want: 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.opts...)
			l, err := newToxi().link(e.addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(l.close)
			if err := l.add("sniff", sniffType, "upstream", nil); err != nil {
				t.Fatal(err)
			}
			if err := l.addCloser("end", endAtHeadType, "downstream", map[string]any{"times": 1}); err != nil {
				t.Fatal(err)
			}
			if err := l.seal(); err != nil {
				t.Fatal(err)
			}
			sniff, _ := l.p.Toxics.GetToxic("sniff").Toxic.(*sniffRequests)
			end, _ := l.p.Toxics.GetToxic("end").Toxic.(*endAtHead)
			prompt := uniquePrompt(t, fmt.Sprintf("[tokens=%d] [delay=%s]", agentTokens, agentDelay))
			stdout, _ := runAgent(t, bin, []string{"-p", prompt, "--output-format", "json"}, t.TempDir(), claudeEnv(t, "http://"+l.addr))
			got := claudeResult(t, stdout)
			if text := strings.Join(mockllm.Content(prompt, agentTokens, false), ""); got != text {
				t.Errorf("claude's answer\n%q\nwant the demo model's whole answer\n%q", got, text)
			}
			reqs := sniff.requests()
			logAgentRequests(t, reqs, nil)
			var streamed []bool
			for _, r := range reqs {
				if r.Method == http.MethodPost {
					var body struct{ Stream bool }
					_ = json.Unmarshal(r.Body, &body)
					streamed = append(streamed, body.Stream)
				}
			}
			if len(streamed) != 2 || !streamed[0] || streamed[1] || end.ended.Load() < 1 {
				t.Fatalf("claude's POSTs streamed %v (answers ended at their head: %d), want a stream, then its non-streamed fallback", streamed, end.ended.Load())
			}
			if g := testutil.Settled(t, e.LLM.Ledger(), prompt, c.want); g.Generations != c.want {
				t.Errorf("upstream ledger %+v, want %d generation(s)", g, c.want)
			}
		})
	}
}
