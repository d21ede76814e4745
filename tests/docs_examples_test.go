package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
)

// The example files the docs show, by how a test loads them. Every file a
// Markdown page links to or names that looks like an example must be one
// of these (TestExamplesShownAreLoaded).
var (
	// exampleUpstreams are --upstreams files: reprise starts on each.
	exampleUpstreams = []string{"deploy/upstreams.example", "deploy/upstreams-passthrough.example", "deploy/upstreams.demo"}
	// examplePrices are --prices files: cost.Load reads each.
	examplePrices = []string{"docs/prices.example.json"}
	// exampleProxyKeys is the --proxy-keys template: reprise refuses it as
	// it is (it lists no key).
	exampleProxyKeys = "deploy/proxy-keys.example"
	// exampleComposeEnv is the compose env file of the team gateway:
	// TestComposeProviders runs docker-compose.yml's replica with it.
	exampleComposeEnv = "deploy/gateway.env.example"
	// exampleElsewhere are loaded by other tests.
	exampleElsewhere = map[string]string{
		"docs/examples/codex-config.toml": "tests/agents_test.go (TestAgentCodex runs Codex with it; TestAgentDocs compares the docs' copies)",
	}
)

// TestExamplesUpstreams starts reprise on each upstreams file the docs show,
// every key its lines name set, and checks it serves one route per line; and
// that a line whose key variable is unset stops it at start, naming the
// variable, as the files say.
func TestExamplesUpstreams(t *testing.T) {
	t.Parallel()
	root := composeRoot(t)
	for _, file := range exampleUpstreams {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			routes := readExampleRoutes(t, filepath.Join(root, file))
			env := map[string]string{}
			var keyed []string
			for _, rt := range routes {
				if rt.keyEnv != "" {
					env[rt.keyEnv] = "key-of-" + rt.name
					keyed = append(keyed, rt.keyEnv)
				}
			}
			p := launchLogged(t, []string{"--upstreams", filepath.Join(root, file)}, env)
			if p.routes != len(routes) {
				t.Errorf("reprise started with %d routes, %s has %d:\n%s", p.routes, file, len(routes), p.output())
			}
			p.stop(t)
			for _, k := range keyed {
				without := map[string]string{}
				for name, v := range env {
					if name != k {
						without[name] = v
					}
				}
				out, err := runBriefly(t, []string{"--upstreams", filepath.Join(root, file)}, without)
				if err == nil || !strings.Contains(out, k+" is not set") {
					t.Errorf("without %s: err %v, output %q; want reprise to refuse to start naming it", k, err, out)
				}
			}
		})
	}
}

// TestExamplesPrices loads each price table the docs show as --prices does.
func TestExamplesPrices(t *testing.T) {
	t.Parallel()
	root := composeRoot(t)
	for _, file := range examplePrices {
		if _, err := cost.Load(filepath.Join(root, file)); err != nil {
			t.Errorf("%s: %v", file, err)
		}
	}
}

// TestExamplesProxyKeys: the proxy keys template lists no key, so reprise
// refuses it as it is (its comment says so), and a copy with a key added
// starts.
func TestExamplesProxyKeys(t *testing.T) {
	t.Parallel()
	root := composeRoot(t)
	file := filepath.Join(root, exampleProxyKeys)
	out, err := runBriefly(t, []string{"--auth", "static", "--proxy-keys", file}, nil)
	if err == nil || !strings.Contains(out, "holds no key") {
		t.Errorf("--proxy-keys %s: err %v, output %q; want a refusal: it holds no key", exampleProxyKeys, err, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Its examples, uncommented, are keys reprise takes.
	var examples []string
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "# "); ok && (strings.HasPrefix(rest, "team-a ") || strings.HasPrefix(rest, "batch ")) {
			examples = append(examples, rest)
		}
	}
	if keys, err := auth.ParseKeys(file, strings.Join(examples, "")); err != nil || len(keys) != 2 || keys[0].Budget.IsZero() {
		t.Errorf("the examples of %s: %v, %v; want two keys, the first with a budget", exampleProxyKeys, keys, err)
	}
	filled := filepath.Join(t.TempDir(), "proxy-keys.txt")
	if err := os.WriteFile(filled, append(b, "0123456789abcdef0123456789abcdef\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	launchLogged(t, []string{"--auth", "static", "--proxy-keys", filled}, nil).stop(t)
}

// TestExamplesShownAreLoaded: every example file a page links to or names
// (README.md, docs/*.md, docs/design/*.md, BENCHMARKS.md,
// deploy/*/README.md) is one a test loads, so none drifts from what
// reprise accepts unnoticed.
func TestExamplesShownAreLoaded(t *testing.T) {
	t.Parallel()
	root := composeRoot(t)
	loaded := map[string]bool{exampleProxyKeys: true, exampleComposeEnv: true}
	for _, f := range slices.Concat(exampleUpstreams, examplePrices) {
		loaded[f] = true
	}
	for f := range exampleElsewhere {
		loaded[f] = true
	}
	exampleName := regexp.MustCompile(`^(deploy|docs)/[\w./-]*(\.example(\.\w+)?|upstreams[\w.-]*|/examples/[\w.-]+)$`)
	shown := 0
	for _, page := range docPages(t, root) {
		for _, ref := range pageRefs(t, root, page) {
			if strings.HasPrefix(ref, "deploy/kubernetes/") {
				continue // deploy/kubernetes's own tests load its files
			}
			if !exampleName.MatchString(ref) {
				continue
			}
			shown++
			if !loaded[ref] {
				t.Errorf("%s shows %s, which no test loads: add it to tests/examples_test.go", page, ref)
			}
		}
	}
	if shown == 0 {
		t.Fatal("the docs show no example file: the pattern no longer finds them")
	}
	for f := range loaded {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("%v", err)
		}
	}
}

// TestExamplesDocLinks: every relative link of the docs reaches a file of
// the repository, and a link to a heading of a Markdown page reaches one of
// its headings.
func TestExamplesDocLinks(t *testing.T) {
	t.Parallel()
	root := composeRoot(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, page := range docPages(t, root) {
		b, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.ToSlash(filepath.Join(filepath.Dir(page), file))
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s links to %s: %v", page, target, err)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !slices.Contains(headingAnchors(t, filepath.Join(root, path)), frag) {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, path, frag)
			}
		}
	}
}

// docPages are the Markdown pages a reader of the repository reads, from
// the root.
func docPages(t *testing.T, root string) []string {
	t.Helper()
	pages := []string{"README.md", "BENCHMARKS.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	design, err := filepath.Glob(filepath.Join(root, "docs", "design", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	deploy, err := filepath.Glob(filepath.Join(root, "deploy", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range slices.Concat(docs, design, deploy) {
		rel, err := filepath.Rel(root, f)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, filepath.ToSlash(rel))
	}
	return pages
}

// pageRefs returns the repository paths page links to or names in
// backquotes, from the root.
func pageRefs(t *testing.T, root, page string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, m := range regexp.MustCompile(`\]\(([^)#\s]+)[^)]*\)`).FindAllStringSubmatch(string(b), -1) {
		if !strings.Contains(m[1], "://") {
			refs = append(refs, filepath.ToSlash(filepath.Join(filepath.Dir(page), m[1])))
		}
	}
	for _, m := range regexp.MustCompile("(?:^|[\\s`=(])((?:\\./)?(?:deploy|docs)/[\\w./-]+)").FindAllStringSubmatch(string(b), -1) {
		refs = append(refs, strings.TrimSuffix(strings.TrimPrefix(m[1], "./"), "."))
	}
	return refs
}

// stripCode drops fenced code blocks and inline code spans from Markdown.
func stripCode(s string) string {
	s = regexp.MustCompile("(?s)```.*?```").ReplaceAllString(s, "")
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(s, "")
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped but hyphens and
// underscores, spaces as hyphens; a repeated one gets -1, -2 ….
func headingAnchors(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile("(?s)```.*?```").ReplaceAllString(string(b), "")
	seen := map[string]int{}
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(text, -1) {
		var a strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(m[1])) {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && !strings.ContainsRune("§—–…’“”·×→←≥≤", r):
				a.WriteRune(r)
			}
		}
		anchor := a.String()
		if n := seen[anchor]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", anchor, n))
		} else {
			out = append(out, anchor)
		}
		seen[anchor]++
	}
	return out
}

// exampleRoute is one line of an upstreams file, as this test reads it.
type exampleRoute struct {
	name, url, keyEnv string
	paths             []string
}

// readExampleRoutes reads an upstreams file's lines with reprise's own
// parser (proxy.ParseRoutes; reprise itself checks the rest).
func readExampleRoutes(tb testing.TB, file string) []exampleRoute {
	tb.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	lines, err := proxy.ParseRoutes(string(b))
	if err != nil {
		tb.Fatalf("%s: %v", file, err)
	}
	routes := make([]exampleRoute, 0, len(lines))
	for _, l := range lines {
		routes = append(routes, exampleRoute{name: l.Name, url: l.URL, keyEnv: l.KeyEnv, paths: l.Paths})
	}
	return routes
}

// composeRoutes reads the upstreams file a compose service's replica
// reads: the host file mounted where REPRISE_UPSTREAMS points.
func composeRoutes(t *testing.T, s types.ServiceConfig, env map[string]string) []exampleRoute {
	t.Helper()
	target := env["REPRISE_UPSTREAMS"]
	if target == "" {
		t.Fatalf("%s: no REPRISE_UPSTREAMS", s.Name)
	}
	return readExampleRoutes(t, composeMounted(t, s, target))
}

// loggedProcess is a reprise binary started by launchLogged.
type loggedProcess struct {
	cmd    *exec.Cmd
	URL    string // http://host:port
	routes int    // as its ready line says
	output func() string

	exited  chan struct{}
	waitErr error
}

// launchLogged starts the reprise binary with args, on a loopback port of
// its own and an embedded NATS server of this test, with env as its whole
// REPRISE_* and key environment (the test's own REPRISE_* variables are
// dropped), and waits until it logs that it is ready.
func launchLogged(tb testing.TB, args []string, env map[string]string) *loggedProcess {
	tb.Helper()
	js, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: tb.TempDir(), Port: -1})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(js.Shutdown)
	args = append(slices.Clip(args), "--nats="+js.Server.ClientURL(), "--replicas=1", "--listen=127.0.0.1:0", "--secret="+string(testSecret), "--data="+tb.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	cmd := exec.CommandContext(ctx, reprisebin(tb), args...)
	cmd.Dir, cmd.Env = tb.TempDir(), exampleEnv(env)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatal(err)
	}
	p := &loggedProcess{cmd: cmd, exited: make(chan struct{})}
	var (
		mu    sync.Mutex
		lines []string
		ready = make(chan readyLine, 1)
		eof   = make(chan struct{})
	)
	p.output = func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			var l readyLine
			if json.Unmarshal(sc.Bytes(), &l) == nil && strings.HasPrefix(l.Msg, "reprise is ready: open ") {
				ready <- l
			}
		}
	}()
	go func() {
		<-eof
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	tb.Cleanup(func() {
		cancel() // kills it if it still runs
		<-p.exited
	})
	select {
	case l := <-ready:
		p.URL = strings.TrimSuffix(strings.TrimPrefix(l.Msg, "reprise is ready: open "), "/")
		p.routes = len(l.Routes)
	case <-p.exited:
		tb.Fatalf("reprise %v exited before it was ready (%v):\n%s", args, p.waitErr, p.output())
	case <-time.After(time.Minute):
		tb.Fatalf("reprise %v was not ready within a minute:\n%s", args, p.output())
	}
	return p
}

// readyLine is what launchLogged reads of reprise's ready log line.
type readyLine struct {
	Msg    string   `json:"msg"`
	Routes []string `json:"routes"` // each "name url"
}

// stop sends SIGTERM and checks that reprise stops cleanly and logged no
// warning or error.
func (p *loggedProcess) stop(tb testing.TB) {
	tb.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		tb.Fatalf("reprise did not stop within 30 s of SIGTERM:\n%s", p.output())
	}
	if p.waitErr != nil {
		tb.Errorf("reprise stopped with %v:\n%s", p.waitErr, p.output())
	}
	for line := range strings.Lines(p.output()) {
		var l struct{ Level string }
		if json.Unmarshal([]byte(line), &l) == nil && (l.Level == "WARN" || l.Level == "ERROR") {
			tb.Errorf("reprise logged %s", line)
		}
	}
}

// runBriefly runs reprise with args and env as launchLogged does, for a
// configuration it should refuse: it returns its output once it exited, or
// an error saying it started.
func runBriefly(tb testing.TB, args []string, env map[string]string) (string, error) {
	tb.Helper()
	js, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: tb.TempDir(), Port: -1})
	if err != nil {
		tb.Fatal(err)
	}
	defer js.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(slices.Clip(args), "--nats="+js.Server.ClientURL(), "--listen=127.0.0.1:0", "--secret="+string(testSecret), "--data="+tb.TempDir())
	cmd := exec.CommandContext(ctx, reprisebin(tb), args...)
	cmd.Dir, cmd.Env = tb.TempDir(), exampleEnv(env)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return string(out), errors.New("reprise did not exit: it started")
	}
	if err == nil {
		return string(out), errors.New("reprise exited 0")
	}
	return string(out), err
}

// exampleEnv is the test's environment without its REPRISE_* variables and
// the providers' keys, plus env.
func exampleEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "REPRISE_") || strings.HasSuffix(name, "_API_KEY") {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// TestComposeProviders: one variable switches docker-compose.yml from the
// demo model to real providers, and the team gateway's env file
// (deploy/gateway.env.example, filled in) makes it one. For each, a
// replica's environment and files as compose gives them start reprise
// (with this test's NATS), on one route per line of its upstreams file.
func TestComposeProviders(t *testing.T) {
	t.Parallel()
	root := composeRoot(t)
	keys := filepath.Join(t.TempDir(), "proxy-keys.txt")
	if err := os.WriteFile(keys, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gateway := readEnvFile(t, filepath.Join(root, exampleComposeEnv))
	for _, k := range []string{"REPRISE_SECRET", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"} {
		if v, ok := gateway[k]; !ok || v != "" {
			t.Errorf("%s: %s=%q: want it listed and empty (a secret to fill in)", exampleComposeEnv, k, v)
		}
	}
	gateway["REPRISE_SECRET"], gateway["OPENAI_API_KEY"], gateway["ANTHROPIC_API_KEY"] = composeSecret, "sk-openai-test", "sk-ant-test"
	gateway["PROXY_KEYS_FILE"] = keys // the copy the file says to make
	for _, c := range []struct {
		name      string
		env       map[string]string
		upstreams string // the host file the replicas read
		auth      string
		hosts     []string // the hosts its routes reach
	}{
		{"demo", map[string]string{"REPRISE_SECRET": composeSecret}, "deploy/upstreams.demo", "passthrough", []string{"mockllm"}},
		{"passthrough", map[string]string{"REPRISE_SECRET": composeSecret, "UPSTREAMS_FILE": "./deploy/upstreams-passthrough.example"},
			"deploy/upstreams-passthrough.example", "passthrough", []string{"api.anthropic.com", "api.openai.com"}},
		{"gateway", gateway, "deploy/upstreams.example", "static", []string{"api.anthropic.com", "api.openai.com"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, err := composeLoad(root, c.env)
			if err != nil {
				t.Fatalf("loading docker-compose.yml: %v", err)
			}
			top := composeRoles(t, p)
			if len(top.reprise) == 0 {
				t.Fatal("no reprise replica")
			}
			s := p.Services[top.reprise[0]]
			env := composeEnvOf(s)
			file := composeMounted(t, s, env["REPRISE_UPSTREAMS"])
			if want := filepath.Join(root, c.upstreams); file != want {
				t.Errorf("the replicas read %s, want %s", file, want)
			}
			if env["REPRISE_AUTH"] != c.auth {
				t.Errorf("REPRISE_AUTH=%q, want %s", env["REPRISE_AUTH"], c.auth)
			}
			var hosts []string
			for _, rt := range composeRoutes(t, s, env) {
				hosts = append(hosts, strings.Split(strings.TrimPrefix(strings.TrimPrefix(rt.url, "https://"), "http://"), ":")[0])
			}
			slices.Sort(hosts)
			if !slices.Equal(hosts, c.hosts) {
				t.Errorf("the routes reach %v, want %v", hosts, c.hosts)
			}

			// The replica as compose runs it: its REPRISE_* and key
			// variables, container paths read from the mounted files.
			run := map[string]string{}
			for k, v := range env {
				for _, m := range s.Volumes {
					if m.Type == types.VolumeTypeBind && v == m.Target {
						v = m.Source
					}
				}
				if v != "" && k != "REPRISE_NATS" && k != "REPRISE_LISTEN" && k != "REPRISE_REPLICAS" {
					run[k] = v
				}
			}
			rp := launchLogged(t, nil, run)
			if n := len(readExampleRoutes(t, file)); rp.routes != n {
				t.Errorf("reprise started with %d routes, %s has %d:\n%s", rp.routes, file, n, rp.output())
			}
			rp.stop(t)
		})
	}
}

// readEnvFile reads a compose env file: NAME=value lines, # comments.
func readEnvFile(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is no NAME=value line", file, line)
		}
		env[k] = v
	}
	return env
}
