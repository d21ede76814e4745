package tests

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestQuickstart runs each recipe of the README's quick start as a new user
// would — its shell lines in bash in an empty directory, reprise started as
// its `go run ./cmd/reprise` line says (the binary, on a port of its own) —
// with two fakes standing in for OpenAI and Anthropic: the upstreams file
// the recipe names is copied with their URLs for the providers'. Each
// request reaches its own provider with the key the recipe says.
func TestQuickstart(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "curl", "openssl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s: %v", tool, err)
		}
	}
	root := composeRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	const openaiKey, anthropicKey = "sk-openai-of-the-user", "sk-ant-of-the-user"
	for _, c := range []struct {
		heading string
		env     map[string]string // the user's environment
		// want says which key each provider got, given the recipe's
		// environment after its first lines ran.
		want func(env map[string]string) (openai, anthropic string)
	}{
		{"A team gateway", nil, func(env map[string]string) (string, string) {
			return "Bearer " + env["OPENAI_API_KEY"], env["ANTHROPIC_API_KEY"]
		}},
		{"Pass-through", map[string]string{"OPENAI_API_KEY": openaiKey, "ANTHROPIC_API_KEY": anthropicKey}, func(map[string]string) (string, string) {
			return "Bearer " + openaiKey, anthropicKey
		}},
		{"Local demo", nil, nil},
	} {
		t.Run(c.heading, func(t *testing.T) {
			t.Parallel()
			blocks := regexp.MustCompile("(?s)\n### " + regexp.QuoteMeta(c.heading) + "[^\n]*\n(.*?)\n### ").FindSubmatch(readme)
			if blocks == nil {
				t.Fatalf("README.md: no section \"### %s\"", c.heading)
			}
			var script string
			for _, m := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllSubmatch(blocks[1], -1) {
				script += string(m[1])
			}
			before, start, after, ok := splitAtStart(script)
			if !ok {
				t.Fatalf("README.md, %s: no `go run ./cmd/reprise` line in\n%s", c.heading, script)
			}
			openai, anthropic := newFakeProvider(t), newFakeProvider(t)
			work := t.TempDir()
			args := strings.Fields(start)
			for i, a := range args {
				if i > 0 && args[i-1] == "--upstreams" {
					args[i] = copyUpstreams(t, root, work, a, map[string]string{"https://api.openai.com": openai.URL, "https://api.anthropic.com": anthropic.URL})
				}
			}

			// The lines before reprise starts, then the environment they
			// leave, which reprise starts in.
			envFile := filepath.Join(t.TempDir(), "env")
			runRecipe(t, work, before+"\nenv -0 > "+envFile+"\n", c.env)
			env := map[string]string{}
			b, err := os.ReadFile(envFile)
			if err != nil {
				t.Fatal(err)
			}
			for kv := range strings.SplitSeq(strings.TrimSuffix(string(b), "\x00"), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok && (strings.HasSuffix(k, "_API_KEY") || strings.HasPrefix(k, "REPRISE_")) {
					env[k] = v
				}
			}
			p := launchRecipe(t, work, args, env)
			out := runRecipe(t, work, strings.ReplaceAll(after, "localhost:8080", strings.TrimPrefix(p.URL, "http://")), env)
			if n := strings.Count(out, "data: [DONE]") + strings.Count(out, "event: message_stop"); n != strings.Count(after, "curl ") {
				t.Errorf("the recipe's %d requests got %d whole streams:\n%s", strings.Count(after, "curl "), n, out)
			}
			if c.want == nil {
				if openai.count() != 0 || anthropic.count() != 0 {
					t.Errorf("the demo reached a provider: %v %v", openai.seen, anthropic.seen)
				}
				return
			}
			wantOpenAI, wantAnthropic := c.want(env)
			openai.check(t, "OpenAI", "/v1/chat/completions", "Authorization", wantOpenAI)
			anthropic.check(t, "Anthropic", "/v1/messages", "X-Api-Key", wantAnthropic)
		})
	}
}

// splitAtStart splits a recipe's shell lines at its `go run ./cmd/reprise`
// line: what runs before, reprise's arguments, what runs after.
func splitAtStart(script string) (before, args, after string, ok bool) {
	var b, a strings.Builder
	for line := range strings.Lines(script) {
		if rest, found := strings.CutPrefix(line, "go run ./cmd/reprise"); found && !ok {
			args, _, _ = strings.Cut(rest, "#")
			ok = true
			continue
		}
		if ok {
			a.WriteString(line)
		} else {
			b.WriteString(line)
		}
	}
	return b.String(), strings.TrimSpace(args), a.String(), ok
}

// copyUpstreams copies the repository's upstreams file rel into work, at
// the same relative path, with each provider URL replaced, and returns its
// path.
func copyUpstreams(t *testing.T, root, work, rel string, urls map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("the recipe's --upstreams %s: %v", rel, err)
	}
	s := string(b)
	for from, to := range urls {
		s = strings.ReplaceAll(s, from, to)
	}
	dst := filepath.Join(work, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// runRecipe runs script in bash -e in dir with env added to the test's
// environment (less its REPRISE_* and provider key variables), and returns
// what it printed.
func runRecipe(t *testing.T, dir, script string, env map[string]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e")
	cmd.Dir, cmd.Env = dir, exampleEnv(env)
	cmd.Stdin = strings.NewReader(script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the recipe failed: %v\n%s\n%s\n%s", err, script, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// launchRecipe starts reprise as a recipe does: in dir, with args and env,
// on its embedded JetStream under dir (no --nats).
func launchRecipe(t *testing.T, dir string, args []string, env map[string]string) *process {
	t.Helper()
	addr, listens := testutil.FreeAddr(t), false
	for i := range args {
		if i > 0 && args[i-1] == "--listen" {
			args[i], listens = addr, true
		}
	}
	if !listens {
		args = append(args, "--listen", addr)
	}
	cmd := exec.Command(reprisebin(t), append(args, "--log-level", "warn")...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, exampleEnv(env), os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, URL: "http://" + addr, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	if err := testutil.AwaitReady(p.URL, 30*time.Second, p.exited); err != nil {
		t.Fatalf("reprise %v: %v", args, err)
	}
	return p
}

// fakeProvider is a provider's stand-in: the demo model, recording the
// path and credentials of each request.
type fakeProvider struct {
	*httptest.Server
	mu   sync.Mutex
	seen []http.Header // with the path as ":path"
}

func newFakeProvider(t *testing.T) *fakeProvider {
	t.Helper()
	f := &fakeProvider{}
	llm := mockllm.New(mockllm.Config{Tokens: 5})
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Clone()
		h.Set(":path", r.URL.Path)
		f.mu.Lock()
		f.seen = append(f.seen, h)
		f.mu.Unlock()
		llm.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeProvider) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.seen)
}

// check: the provider got exactly one request, to path, with header set to
// want and no other credential.
func (f *fakeProvider) check(t *testing.T, name, path, header, want string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) != 1 {
		t.Errorf("%s got %d requests, want 1: %v", name, len(f.seen), f.seen)
		return
	}
	h := f.seen[0]
	if h.Get(":path") != path {
		t.Errorf("%s got %s, want %s", name, h.Get(":path"), path)
	}
	if got := h.Get(header); got != want {
		t.Errorf("%s got %s %q, want %q", name, header, got, want)
	}
	for _, other := range []string{"Authorization", "X-Api-Key"} {
		if other != header && h.Get(other) != "" {
			t.Errorf("%s also got %s %q", name, other, h.Get(other))
		}
	}
}
