package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// promtoolRequired makes TestAlertRules fail, not skip, without promtool:
// .ci/run installs Debian's prometheus package and sets it.
const promtoolRequired = "REPRISE_REQUIRE_PROMTOOL"

// TestAlertRules checks deploy/prometheus/alerts.yml with promtool: the
// rules parse (check rules) and each alert fires on the traffic it is
// about and stays quiet on normal traffic (test rules, alerts_test.yml).
func TestAlertRules(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(promtoolRequired) != "" {
			t.Fatalf("promtool is not on PATH (%s is set): apt-get install prometheus", promtoolRequired)
		}
		t.Skipf("promtool is not on PATH (apt-get install prometheus; set %s to require it)", promtoolRequired)
	}
	dir := filepath.Join(composeRoot(t), "deploy", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, args...) // #nosec G204 -- fixed arguments
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
