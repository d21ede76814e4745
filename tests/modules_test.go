package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// testOnlyModules are what only tests use: they belong in tests/go.mod,
// never in reprise's, which every importer of resume/roundtrip reads.
var testOnlyModules = []string{
	"github.com/chromedp/chromedp",
	"github.com/chromedp/cdproto",
	"github.com/Shopify/toxiproxy/v2",
	"github.com/compose-spec/compose-go/v2",
	"k8s.io/api",
	"k8s.io/apimachinery",
	"sigs.k8s.io/yaml",
	"github.com/openai/openai-go/v3",
	"github.com/anthropics/anthropic-sdk-go/v2",
	"go.uber.org/goleak",
}

// TestModulesKeepTestOnlyDependenciesOut: reprise's go.mod requires none of
// the test-only modules, and reprise's module builds with its tests on its
// own (no go.work): no package or test of it imports one of them, so each
// belongs here, in the tests' module.
func TestModulesKeepTestOnlyDependenciesOut(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range testOnlyModules {
		if regexp.MustCompile(`(?m)^\s*(require\s+)?` + regexp.QuoteMeta(m) + `\s+v`).Match(gomod) {
			t.Errorf("go.mod requires %s, which only tests use (it belongs in tests/go.mod)", m)
		}
	}
	cmd := exec.Command("go", "list", "-e", "-test", "-deps", "-f", "{{.ImportPath}}\t{{if .Error}}{{.Error}}{{end}}", "./...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list in reprise's module alone: %v\n%s", err, out)
	}
	pkgs := 0
	for line := range strings.Lines(string(out)) {
		pkg, problem, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		pkgs++
		if problem != "" {
			t.Errorf("reprise's module alone: %s: %s", pkg, problem)
		}
		for _, m := range testOnlyModules {
			if pkg == m || strings.HasPrefix(pkg, m+"/") {
				t.Errorf("reprise's module imports %s (%s): only tests/ may", m, pkg)
			}
		}
	}
	if pkgs < 100 {
		t.Errorf("go list in reprise's module alone listed %d packages: the check looks at the wrong list", pkgs)
	}
}
