package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// The JavaScript client helper (web/client) under Node: from the source
// tree (TestJSClientNode) and as the npm package a project installs
// (TestJSPackage). Both need node, npm and tests/js installed (npm ci
// --prefix tests/js); they skip without node or npm, unless CI is set:
// then they fail.

// jsPackage is the helper's npm package name (web/client/package.json).
const jsPackage = "@reprise-dev/client"

// jsTool returns the path of node or npm: the test skips where it is not
// installed, unless CI is set.
func jsTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no %s in PATH (CI is set): %v", name, err)
		}
		t.Skipf("no %s in PATH (CI=1 makes this a failure): %v", name, err)
	}
	return p
}

// jsDir returns tests/js, failing when its packages are not installed.
func jsDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("js")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"openai", "@anthropic-ai/sdk", "ai", "@ai-sdk/openai-compatible", "typescript"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
			t.Fatalf("tests/js is not installed (run npm ci --prefix tests/js): %v", err)
		}
	}
	return dir
}

// jsCase is one stream a Node test reads through an SDK with the helper
// as its fetch (tests/js/pack/sdk.mjs), passed in REPRISE_CASES.
type jsCase struct {
	Name       string `json:"name"`
	API        string `json:"api"` // chat, responses (openai), messages (@anthropic-ai/sdk), ai (Vercel)
	BaseURL    string `json:"baseURL"`
	Prompt     string `json:"prompt"`
	Want       string `json:"want"`
	Tokens     int    `json:"tokens"`
	MaxRetries int    `json:"maxRetries"`
	Drops      int    `json:"drops"`
	link       *dropLink
	cuts       int64
}

// dropCase is a case whose link cuts its stream clientDrops times.
func dropCase(name, api string) *jsCase {
	return &jsCase{Name: name, API: api, Tokens: clientTokens, Drops: clientDrops}
}

// jsCases gives each case a prompt, the text the fake model answers it
// and its link in front of e: one that cuts the stream Drops times, or,
// for a case without drops, one that cuts the POST's answer at its first
// byte (the SDK retries the POST itself). It returns them as
// REPRISE_CASES.
func jsCases(t *testing.T, e *env, cases []*jsCase) string {
	t.Helper()
	for _, c := range cases {
		c.Prompt = uniquePrompt(t, "["+c.API+"] [tokens="+itoa(c.Tokens)+"]")
		c.Want = strings.Join(mockllm.Content(c.Prompt, c.Tokens, false), "")
		if c.Drops > 0 {
			c.link, c.cuts = newDropLink(t, e.addr, clientCutBytes, int64(c.Drops)), int64(c.Drops)
		} else {
			c.link, c.cuts = newDropLink(t, e.addr, 1, 1), 1
		}
		c.BaseURL = c.link.URL
	}
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkJSCases checks the upstream ledger of every case (one request, one
// generation: no POST reached the upstream twice) and that its link cut
// what it should have.
func checkJSCases(t *testing.T, e *env, cases []*jsCase) {
	t.Helper()
	for _, c := range cases {
		if g := testutil.Settled(t, e.LLM.Ledger(), c.Prompt, 1); g.Generations != 1 || g.Requests != 1 {
			t.Errorf("%s: upstream ledger %+v, want 1 request and 1 generation", c.Name, g)
		}
		if n := c.link.cuts(); n != c.cuts {
			t.Errorf("%s: the link cut %d connections, want %d", c.Name, n, c.cuts)
		}
	}
}

// runJS runs a command of the Node tests in dir, with env added, and
// returns its standard output; it fails with both outputs if the command
// fails.
func runJS(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"NO_COLOR=1"}, env...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s\n%s", filepath.Base(name), strings.Join(args, " "), dir, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestJSClientNode runs tests/js (node --test) with web/client/reprise.js
// from the source tree as the fetch of the npm openai, @anthropic-ai/sdk
// and Vercel ai SDKs, against this proxy through links that cut each
// stream three times (and one that cuts the POST's answer before its head,
// which the SDK retries itself); then checks the upstream ledger: one
// request and one generation per stream. It runs helper.test.mjs too: how
// the helper ends a stream its Location cannot continue, against a
// node:http server, and that a Location on another origin gets no
// credential.
func TestJSClientNode(t *testing.T) {
	t.Parallel()
	node := jsTool(t, "node")
	dir := jsDir(t)
	e := newClientEnv(t)
	cases := []*jsCase{
		dropCase("openai chat, three drops", "chat"),
		dropCase("openai responses, three drops", "responses"),
		dropCase("anthropic messages, three drops", "messages"),
		dropCase("vercel ai streamText, three drops", "ai"),
		// The POST's answer is cut at its first byte: the SDK retries the
		// POST, the helper gives the retry the first try's key, it attaches.
		{Name: "the SDK's retry attaches", API: "chat", Tokens: 20, MaxRetries: 2},
	}
	env := "REPRISE_CASES=" + jsCases(t, e, cases)
	out := runJS(t, dir, []string{env}, node, "--test", "--test-reporter=spec", "reprise.test.mjs", "helper.test.mjs")
	t.Logf("node --test:\n%s", out)
	checkJSCases(t, e, cases)
}

// TestJSPackage is the helper as an npm package: npm pack of web/client
// (its CommonJS build up to date with reprise.js, the files it ships),
// the tarball installed offline into fresh projects, and there:
//   - a CommonJS project ("type": "commonjs", npm init's default) that
//     require()s it, and an ES module project that imports it, each
//     reading streams through the openai, @anthropic-ai/sdk and Vercel ai
//     SDKs against this proxy through links that cut them three times
//     (tests/js/pack/cjs.cjs and esm.mjs);
//   - tsc --noEmit over its types from ES modules, CommonJS, a bundler's
//     resolution and as the SDKs' fetch option (tests/js/pack/types).
//
// The projects find the SDKs and TypeScript in tests/js/node_modules (a
// link beside them): nothing is fetched from a registry.
func TestJSPackage(t *testing.T) {
	t.Parallel()
	node := jsTool(t, "node")
	npm := jsTool(t, "npm")
	js := jsDir(t)
	client, err := filepath.Abs(filepath.Join("..", "web", "client"))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	// npm's cache and logs in the test's directory: an install that needed
	// anything but the tarball fails (--offline) instead of using a cache.
	npmEnv := []string{"npm_config_cache=" + filepath.Join(tmp, ".npm"), "npm_config_update_notifier=false"}

	// The committed CommonJS build is what build.mjs makes of reprise.js.
	runJS(t, client, nil, node, "build.mjs", "--check")

	out := runJS(t, client, npmEnv, npm, "pack", "--json", "--pack-destination", tmp)
	var packed []struct {
		Filename string `json:"filename"`
		Files    []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	if err := json.Unmarshal([]byte(out), &packed); err != nil || len(packed) != 1 {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	var files []string
	for _, f := range packed[0].Files {
		files = append(files, f.Path)
	}
	slices.Sort(files)
	if want := []string{"package.json", "reprise.cjs", "reprise.d.cts", "reprise.d.ts", "reprise.js"}; !slices.Equal(files, want) {
		t.Errorf("npm pack shipped %v, want %v", files, want)
	}
	tarball := filepath.Join(tmp, packed[0].Filename)
	if err := os.Symlink(filepath.Join(js, "node_modules"), filepath.Join(tmp, "node_modules")); err != nil {
		t.Fatal(err)
	}

	// project makes a fresh project of the given module type, copies files
	// into it (source in tests/js/pack: name there), and installs the
	// tarball.
	project := func(name, typ string, files map[string]string) string {
		t.Helper()
		dir := filepath.Join(tmp, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		pkg := `{"name": "` + name + `-project", "version": "1.0.0", "private": true, "type": "` + typ + `"}` + "\n"
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(pkg), 0o644); err != nil {
			t.Fatal(err)
		}
		for src, dst := range files {
			b, err := os.ReadFile(filepath.Join(js, "pack", src))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		runJS(t, dir, npmEnv, npm, "install", "--offline", "--no-audit", "--no-fund", tarball)
		if _, err := os.Stat(filepath.Join(dir, "node_modules", jsPackage, "package.json")); err != nil {
			t.Fatalf("%s: the tarball did not install: %v", name, err)
		}
		return dir
	}

	e := newClientEnv(t)
	for _, p := range []struct{ name, typ, test string }{
		{"cjs", "commonjs", "cjs.cjs"},
		{"esm", "module", "esm.mjs"},
	} {
		// test.js: a .js file, CommonJS or an ES module by the project's type.
		dir := project(p.name, p.typ, map[string]string{p.test: "test.js", "sdk.mjs": "sdk.mjs"})
		cases := []*jsCase{
			dropCase(p.name+": openai chat, three drops", "chat"),
			dropCase(p.name+": anthropic messages, three drops", "messages"),
			dropCase(p.name+": vercel ai streamText, three drops", "ai"),
		}
		env := "REPRISE_CASES=" + jsCases(t, e, cases)
		out := runJS(t, dir, []string{env}, node, "--test", "--test-reporter=spec", "test.js")
		t.Logf("%s project, node --test:\n%s", p.name, out)
		checkJSCases(t, e, cases)
	}

	typesDir := filepath.Join(js, "pack", "types")
	entries, err := os.ReadDir(typesDir)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	var configs []string
	for _, ent := range entries {
		n := ent.Name()
		types[filepath.Join("types", n)] = n
		if strings.HasPrefix(n, "tsconfig") {
			configs = append(configs, n)
		}
	}
	dir := project("ts", "module", types)
	tsc := filepath.Join(js, "node_modules", "typescript", "bin", "tsc")
	for _, cfg := range configs {
		runJS(t, dir, nil, node, tsc, "--noEmit", "-p", cfg)
	}
	if want := []string{"tsconfig.bundler.json", "tsconfig.json", "tsconfig.sdk.json"}; !slices.Equal(configs, want) {
		t.Errorf("tsc checked %v, want %v", configs, want)
	}
}

// stopCase is one case of tests/js/stop.test.mjs, passed in REPRISE_STOP.
type stopCase struct {
	Name    string `json:"name"`
	How     string `json:"how"` // abort, break (the caller stops), drop (the link cuts the stream once)
	BaseURL string `json:"baseURL"`
	Prompt  string `json:"prompt"`
	Want    string `json:"want"`
	link    *dropLink
}

// TestJSClientStop: Stop is not a drop, under the npm openai SDK with the
// helper from the source tree as its fetch (tests/js/stop.test.mjs). A
// caller that aborts mid-stream, or breaks out of its loop, has the helper
// cancel the generation: the key becomes cancelled and the upstream's
// generation ends early; the identical request again (Regenerate) is a
// second generation. A stream the link cuts is resumed: one generation,
// completed.
func TestJSClientStop(t *testing.T) {
	t.Parallel()
	node := jsTool(t, "node")
	dir := jsDir(t)
	e := newClientEnv(t)
	const tokens = 200 // 2 s at [delay=10ms]: the caller stops long before the end
	cases := []*stopCase{
		{Name: "abort mid-stream, then regenerate", How: "abort"},
		{Name: "break out of the loop, then regenerate", How: "break"},
		{Name: "a drop resumes the same generation", How: "drop"},
	}
	for _, c := range cases {
		c.Prompt = uniquePrompt(t, "[tokens="+itoa(tokens)+"] [delay=10ms]")
		c.Want = strings.Join(mockllm.Content(c.Prompt, tokens, false), "")
		c.BaseURL = e.URL
		if c.How == "drop" {
			c.Prompt = uniquePrompt(t, "[tokens=60]")
			c.Want = strings.Join(mockllm.Content(c.Prompt, 60, false), "")
			c.link = newDropLink(t, e.addr, clientCutBytes, 1)
			c.BaseURL = c.link.URL
		}
	}
	b, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	out := runJS(t, dir, []string{"REPRISE_STOP=" + string(b)}, node, "--test", "--test-reporter=spec", "stop.test.mjs")
	t.Logf("node --test:\n%s", out)
	if !strings.Contains(out, "pass "+itoa(len(cases)+1)) { // the cases and their parent
		t.Errorf("node --test did not run the %d cases", len(cases))
	}
	for _, c := range cases {
		if c.How == "drop" {
			g := testutil.Settled(t, e.LLM.Ledger(), c.Prompt, 1)
			gens := e.LLM.Ledger().Generations(c.Prompt)
			if g.Generations != 1 || g.Requests != 1 || len(gens) != 1 || !gens[0].Completed {
				t.Errorf("%s: upstream ledger %+v %+v, want 1 request and 1 completed generation", c.Name, g, gens)
			}
			if n := c.link.cuts(); n != 1 {
				t.Errorf("%s: the link cut %d connections, want 1", c.Name, n)
			}
			continue
		}
		g := testutil.Settled(t, e.LLM.Ledger(), c.Prompt, 2)
		gens := e.LLM.Ledger().Generations(c.Prompt)
		if g.Generations != 2 || len(gens) != 2 {
			t.Fatalf("%s: upstream ledger %+v, want 2 generations (the stopped one and the regenerated one)", c.Name, g)
		}
		if !gens[0].Aborted || gens[0].Completed || gens[0].Tokens >= tokens {
			t.Errorf("%s: the stopped generation %+v, want it aborted early", c.Name, gens[0])
		}
		if !gens[1].Completed || gens[1].Tokens != tokens {
			t.Errorf("%s: the regenerated generation %+v, want it completed", c.Name, gens[1])
		}
	}
}
