package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
)

func TestParseConfig(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(config) bool
		wantErr bool
	}{
		{"defaults", nil, nil, func(c config) bool {
			return c.listen == ":8080" && c.upstream == "demo" && c.data == "./data" && c.nats == "" && c.p.Journal.TTL == 24*time.Hour && c.p.Journal.Replicas == 1
		}, false},
		{"flags", []string{"--listen", "127.0.0.1:9", "--upstream", "http://u:1", "--ttl", "2h", "--nats", "nats://a:4222"}, nil, func(c config) bool {
			return c.listen == "127.0.0.1:9" && c.upstream == "http://u:1" && c.p.Journal.TTL == 2*time.Hour && c.nats == "nats://a:4222"
		}, false},
		{"env", nil, map[string]string{"REPRISE_LISTEN": ":1", "REPRISE_TTL": "3h", "REPRISE_REPLICAS": "3", "REPRISE_DATA": "/d"}, func(c config) bool {
			return c.listen == ":1" && c.p.Journal.TTL == 3*time.Hour && c.p.Journal.Replicas == 3 && c.data == "/d"
		}, false},
		{"flag beats env", []string{"--listen", ":2"}, map[string]string{"REPRISE_LISTEN": ":1"}, func(c config) bool { return c.listen == ":2" }, false},
		{"cors origins", []string{"--cors-origins", "https://a.example, *"}, nil, func(c config) bool {
			return len(c.p.HTTP.CORSOrigins) == 2 && c.p.HTTP.CORSOrigins[0] == "https://a.example" && c.p.HTTP.CORSOrigins[1] == "*"
		}, false},
		{"cors origins from env", nil, map[string]string{"REPRISE_CORS_ORIGINS": "http://localhost:3000"}, func(c config) bool {
			return len(c.p.HTTP.CORSOrigins) == 1 && c.p.HTTP.CORSOrigins[0] == "http://localhost:3000"
		}, false},
		{"cors origin with a path", []string{"--cors-origins", "https://a.example/app"}, nil, nil, true},
		{"ttl too short", []string{"--ttl", "1s"}, nil, nil, true},
		{"ttl under the generation cap and lease", []string{"--ttl", "30m"}, nil, nil, true},
		{"ttl past a shorter generation cap and lease", []string{"--ttl", "10m", "--max-generation", "9m", "--lease", "30s"}, nil, func(c config) bool { return c.p.Journal.TTL == 10*time.Minute }, false},
		{"lease too short", []string{"--lease", "1ms"}, nil, nil, true},
		{"cancel-unread off by default", nil, nil, func(c config) bool { return c.p.Limits.CancelUnread == 0 }, false},
		{"cancel-unread set", []string{"--cancel-unread", "5m"}, nil, func(c config) bool { return c.p.Limits.CancelUnread == 5*time.Minute }, false},
		{"cancel-unread too short", []string{"--cancel-unread", "10ms"}, nil, nil, true},
		{"journal timeout too short", []string{"--journal-timeout", "10ms"}, nil, nil, true},
		{"journal linger default", nil, nil, func(c config) bool { return c.p.Journal.Linger == journal.DefaultLinger }, false},
		{"journal linger off", []string{"--journal-linger", "0"}, nil, func(c config) bool { return c.p.Journal.Linger < 0 }, false},
		{"journal linger too long", []string{"--journal-linger", "2s"}, nil, nil, true},
		{"journal linger alone default", nil, nil, func(c config) bool { return c.p.Journal.LingerAlone == journal.DefaultLingerAlone }, false},
		{"journal linger alone as linger", []string{"--journal-linger-alone", "0"}, nil, func(c config) bool { return c.p.Journal.LingerAlone < 0 }, false},
		{"journal linger alone too long", []string{"--journal-linger-alone", "10s"}, nil, nil, true},
		{"journal timeout from env", nil, map[string]string{"REPRISE_JOURNAL_TIMEOUT": "45s"}, func(c config) bool { return c.p.Journal.AppendTimeout == 45*time.Second }, false},
		{"tenant generations follow the upstream concurrency", []string{"--upstream-concurrency", "900"}, nil, func(c config) bool { return c.p.Limits.MaxTenantGenerations == 900 }, false},
		{"tenant generations default", nil, nil, func(c config) bool { return c.p.Limits.MaxTenantGenerations == 512 }, false},
		{"tenant generations set", []string{"--max-tenant-generations", "8"}, nil, func(c config) bool { return c.p.Limits.MaxTenantGenerations == 8 }, false},
		{"tenant generations negative", []string{"--max-tenant-generations", "-1"}, nil, nil, true},
		{"shed lag default", nil, nil, func(c config) bool { return c.p.HTTP.ShedLag == 500*time.Millisecond }, false},
		{"results cache default", nil, nil, func(c config) bool { return c.p.ResultsCache == engine.DefaultResultsCache }, false},
		{"results cache off", []string{"--results-cache", "0"}, nil, func(c config) bool { return c.p.ResultsCache < 0 }, false},
		{"results cache from env", nil, map[string]string{"REPRISE_RESULTS_CACHE": "1048576"}, func(c config) bool { return c.p.ResultsCache == 1<<20 }, false},
		{"results cache negative", []string{"--results-cache", "-1"}, nil, nil, true},
		{"shed lag from env", nil, map[string]string{"REPRISE_SHED_LAG": "250ms"}, func(c config) bool { return c.p.HTTP.ShedLag == 250*time.Millisecond }, false},
		{"shed lag 0 turns shedding off", []string{"--shed-lag", "0"}, nil, func(c config) bool { return c.p.HTTP.ShedLag < 0 }, false},
		{"shed lag negative", []string{"--shed-lag", "-1s"}, nil, nil, true},
		{"replay turns default", nil, nil, func(c config) bool { return c.p.HTTP.ReplayTurns == 0 }, false},
		{"replay turns set", []string{"--replay-turns", "4"}, nil, func(c config) bool { return c.p.HTTP.ReplayTurns == 4 }, false},
		{"replay turns off", nil, map[string]string{"REPRISE_REPLAY_TURNS": "-1"}, func(c config) bool { return c.p.HTTP.ReplayTurns < 0 }, false},
		{"replay turns below -1", []string{"--replay-turns", "-2"}, nil, nil, true},
		{"bad log level", []string{"--log-level", "loud"}, nil, nil, true},
		{"stray argument", []string{"extra"}, nil, nil, true},
		{"unknown flag", []string{"--nope"}, nil, nil, true},
		{"bad replicas env", nil, map[string]string{"REPRISE_REPLICAS": "x"}, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, env(tc.env))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.check != nil && !tc.check(c) {
				t.Errorf("config %+v", c)
			}
		})
	}
}

func TestUpstreamURL(t *testing.T) {
	for _, bad := range []string{"ftp://x", "not a url", "http://", "localhost:8080", "http://a,", "http://a,ftp://b"} {
		if _, err := parseConfig([]string{"--upstream", bad}, noEnv); err == nil || !strings.Contains(err.Error(), "--upstream ") {
			t.Errorf("upstream %q: %v, want an error naming --upstream", bad, err)
		}
	}
	for _, bad := range []string{"https://user:pw@a.test", "https://a.test/v1#x"} {
		if _, err := parseConfig([]string{"--upstream", bad}, noEnv); err == nil || !strings.Contains(err.Error(), "--upstream ") {
			t.Errorf("upstream %q: %v, want an error naming --upstream", bad, err)
		}
	}
	c, err := parseConfig([]string{"--upstream", "https://api.example.test/v1/"}, noEnv)
	if u := c.upstreamURLs; err != nil || len(u) != 1 || u[0].String() != "https://api.example.test/v1" {
		t.Errorf("got %v, %v; want the version root without its trailing slash", u, err)
	}
	c, err = parseConfig([]string{"--upstream", "https://gw.test/v1beta/openai?api-version=1"}, noEnv)
	if u := c.upstreamURLs; err != nil || len(u) != 1 || u[0].String() != "https://gw.test/v1beta/openai?api-version=1" {
		t.Errorf("got %v, %v; want the version root and its query", u, err)
	}
	c, err = parseConfig([]string{"--upstream", "https://a.test/v1, http://b.test:8080"}, noEnv)
	if u := c.upstreamURLs; err != nil || len(u) != 2 || u[0].String() != "https://a.test/v1" || u[1].String() != "http://b.test:8080" {
		t.Errorf("a list: got %v, %v; want both, in order", u, err)
	}
	if c, err := parseConfig(nil, noEnv); err != nil || c.upstreamURLs != nil {
		t.Errorf("demo: %v, %v; want no URL (the demo starts at run)", c.upstreamURLs, err)
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "reprise.conf")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# settings\nretry-attempts = 5\nlisten = \":7\"\nbreaker-delay = 2s # comment\nupstream-idempotency = true\nupstream-background = true\n")
	env := map[string]string{"REPRISE_LISTEN": ":8"}
	c, err := parseConfig([]string{"--config", path, "--breaker-delay", "3s"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if c.p.Policy.MaxAttempts != 5 || c.listen != ":8" || c.p.Policy.BreakerDelay != 3*time.Second || !c.p.UpstreamIdempotency || !c.p.Policy.RetryAmbiguous || !c.p.UpstreamBackground {
		t.Errorf("precedence flag > env > file broken: %+v", c)
	}
	for name, body := range map[string]string{
		"unknown name": "nope = 1\n",
		"no equals":    "retry-attempts 5\n",
		"bad value":    "retry-attempts = many\n",
		"out of range": "retry-attempts = 50\n",
	} {
		write(body)
		if _, err := parseConfig([]string{"--config", path}, func(string) string { return "" }); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := parseConfig([]string{"--config", filepath.Join(dir, "missing")}, func(string) string { return "" }); err == nil {
		t.Error("missing file accepted")
	}
}

// The production binary links no test package: the demo model it serves
// lives in internal/mockllm, not under tests/.
func TestBinaryImportsNoTestPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/reprise-dev/reprise/tests") {
			t.Errorf("cmd/reprise imports %s", pkg)
		}
	}
	if !strings.Contains(string(out), "github.com/reprise-dev/reprise/internal/mockllm") {
		t.Error("cmd/reprise does not import the demo model (internal/mockllm): the check looks at the wrong list")
	}
}

// TestReadRoutes: the upstreams file's lines, their settings, and clear
// errors for what is wrong in it.
func TestReadRoutes(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		t.Helper()
		p := filepath.Join(dir, "upstreams")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := func(k string) string { return map[string]string{"ANTHROPIC_KEY": "sk-ant", "OPENAI_KEY": "sk-oai"}[k] }
	routes, err := readRoutes(write(`# comment
claude https://api.anthropic.com key_env=ANTHROPIC_KEY paths=/v1/messages
openai https://api.openai.com/v1 key_env=OPENAI_KEY models=gpt-*,o3
backup http://localhost:9090
`), env)
	if err != nil || len(routes) != 3 {
		t.Fatalf("routes %+v, %v", routes, err)
	}
	if r := routes[0]; r.Name != "claude" || r.Key != "sk-ant" || len(r.Paths) != 1 || r.Paths[0] != "/v1/messages" {
		t.Errorf("first route %+v", r)
	}
	if r := routes[1]; r.URL.String() != "https://api.openai.com/v1" || r.Key != "sk-oai" || len(r.Models) != 2 {
		t.Errorf("second route %+v", r)
	}
	if r := routes[2]; r.Key != "" || r.Paths != nil || r.Models != nil {
		t.Errorf("third route %+v", r)
	}
	azure, err := readRoutes(write("azure https://res.openai.azure.com/openai/v1?api-version=preview key_env=OPENAI_KEY auth=api-key\n"), env)
	if err != nil || len(azure) != 1 || azure[0].KeyHeader != "api-key" || azure[0].URL.String() != "https://res.openai.azure.com/openai/v1?api-version=preview" {
		t.Errorf("an Azure line: %+v, %v", azure, err)
	}
	for _, bad := range []string{"", "lonely", "x ftp://h", "x http://h key_env=UNSET", "x http://h colour=blue", "x http://h auth=cookie", "x http://h auth="} {
		if _, err := readRoutes(write(bad), env); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestFormerNameYields: --sdk-retry-window, the former name of
// --keyless-retry-window, counts only where the new name is set nowhere:
// with both, in any order and from any source, the new name wins.
func TestFormerNameYields(t *testing.T) {
	off := time.Duration(-1) // --keyless-retry-window 0: recognition off
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want time.Duration
	}{
		{"new then former", []string{"--keyless-retry-window", "0", "--sdk-retry-window", "30s"}, nil, off},
		{"former then new", []string{"--sdk-retry-window", "30s", "--keyless-retry-window", "0"}, nil, off},
		{"former in the environment", []string{"--keyless-retry-window", "0"}, map[string]string{"REPRISE_SDK_RETRY_WINDOW": "30s"}, off},
		{"both in the environment", nil, map[string]string{"REPRISE_SDK_RETRY_WINDOW": "30s", "REPRISE_KEYLESS_RETRY_WINDOW": "0"}, off},
		{"former alone", []string{"--sdk-retry-window", "45s"}, nil, 45 * time.Second},
		{"former alone, off", []string{"--sdk-retry-window", "0"}, nil, off},
	} {
		getenv := func(k string) string { return c.env[k] }
		cfg, err := parseConfig(c.args, getenv)
		if err != nil || cfg.p.HTTP.KeylessRetryWindow != c.want {
			t.Errorf("%s: window %v, %v; want %v", c.name, cfg.p.HTTP.KeylessRetryWindow, err, c.want)
		}
	}
}
