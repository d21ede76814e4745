package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestVersionStamped: a stamp (-ldflags -X main.version, main.revision)
// names the version and revision in --version and the log, over what Go
// recorded or did not record (an image's build has no VCS data).
func TestVersionStamped(t *testing.T) {
	platform := runtime.GOOS + "/" + runtime.GOARCH
	bare := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	checkout := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "11d521b62a0f47fc83f08f9ea24d11d13c4e6c6c"}, {Key: "vcs.time", Value: "2026-12-03T17:28:14Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	st := stamp{"v1.4.0", "0123456789abcdef0123456789abcdef01234567"}
	for _, tc := range []struct {
		name        string
		info        *debug.BuildInfo
		st          stamp
		line, short string
	}{
		{"an image's build", bare, st,
			"reprise v1.4.0, revision 0123456789abcdef0123456789abcdef01234567, go1.26.8 " + platform, "v1.4.0 0123456789ab"},
		{"a version only", bare, stamp{version: "v1.4.0"},
			"reprise v1.4.0, revision unknown, go1.26.8 " + platform, "v1.4.0"},
		{"a stamp over a checkout's record", checkout, st,
			"reprise v1.4.0, revision 0123456789abcdef0123456789abcdef01234567, go1.26.8 " + platform, "v1.4.0 0123456789ab"},
		{"a version over a checkout's revision", checkout, stamp{version: "v1.4.0-rc.1"},
			"reprise v1.4.0-rc.1, revision 11d521b62a0f47fc83f08f9ea24d11d13c4e6c6c of 2026-12-03T17:28:14Z, modified, go1.26.8 " + platform, "v1.4.0-rc.1 11d521b62a0f+dirty"},
	} {
		if got := versionLine(tc.info, true, tc.st); got != tc.line {
			t.Errorf("%s: --version %q, want %q", tc.name, got, tc.line)
		}
		if got := shortVersionOf(tc.info, true, tc.st); got != tc.short {
			t.Errorf("%s: log version %q, want %q", tc.name, got, tc.short)
		}
	}
}

// TestVersionStampedBuild: the -ldflags of the Dockerfile's build stamp a
// binary that says so in --version.
func TestVersionStampedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "reprise")
	build := exec.Command("go", "build", "-o", bin, "-ldflags", "-X main.version=v9.8.7 -X main.revision=feedface", ".") // #nosec G204 -- fixed arguments
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output() // #nosec G204 -- the binary just built
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); !strings.HasPrefix(got, "reprise v9.8.7, revision feedface, ") {
		t.Errorf("--version of a stamped build: %q", got)
	}
}
