package tests

import (
	"encoding/json"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	yaml "go.yaml.in/yaml/v4"
)

// composeImageIs reports whether image (registry/owner/name:tag) is name.
func composeImageIs(image, name string) bool {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return path.Base(image) == name
}

// composeMountedAt returns the host path mounted at the container path
// target: a file mounted there, or the file inside a directory mounted
// above it; "" if nothing is.
func composeMountedAt(s types.ServiceConfig, target string) string {
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		if v.Target == target {
			return v.Source
		}
		if rel, ok := strings.CutPrefix(target, strings.TrimSuffix(v.Target, "/")+"/"); ok {
			return filepath.Join(v.Source, filepath.FromSlash(rel))
		}
	}
	return ""
}

// composeReadYAML decodes the YAML file at file into v.
func composeReadYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file) // #nosec G304 -- a file of this repository
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// composePrometheusConfig is what the test reads of prometheus.yml.
type composePrometheusConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// composeCheckPrometheus checks that Prometheus scrapes /metrics of every
// reprise replica directly and evaluates deploy/prometheus/alerts.yml.
func composeCheckPrometheus(t *testing.T, p *types.Project, top composeTopology) {
	t.Helper()
	s := p.Services[top.prometheus]
	confPath := composeFlag(s.Command, "--config.file")
	if confPath == "" {
		confPath = "/etc/prometheus/prometheus.yml" // the image's default
	}
	host := composeMountedAt(s, confPath)
	if host == "" {
		t.Fatalf("%s: nothing mounted at its --config.file %s", top.prometheus, confPath)
	}
	var conf composePrometheusConfig
	composeReadYAML(t, host, &conf)

	var want []string
	for _, svc := range top.reprise {
		want = append(want, net.JoinHostPort(svc, strings.TrimPrefix(composePortOf(composeEnvOf(p.Services[svc])["REPRISE_LISTEN"]), ":")))
	}
	var got []string
	for _, sc := range conf.ScrapeConfigs {
		var targets []string
		for _, st := range sc.StaticConfigs {
			targets = append(targets, st.Targets...)
		}
		if !slices.ContainsFunc(targets, func(tg string) bool { return slices.Contains(want, tg) }) {
			continue
		}
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s scrapes %s, reprise serves /metrics", sc.JobName, sc.MetricsPath)
		}
		got = append(got, targets...)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("scrape targets %v, want every replica, directly: %v", got, want)
	}

	alerts := filepath.Join(composeRoot(t), "deploy", "prometheus", "alerts.yml")
	found := false
	for _, rf := range conf.RuleFiles {
		if !path.IsAbs(rf) {
			rf = path.Join(path.Dir(confPath), rf)
		}
		if h := composeMountedAt(s, rf); h == "" {
			t.Errorf("rule file %s is not mounted", rf)
		} else if h == alerts {
			found = true
		}
	}
	if !found {
		t.Errorf("rule_files %v do not load %s", conf.RuleFiles, alerts)
	}
	published := false
	for _, port := range s.Ports {
		published = published || port.Published != ""
	}
	if !published {
		t.Errorf("%s publishes no port", top.prometheus)
	}

	if bin, err := exec.LookPath("promtool"); err == nil {
		out, err := exec.Command(bin, "check", "config", host).CombinedOutput() // #nosec G204 -- a file of this repository
		if err != nil {
			t.Errorf("promtool check config: %v\n%s", err, out)
		}
	} else if os.Getenv(promtoolRequired) != "" {
		t.Errorf("promtool is not on PATH (%s is set)", promtoolRequired)
	}
}

// composeGrafanaDashboard is what the test reads of a dashboard.
type composeGrafanaDashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// composeCheckGrafana checks that Grafana is provisioned with a data source
// on the compose Prometheus and with deploy/grafana/reprise.json, and that
// the dashboard shows the upstream, the instances and their journal.
func composeCheckGrafana(t *testing.T, p *types.Project, top composeTopology) {
	t.Helper()
	s := p.Services[top.grafana]
	root := composeRoot(t)

	dsDir := composeMountedAt(s, "/etc/grafana/provisioning/datasources")
	if dsDir == "" {
		t.Fatalf("%s: no data sources provisioned in /etc/grafana/provisioning/datasources", top.grafana)
	}
	promPort := strings.TrimPrefix(composePortOf(composeFlag(p.Services[top.prometheus].Command, "--web.listen-address")), ":")
	if promPort == "" {
		promPort = "9090"
	}
	files, _ := filepath.Glob(filepath.Join(dsDir, "*.yml"))
	reached := false
	for _, f := range files {
		var conf struct {
			Datasources []struct {
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		composeReadYAML(t, f, &conf)
		for _, ds := range conf.Datasources {
			u, err := url.Parse(ds.URL)
			if ds.Type == "prometheus" && err == nil && u.Hostname() == top.prometheus && u.Port() == promPort {
				reached = true
			}
		}
	}
	if !reached {
		t.Errorf("no provisioned prometheus data source at http://%s:%s (files %v)", top.prometheus, promPort, files)
	}

	dbDir := composeMountedAt(s, "/etc/grafana/provisioning/dashboards")
	if dbDir == "" {
		t.Fatalf("%s: no dashboards provisioned in /etc/grafana/provisioning/dashboards", top.grafana)
	}
	files, _ = filepath.Glob(filepath.Join(dbDir, "*.yml"))
	want := filepath.Join(root, "deploy", "grafana", "reprise.json")
	provisioned := false
	for _, f := range files {
		var conf struct {
			Providers []struct {
				Type    string `yaml:"type"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		composeReadYAML(t, f, &conf)
		for _, pr := range conf.Providers {
			if pr.Type == "file" && pr.Options.Path != "" && composeMountedAt(s, path.Join(pr.Options.Path, "reprise.json")) == want {
				provisioned = true
			}
		}
	}
	if !provisioned {
		t.Errorf("no file provider loads %s (providers in %v)", want, files)
	}

	b, err := os.ReadFile(want) // #nosec G304 -- a file of this repository
	if err != nil {
		t.Fatal(err)
	}
	var d composeGrafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", want, err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: uid %q, title %q, %d panels", want, d.UID, d.Title, len(d.Panels))
	}
	var exprs []string
	for _, panel := range d.Panels {
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, tg := range panel.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q has an empty query", panel.Title)
			}
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for what, re := range map[string]string{
		"retry ratio":           `reprise_upstream_retries_total.*/.*reprise_upstream_attempts_total`,
		"status mix":            `by \([^)]*status[^)]*\) \(rate\(reprise_upstream_attempts_total`,
		"duplicates suppressed": `reprise_duplicates_suppressed_total`,
		"cost":                  `reprise_cost_total`,
		"cost saved":            `reprise_cost_saved_total`,
		"resume latency":        `histogram_quantile\(.*reprise_resume_\w+_seconds_bucket`,
		"instances up":          `up\{job="reprise"\}`,
		"request rate":          `rate\(reprise_requests_total`,
		"first-token latency":   `histogram_quantile\(.*reprise_client_first_token_seconds_bucket`,
		"journal lag":           `reprise_journal_lag_seconds`,
		"append latency":        `histogram_quantile\(.*reprise_journal_append_seconds_bucket`,
		"journal errors":        `rate\(reprise_journal_errors_total`,
		"journal stalls":        `rate\(reprise_journal_stalls_total`,
		"running generations":   `reprise_generations_running`,
		"failed generations":    `reprise_generations_total\{outcome!="completed"\}`,
		"saved generations":     `reprise_generations_saved_total`,
	} {
		if !regexp.MustCompile(re).MatchString(all) {
			t.Errorf("the dashboard does not show the %s (no query matches %s)", what, re)
		}
	}
}
