package tests

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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

// TestRulesUseExportedNames: every reprise_ series the alert rules and the
// dashboard query is one /metrics exports (after a priced generation and
// its replay, so that the cost families have series too): a renamed or
// misspelt family would leave an alert that can never fire.
func TestRulesUseExportedNames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	body := chatBody(uniquePrompt(t, "[tokens=3]"), true)
	for range 2 { // a generation, then a replay: cost and cost saved
		readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-rule-names"), -1)
		waitState(t, e, "k-rule-names", "completed")
	}
	exported := map[string]bool{}
	for line := range strings.SplitSeq(readBody(t, do(t, "GET", e.URL+"/metrics", "")), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			exported[strings.Fields(name)[0]] = true
		}
	}
	series := regexp.MustCompile(`\breprise_[a-z0-9_]+`)
	root := composeRoot(t)
	for _, file := range []string{"deploy/prometheus/alerts.yml", "deploy/grafana/reprise.json"} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, name := range series.FindAllString(string(b), -1) {
			family := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if f, ok := strings.CutSuffix(name, suffix); ok && exported[f] {
					family = f
				}
			}
			if !exported[family] && !seen[name] {
				t.Errorf("%s queries %s, which /metrics does not export", file, name)
			}
			seen[name] = true
		}
		if len(seen) == 0 {
			t.Errorf("%s queries no reprise_ series", file)
		}
	}
}
