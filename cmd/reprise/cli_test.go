package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
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
		if got := versionLine(tc.info, tc.ok); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
