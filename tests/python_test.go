package tests

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestPython runs the Python suite (tests/python: the openai and anthropic
// SDKs as their users run them, keyless, through reprise; the Python client
// helper web/python) with pytest from the virtualenv tests/python/.venv:
//
//	python3 -m venv tests/python/.venv
//	tests/python/.venv/bin/pip install -r tests/python/requirements.txt ./web/python
//
// It skips without that virtualenv, unless CI is set: then it fails. It
// fails when pytest fails, or when it ran no test.
func TestPython(t *testing.T) { // not parallel: its timeouts race generations, so it runs before the parallel tests load the box
	python, err := filepath.Abs(filepath.Join("python", ".venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(python); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no virtualenv for tests/python (CI is set): %v", err)
		}
		t.Skipf("no virtualenv for tests/python (CI=1 makes this a failure): %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", t.TempDir(), "tests/python")
	cmd.Dir = root
	// The reprise this package's tests build: conftest.py builds mockllm.
	cmd.Env = append(os.Environ(), "REPRISE_BIN="+reprisebin(t), "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	passed, failed := pytestCounts(out.String())
	t.Logf("pytest: %d passed, %d failed\n%s", passed, failed, out.String())
	if runErr != nil {
		t.Fatalf("pytest: %v", runErr)
	}
	if passed == 0 {
		t.Fatal("pytest passed no test")
	}
}

// pytestSummary matches the counts of pytest's final line, e.g.
// "47 passed, 2 xfailed in 41.20s" or "1 failed, 46 passed in 59.50s".
var pytestSummary = regexp.MustCompile(`(\d+) (passed|failed|errors?)\b`)

// pytestCounts returns the passed and failed (failures and errors) counts of
// pytest's summary line: the output's last line that has any.
func pytestCounts(out string) (passed, failed int) {
	lines := bytes.Split([]byte(out), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		m := pytestSummary.FindAllSubmatch(lines[i], -1)
		if len(m) == 0 || !bytes.Contains(lines[i], []byte(" in ")) {
			continue
		}
		for _, g := range m {
			n, _ := strconv.Atoi(string(g[1]))
			if string(g[2]) == "passed" {
				passed += n
			} else {
				failed += n
			}
		}
		return passed, failed
	}
	return 0, 0
}
