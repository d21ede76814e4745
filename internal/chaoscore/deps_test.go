package chaoscore

import (
	"os/exec"
	"strings"
	"testing"
)

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	return strings.Fields(string(out))
}

// The production binary does not link the chaos harnesses' core, and the
// core does not lean on the tests package.
func TestImports(t *testing.T) {
	const self = "github.com/reprise-dev/reprise/internal/chaoscore"
	bin := deps(t, "github.com/reprise-dev/reprise/cmd/reprise")
	if !strings.Contains(strings.Join(bin, " "), "github.com/reprise-dev/reprise/resume") {
		t.Fatal("cmd/reprise does not import resume: the check looks at the wrong list")
	}
	for _, p := range bin {
		if p == self {
			t.Errorf("cmd/reprise links %s", self)
		}
	}
	for _, p := range deps(t, self) {
		if strings.HasPrefix(p, "github.com/reprise-dev/reprise/tests") {
			t.Errorf("%s imports %s", self, p)
		}
	}
}
