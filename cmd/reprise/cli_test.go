package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/reprise-dev/reprise/internal/testutil"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// built is the reprise binary the tests run, built once.
var built struct {
	once      sync.Once
	dir, path string
	err       error
}

// binary builds cmd/reprise (once per test run) and returns its path.
func binary(tb testing.TB) string {
	tb.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "reprise-cli-"); built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "reprise")
		out, err := exec.Command("go", "build", "-o", built.path, ".").CombinedOutput()
		if err != nil {
			built.err = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if built.err != nil {
		tb.Fatal(built.err)
	}
	return built.path
}

// result is how a run of the binary ended.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary with args in dir, with only env (and PATH,
// HOME) in its environment, and waits up to a minute for it to exit.
func runBinary(tb testing.TB, dir string, env []string, args ...string) result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(tb), args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		tb.Fatalf("reprise %q did not exit within a minute; stderr:\n%s", args, stderr.String())
	case errors.As(err, &exit):
	case err != nil:
		tb.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// entries lists dir's contents, recursively, as paths relative to it.
func entries(tb testing.TB, dir string) []string {
	tb.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, path); rel != "." {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// TestVersion: --version prints one line on stdout and runs nothing: the
// module's version, the revision the build recorded (as the Go toolchain
// reads it from the binary) or "revision unknown", and the Go release.
func TestVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := runBinary(t, dir, nil, "--version")
	if r.code != 0 || r.stderr != "" || strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(r.stdout, "reprise ") {
		t.Fatalf("--version: exit %d, stdout %q, stderr %q; want one line on stdout, exit 0", r.code, r.stdout, r.stderr)
	}
	info, err := exec.Command("go", "version", "-m", binary(t)).Output()
	if err != nil {
		t.Fatal(err)
	}
	var revision, modVersion string
	for line := range strings.Lines(string(info)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			revision = strings.TrimPrefix(f[1], "vcs.revision=")
		case len(f) >= 3 && f[0] == "mod":
			modVersion = f[2]
		}
	}
	want := []string{"reprise " + modVersion + ", ", runtime.Version()}
	if revision != "" {
		want = append(want, "revision "+revision)
	} else {
		want = append(want, "revision unknown")
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("--version printed %q, want %q in it", r.stdout, w)
		}
	}
	if got := entries(t, dir); len(got) != 0 {
		t.Errorf("--version made %q", got)
	}
	// Anywhere among other flags, as --help.
	if r := runBinary(t, dir, nil, "--listen", ":1", "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "reprise ") {
		t.Errorf("--listen :1 --version: exit %d, %q", r.code, r.stdout)
	}
}

// TestVersionLine: what --version says of a build, with and without what
// the VCS recorded.
func TestVersionLine(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"go run", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true,
			"reprise (devel), revision unknown, go1.26.8 " + platform},
		{"a checkout with changes", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261203172814-11d521b62a0f+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "11d521b62a0f47fc83f08f9ea24d11d13c4e6c6c"},
			{Key: "vcs.time", Value: "2026-12-03T17:28:14Z"}, {Key: "vcs.modified", Value: "true"},
		}}, true, "reprise v0.0.0-20261203172814-11d521b62a0f+dirty, revision 11d521b62a0f47fc83f08f9ea24d11d13c4e6c6c of 2026-12-03T17:28:14Z, modified, go1.26.8 " + platform},
		{"a release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"},
		}}, true, "reprise v1.2.0, revision abc, go1.26.8 " + platform},
		{"no build info", nil, false, "reprise (unknown), revision unknown, " + runtime.Version() + " " + platform},
	} {
		if got := versionLine(tc.info, tc.ok, stamp{}); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestStartFailures: a start that cannot go on says why in one line on
// stderr, "reprise: …" — the form of a flag error, whatever the log's
// format — exits non-zero, and leaves nothing on disk: no ./data, whether
// it failed before making anything or after (it removes what it made).
func TestStartFailures(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() }) // after the parallel subtests
	nats := testutil.FreeAddr(t)       // nobody listens there
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		code int
		want []string // in the line
	}{
		{"bad log level", []string{"--log-level", "verbose"}, nil, 2, []string{"--log-level", "verbose", "debug, info, warn or error"}},
		{"bad log level from the environment", nil, []string{"REPRISE_LOG_LEVEL=verbose"}, 2, []string{"REPRISE_LOG_LEVEL", "--log-level", "debug, info, warn or error"}},
		{"bad auth mode", []string{"--auth", "open"}, nil, 2, []string{"--auth", "passthrough, static or none"}},
		{"negative limit", []string{"--max-body", "-1"}, nil, 2, []string{"--max-body -1", "at least 1"}},
		// A free port of their own: the default :8080 may be taken (a
		// reprise running on the box), and the listen address is checked first.
		{"NATS unreachable", []string{"--listen", "127.0.0.1:0", "--nats", "nats://" + nats}, nil, 1, []string{"cannot reach NATS at nats://" + nats}},
		{"NATS unreachable, text logs", []string{"--listen", "127.0.0.1:0", "--nats", "nats://" + nats, "--log-format", "text"}, nil, 1, []string{"cannot reach NATS"}},
		{"unreadable upstreams file", []string{"--listen", "127.0.0.1:0", "--upstreams", "missing.txt"}, nil, 1, []string{"--upstreams", "missing.txt"}},
		{"port in use", []string{"--listen", busy.Addr().String()}, nil, 1, []string{"--listen " + busy.Addr().String(), "in use"}},
		{"bad upstream", []string{"--upstream", "ftp://x"}, nil, 2, []string{"--upstream", "http(s)://host[:port]"}},
		{"open relay", []string{"--auth", "none", "--listen", "0.0.0.0:0"}, []string{"REPRISE_UPSTREAM_KEY=sk-test"}, 1, []string{"open relay", "--allow-open-relay", "--listen 127.0.0.1:"}},
		// Refused once the embedded store is up under ./data: it is removed.
		{"event size over the NATS payload", []string{"--listen", "127.0.0.1:0", "--max-event-size", "2000000"}, nil, 1, []string{"max event size 2000000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			r := runBinary(t, dir, tc.env, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d", r.code, tc.code)
			}
			steps, line := failure(r.stderr)
			if !strings.HasPrefix(line, "reprise: ") {
				t.Errorf("stderr %q, want its last line \"reprise: …\"", r.stderr)
			}
			for _, l := range steps {
				if !strings.Contains(l, `"level":"INFO"`) && !strings.Contains(l, "level=INFO") {
					t.Errorf("before the error: %q, want only the start's steps", l)
				}
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("%q does not say %q", line, w)
				}
			}
			if got := entries(t, dir); len(got) != 0 {
				t.Errorf("the failed start left %q", got)
			}
		})
	}
}

// failure splits a failed start's standard error into the steps it logged
// and its last line, the error.
func failure(stderr string) (steps []string, last string) {
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	return lines[:len(lines)-1], lines[len(lines)-1]
}

// TestFailedStartKeepsWhatWasThere: a start that fails after it made the
// embedded store removes what it made, and only that: a --data directory
// that was there stays, with what it held.
func TestFailedStartKeepsWhatWasThere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "store")
	if err := os.MkdirAll(filepath.Join(data, "mine"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "notes"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := entries(t, dir)
	r := runBinary(t, dir, nil, "--listen", "127.0.0.1:0", "--data", data, "--max-event-size", "2000000")
	if _, line := failure(r.stderr); r.code == 0 || !strings.HasPrefix(line, "reprise: ") {
		t.Fatalf("exit %d, stderr %q; want a failure", r.code, r.stderr)
	}
	if after := entries(t, dir); !slices.Equal(after, before) {
		t.Errorf("left %q, want %q as it was", after, before)
	}
	// The nested directories a start makes go as a whole.
	deep := filepath.Join(dir, "a", "b", "data")
	runBinary(t, dir, nil, "--listen", "127.0.0.1:0", "--data", deep, "--max-event-size", "2000000")
	if after := entries(t, dir); !slices.Equal(after, before) {
		t.Errorf("--data a/b/data: left %q, want %q", after, before)
	}
}

// TestDefaultsStart: with its defaults — the demo upstream, --auth
// passthrough, every interface — reprise starts (no key to relay), makes
// ./data and serves; here on any port.
func TestDefaultsStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg, err := parseConfig([]string{"--listen", ":0", "--data", filepath.Join(dir, "data")}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.registerer = prometheus.NewRegistry()
	startAndStop(t, cfg)
	if got := entries(t, dir); !slices.Contains(got, "data") || !slices.Contains(got, filepath.Join("data", "secret")) {
		t.Errorf("after a start: %q, want ./data and its secret", got)
	}
}

// startAndStop runs cfg until it serves, then stops it; it fails the test
// if it does not start.
func startAndStop(tb testing.TB, cfg config) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- run(ctx, cfg, discard(), ready) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		tb.Fatalf("did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		tb.Fatal("not ready within 30s")
	}
	cancel()
	if err := <-done; err != nil {
		tb.Errorf("stopping: %v", err)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestOpenRelay: --auth none with an upstream key (--upstream-key, or a
// route's key_env) refuses an address beyond loopback — before it makes
// anything — saying why and the ways out; loopback, --allow-open-relay, no
// key, or another auth mode start.
func TestOpenRelay(t *testing.T) { // not parallel: t.Setenv
	t.Setenv("REPRISE_TEST_ROUTE_KEY", "sk-route")
	routes := filepath.Join(t.TempDir(), "upstreams")
	if err := os.WriteFile(routes, []byte("openai http://127.0.0.1:1 key_env=REPRISE_TEST_ROUTE_KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "proxy-keys")
	if err := os.WriteFile(keys, []byte("team-a pk-3f9c1a7e5b2d8c40\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		args    []string
		refused bool
	}{
		{"static key, every interface", []string{"--auth", "none", "--upstream-key", "sk-static", "--listen", ":0"}, true},
		{"static key, 0.0.0.0", []string{"--auth", "none", "--upstream-key", "sk-static", "--listen", "0.0.0.0:0"}, true},
		{"a route's key", []string{"--auth", "none", "--upstreams", routes, "--listen", ":0"}, true},
		{"loopback", []string{"--auth", "none", "--upstream-key", "sk-static", "--listen", "127.0.0.1:0"}, false},
		{"loopback by name", []string{"--auth", "none", "--upstream-key", "sk-static", "--listen", "localhost:0"}, false},
		{"allowed", []string{"--auth", "none", "--upstream-key", "sk-static", "--listen", ":0", "--allow-open-relay"}, false},
		{"no key", []string{"--auth", "none", "--listen", ":0"}, false},
		{"callers authenticated", []string{"--auth", "static", "--proxy-keys", keys, "--upstream-key", "sk-static", "--listen", ":0"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			cfg, err := parseConfig(append(tc.args, "--data", data, "--upstream", "http://127.0.0.1:1"), noEnv)
			if err != nil {
				t.Fatal(err)
			}
			cfg.registerer = prometheus.NewRegistry()
			if !tc.refused {
				startAndStop(t, cfg)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = run(ctx, cfg, discard(), nil)
			if err == nil || !strings.Contains(err.Error(), "open relay") || !strings.Contains(err.Error(), "--allow-open-relay") ||
				!strings.Contains(err.Error(), "--listen 127.0.0.1:") || strings.Contains(err.Error(), "sk-") {
				t.Errorf("run: %v; want a refusal naming the open relay, loopback and --allow-open-relay (and no key)", err)
			}
			if got := entries(t, dir); len(got) != 0 {
				t.Errorf("the refused start made %q", got)
			}
		})
	}
}
