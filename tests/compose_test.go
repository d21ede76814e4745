package tests

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	natsconf "github.com/nats-io/nats-server/v2/conf"
)

// composeSecret is the REPRISE_SECRET the compose file is loaded with.
const composeSecret = "compose-test-secret-0123456789abcdef"

// composeShutdownTail is the margin stop_grace_period keeps beyond what
// reprise may need on SIGTERM: --grace for running generations to finish,
// then up to --journal-timeout for the ones still running to be recorded as
// failed (cmd/reprise run), then closing connections and NATS.
const composeShutdownTail = 5 * time.Second

// composeJournalTimeout is --journal-timeout's default.
const composeJournalTimeout = 30 * time.Second

// TestComposeFile checks the cluster topology of docker-compose.yml without
// a Docker engine: a 3-node JetStream cluster, two reprise replicas on it
// behind a load balancer without stickiness, the fake upstream, Prometheus
// and Grafana; and the load balancer's config, the monitoring configs and
// the Dockerfile it builds.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	root := composeRoot(t)
	p, err := composeLoad(root, map[string]string{"REPRISE_SECRET": composeSecret})
	if err != nil {
		t.Fatalf("loading docker-compose.yml: %v", err)
	}
	top := composeRoles(t, p)

	t.Run("services", func(t *testing.T) {
		if len(top.nats) != 3 || len(top.reprise) != 2 || top.upstream == "" || top.lb == "" || top.prometheus == "" || top.grafana == "" {
			t.Fatalf("want 3 nats, 2 reprise, 1 upstream, 1 load balancer, Prometheus and Grafana; got nats %v, reprise %v, upstream %q, lb %q, prometheus %q, grafana %q",
				top.nats, top.reprise, top.upstream, top.lb, top.prometheus, top.grafana)
		}
	})
	if t.Failed() {
		return
	}
	nodes := composeNATSNodes(t, root, p, top.nats)

	t.Run("nats cluster", func(t *testing.T) {
		want := strings.TrimPrefix(moduleVersion(t, "github.com/nats-io/nats-server/v2"), "v")
		names := map[string]string{}
		for _, svc := range top.nats {
			n := nodes[svc]
			if !strings.HasPrefix(p.Services[svc].Image, "nats:") {
				t.Errorf("%s: image %q, want the official nats image", svc, p.Services[svc].Image)
			}
			if tag := strings.TrimPrefix(p.Services[svc].Image, "nats:"); tag != want && !strings.HasPrefix(tag, want+"-") {
				t.Errorf("%s: image %q, want nats:%s (the nats-server the tests run, go.mod), or a variant of it", svc, p.Services[svc].Image, want)
			}
			if !n.jetstream {
				t.Errorf("%s: JetStream is not enabled", svc)
			}
			if n.cluster == "" {
				t.Errorf("%s: no cluster name", svc)
			} else if n.cluster != nodes[top.nats[0]].cluster {
				t.Errorf("%s: cluster %q, %s is in %q", svc, n.cluster, top.nats[0], nodes[top.nats[0]].cluster)
			}
			if n.name == "" {
				t.Errorf("%s: no server name (clustered JetStream needs a unique one)", svc)
			} else if other, dup := names[n.name]; dup {
				t.Errorf("%s and %s share the server name %q", svc, other, n.name)
			}
			names[n.name] = svc
			// Every other node is a route, on its cluster port.
			for _, peer := range top.nats {
				if peer == svc {
					continue
				}
				want := net.JoinHostPort(peer, strconv.Itoa(nodes[peer].clusterPort))
				if !slices.Contains(n.routes, want) {
					t.Errorf("%s: routes %v do not reach %s", svc, n.routes, want)
				}
			}
		}
	})

	t.Run("nats volumes", func(t *testing.T) {
		seen := map[string]string{}
		for _, svc := range top.nats {
			n := nodes[svc]
			var vol *types.ServiceVolumeConfig
			for _, v := range p.Services[svc].Volumes {
				if v.Target == n.storeDir {
					vol = &v
				}
			}
			switch {
			case n.storeDir == "":
				t.Errorf("%s: no JetStream store_dir", svc)
			case vol == nil:
				t.Errorf("%s: nothing mounted at its store_dir %s", svc, n.storeDir)
			case vol.Type != types.VolumeTypeVolume:
				t.Errorf("%s: store_dir %s is a %s mount, want a named volume", svc, n.storeDir, vol.Type)
			default:
				if _, ok := p.Volumes[vol.Source]; !ok {
					t.Errorf("%s: volume %q is not declared", svc, vol.Source)
				}
				if other, dup := seen[vol.Source]; dup {
					t.Errorf("%s and %s share the volume %q", svc, other, vol.Source)
				}
				seen[vol.Source] = svc
			}
		}
	})

	t.Run("reprise replicas", func(t *testing.T) {
		wantNATS := make([]string, 0, len(top.nats))
		for _, svc := range top.nats {
			wantNATS = append(wantNATS, "nats://"+net.JoinHostPort(svc, strconv.Itoa(nodes[svc].clientPort)))
		}
		slices.Sort(wantNATS)
		upPort := composeFlag(p.Services[top.upstream].Command, "--listen")
		for _, svc := range top.reprise {
			s := p.Services[svc]
			env := composeEnvOf(s)
			got := strings.Split(env["REPRISE_NATS"], ",")
			for i := range got {
				got[i] = strings.TrimSpace(got[i])
			}
			slices.Sort(got)
			if !slices.Equal(got, wantNATS) {
				t.Errorf("%s: REPRISE_NATS lists %v, want every node %v", svc, got, wantNATS)
			}
			if env["REPRISE_REPLICAS"] != "3" {
				t.Errorf("%s: REPRISE_REPLICAS=%q, want 3", svc, env["REPRISE_REPLICAS"])
			}
			if env["REPRISE_SECRET"] != composeSecret {
				t.Errorf("%s: REPRISE_SECRET=%q, want the one from the environment", svc, env["REPRISE_SECRET"])
			}
			// By default the upstreams file is the demo model's: the
			// upstream service, on the port it listens on.
			for _, rt := range composeRoutes(t, s, env) {
				if u, err := url.Parse(rt.url); err != nil || u.Hostname() != top.upstream || ":"+u.Port() != composePortOf(upPort) {
					t.Errorf("%s: the upstreams file sends %s to %q, want http://%s%s", svc, rt.name, rt.url, top.upstream, composePortOf(upPort))
				}
			}
			if env["REPRISE_AUTH"] != "passthrough" || env["REPRISE_PROXY_KEYS"] != "" {
				t.Errorf("%s: REPRISE_AUTH=%q REPRISE_PROXY_KEYS=%q by default, want passthrough and none", svc, env["REPRISE_AUTH"], env["REPRISE_PROXY_KEYS"])
			}
			if len(s.Ports) > 0 {
				t.Errorf("%s publishes %v: replicas are reached through the load balancer only", svc, s.Ports)
			}
			if s.Image != p.Services[top.upstream].Image || (s.Build == nil) != (p.Services[top.upstream].Build == nil) {
				t.Errorf("%s (image %q) and %s (image %q) should run the same image", svc, s.Image, top.upstream, p.Services[top.upstream].Image)
			}
			for _, n := range top.nats {
				if d, ok := s.DependsOn[n]; !ok || d.Condition != types.ServiceConditionHealthy {
					t.Errorf("%s: should wait for %s to be healthy (depends_on %+v)", svc, n, s.DependsOn)
				}
			}
			// Graceful stop: --grace, then --journal-timeout, then the
			// tail, before SIGKILL.
			grace := 30 * time.Second
			if v := env["REPRISE_GRACE"]; v != "" {
				if grace, err = time.ParseDuration(v); err != nil {
					t.Errorf("%s: REPRISE_GRACE=%q: %v", svc, v, err)
				}
			}
			journal := composeJournalTimeout
			if v := env["REPRISE_JOURNAL_TIMEOUT"]; v != "" {
				if journal, err = time.ParseDuration(v); err != nil {
					t.Errorf("%s: REPRISE_JOURNAL_TIMEOUT=%q: %v", svc, v, err)
				}
			}
			stop := 10 * time.Second // Docker's default
			if s.StopGracePeriod != nil {
				stop = time.Duration(*s.StopGracePeriod)
			}
			if stop < grace+journal+composeShutdownTail {
				t.Errorf("%s: stop_grace_period %s < REPRISE_GRACE %s + REPRISE_JOURNAL_TIMEOUT %s + %s: generations cut at the end of the grace would be killed before they are recorded as failed", svc, stop, grace, journal, composeShutdownTail)
			}
		}
		a, b := composeEnvOf(p.Services[top.reprise[0]]), composeEnvOf(p.Services[top.reprise[1]])
		for _, k := range []string{"REPRISE_SECRET", "REPRISE_NATS", "REPRISE_REPLICAS", "REPRISE_UPSTREAMS", "REPRISE_AUTH", "REPRISE_TTL", "REPRISE_LEASE", "REPRISE_LISTEN", "REPRISE_JOURNAL_TIMEOUT"} {
			if a[k] != b[k] {
				t.Errorf("%s differs between the replicas: %q and %q", k, a[k], b[k])
			}
		}
	})

	t.Run("healthchecks", func(t *testing.T) {
		for _, svc := range append(append([]string{top.upstream, top.lb, top.prometheus, top.grafana}, top.nats...), top.reprise...) {
			hc := p.Services[svc].HealthCheck
			if hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE" {
				t.Errorf("%s: no healthcheck", svc)
			}
		}
		for _, svc := range top.nats {
			if p.Services[svc].HealthCheck == nil {
				continue
			}
			test := strings.Join(p.Services[svc].HealthCheck.Test, " ")
			want := fmt.Sprintf(":%d/healthz?js-enabled-only=true", nodes[svc].httpPort)
			if !strings.Contains(test, want) {
				t.Errorf("%s: healthcheck %q does not ask the monitoring port %s", svc, test, want)
			}
		}
		for _, svc := range top.reprise {
			if p.Services[svc].HealthCheck == nil {
				continue
			}
			if test := strings.Join(p.Services[svc].HealthCheck.Test, " "); !strings.Contains(test, "/readyz") {
				t.Errorf("%s: healthcheck %q should ask /readyz", svc, test)
			}
		}
	})

	t.Run("load balancer", func(t *testing.T) {
		lb := p.Services[top.lb]
		published := false
		for _, port := range lb.Ports {
			if port.Published == "8080" {
				published = true
			}
		}
		if !published {
			t.Errorf("%s: ports %+v, want 8080 published", top.lb, lb.Ports)
		}
		if !strings.HasPrefix(lb.Image, "caddy:") {
			t.Fatalf("%s: image %q; this test reads a Caddyfile (teach it the other balancer's config)", top.lb, lb.Image)
		}
		conf := composeMounted(t, lb, "/etc/caddy/Caddyfile")
		var want []string
		for _, svc := range top.reprise {
			want = append(want, net.JoinHostPort(svc, strings.TrimPrefix(composePortOf(composeEnvOf(p.Services[svc])["REPRISE_LISTEN"]), ":")))
		}
		composeCheckCaddy(t, conf, want)
	})

	t.Run("caddy adapt", func(t *testing.T) {
		bin, err := exec.LookPath("caddy")
		if err != nil {
			t.Skip("caddy is not installed")
		}
		conf := composeMounted(t, p.Services[top.lb], "/etc/caddy/Caddyfile")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "adapt", "--config", conf, "--adapter", "caddyfile").CombinedOutput()
		if err != nil {
			t.Fatalf("caddy adapt: %v\n%s", err, out)
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		composeCheckPrometheus(t, p, top)
	})

	t.Run("grafana", func(t *testing.T) {
		composeCheckGrafana(t, p, top)
	})

	t.Run("monitoring on loopback", func(t *testing.T) {
		for _, svc := range []string{top.prometheus, top.grafana} {
			for _, port := range p.Services[svc].Ports {
				if port.Published != "" && port.HostIP != "127.0.0.1" && port.HostIP != "::1" {
					t.Errorf("%s publishes %s on %q: want loopback only (127.0.0.1), it has no authentication", svc, port.Published, port.HostIP)
				}
			}
		}
	})

	t.Run("grafana without login", func(t *testing.T) {
		env := composeEnvOf(p.Services[top.grafana])
		for k, want := range map[string]string{
			"GF_AUTH_ANONYMOUS_ENABLED": "true", "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
			"GF_AUTH_DISABLE_LOGIN": "true", "GF_AUTH_DISABLE_LOGIN_FORM": "true", "GF_AUTH_BASIC_ENABLED": "false",
		} {
			if env[k] != want {
				t.Errorf("%s: %s=%q, want %q (read-only, and no login with the default admin password)", top.grafana, k, env[k], want)
			}
		}
	})

	t.Run("compose variables outside REPRISE_", func(t *testing.T) {
		// A REPRISE_* variable the file interpolates is one reprise reads
		// itself, handed on under its own name: a compose-only one there
		// would be warned about by every reprise started in that shell.
		given := composeEnvOf(p.Services[top.reprise[0]])
		b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\$\{(REPRISE_\w+)`).FindAllStringSubmatch(string(b), -1) {
			if _, ok := given[m[1]]; !ok {
				t.Errorf("docker-compose.yml reads ${%s} but gives reprise no %s: a compose-only variable belongs outside the REPRISE_* namespace", m[1], m[1])
			}
		}
	})

	t.Run("secret required", func(t *testing.T) {
		for _, env := range []map[string]string{{}, {"REPRISE_SECRET": ""}} {
			_, err := composeLoad(root, env)
			if err == nil {
				t.Fatalf("loaded with env %v: want an error naming REPRISE_SECRET", env)
			}
			if !strings.Contains(err.Error(), "REPRISE_SECRET") || !strings.Contains(err.Error(), "random") {
				t.Errorf("env %v: error %q should name REPRISE_SECRET and say what to set", env, err)
			}
		}
	})

	t.Run("dockerfile", func(t *testing.T) {
		composeCheckDockerfile(t, filepath.Join(root, "Dockerfile"), p, top)
	})

	t.Run("docker-compose config", func(t *testing.T) {
		bin, err := exec.LookPath("docker-compose")
		if err != nil {
			t.Skip("docker-compose (v1) is not installed")
		}
		run := func(secret *string) ([]byte, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "-f", "docker-compose.yml", "config", "-q")
			cmd.Dir = root
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "REPRISE_SECRET=") && !strings.HasPrefix(kv, "COMPOSE_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			if secret != nil {
				cmd.Env = append(cmd.Env, "REPRISE_SECRET="+*secret)
			}
			return cmd.CombinedOutput()
		}
		secret := composeSecret
		if out, err := run(&secret); err != nil {
			t.Fatalf("docker-compose config -q: %v\n%s", err, out)
		}
		out, err := run(nil)
		if err == nil || !strings.Contains(string(out), "REPRISE_SECRET") {
			t.Errorf("docker-compose config without REPRISE_SECRET: err %v, output %q; want a failure naming it", err, out)
		}
	})
}

// composeTopology names the services by role.
type composeTopology struct {
	nats, reprise       []string // sorted
	upstream, lb        string
	prometheus, grafana string
}

// composeRoles sorts every service into a role, by what it runs: the nats
// image, reprise (REPRISE_NATS set), the mockllm entrypoint, the prometheus
// and grafana images, or a service publishing ports (the load balancer).
// Anything else fails.
func composeRoles(t *testing.T, p *types.Project) composeTopology {
	t.Helper()
	var top composeTopology
	for name, s := range p.Services {
		switch {
		case strings.HasPrefix(s.Image, "nats:") || strings.Contains(s.Image, "/nats:"):
			top.nats = append(top.nats, name)
		case composeEnvOf(s)["REPRISE_NATS"] != "":
			top.reprise = append(top.reprise, name)
		case composeImageIs(s.Image, "prometheus"):
			if top.prometheus != "" {
				t.Errorf("two Prometheus servers: %s and %s", top.prometheus, name)
			}
			top.prometheus = name
		case composeImageIs(s.Image, "grafana"):
			if top.grafana != "" {
				t.Errorf("two Grafanas: %s and %s", top.grafana, name)
			}
			top.grafana = name
		case len(s.Entrypoint) > 0 && filepath.Base(s.Entrypoint[0]) == "mockllm":
			if top.upstream != "" {
				t.Errorf("two upstreams: %s and %s", top.upstream, name)
			}
			top.upstream = name
		case len(s.Ports) > 0:
			if top.lb != "" {
				t.Errorf("two services publish ports: %s and %s", top.lb, name)
			}
			top.lb = name
		default:
			t.Errorf("service %s has no role in the topology", name)
		}
	}
	slices.Sort(top.nats)
	slices.Sort(top.reprise)
	return top
}

// composeRoot is the repository root (this package is tests/).
func composeRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "docker-compose.yml")); err != nil {
		t.Fatal(err)
	}
	return root
}

// composeLoad loads docker-compose.yml the way `docker compose` does, with
// env as the whole environment (no OS environment, no .env file).
func composeLoad(root string, env map[string]string) (*types.Project, error) {
	var kv []string
	for k, v := range env {
		kv = append(kv, k+"="+v)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithName("reprise"), cli.WithEnv(kv), cli.WithResolvedPaths(true))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return opts.LoadProject(ctx)
}

func composeEnvOf(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// composeFlag returns the value of flag in args ("--flag v" or "--flag=v").
func composeFlag(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// composePortOf returns ":port" of a listen address such as ":8080" or
// "0.0.0.0:8080".
func composePortOf(addr string) string {
	if i := strings.LastIndex(addr, ":"); i >= 0 {
		return addr[i:]
	}
	return ""
}

// composeMounted returns the host file bind-mounted at target.
func composeMounted(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == target {
			if _, err := os.Stat(v.Source); err != nil {
				t.Fatalf("%s: mounted config: %v", s.Name, err)
			}
			return v.Source
		}
	}
	t.Fatalf("%s: nothing is bind-mounted at %s", s.Name, target)
	return ""
}

// composeNATSNode is what one NATS service runs with: its config file,
// overridden by its command-line flags.
type composeNATSNode struct {
	name                              string
	cluster                           string
	jetstream                         bool
	storeDir                          string
	clientPort, httpPort, clusterPort int
	routes                            []string // host:port
}

func composeNATSNodes(t *testing.T, root string, p *types.Project, services []string) map[string]composeNATSNode {
	t.Helper()
	nodes := map[string]composeNATSNode{}
	for _, svc := range services {
		s := p.Services[svc]
		n := composeNATSNode{clientPort: 4222, clusterPort: 6222}
		var routes []any
		if target := composeFlag(s.Command, "--config"); target != "" {
			file := composeMounted(t, s, target)
			if !strings.HasPrefix(file, filepath.Join(root, "deploy")+string(filepath.Separator)) {
				t.Errorf("%s: config %s is not under deploy/", svc, file)
			}
			m, err := natsconf.ParseFile(file)
			if err != nil {
				t.Fatalf("%s: %v", svc, err)
			}
			n.name, _ = m["server_name"].(string)
			n.clientPort = composeInt(m["port"], n.clientPort)
			n.httpPort = composeInt(m["http_port"], composeInt(m["monitor_port"], 0))
			if js, ok := m["jetstream"]; ok {
				switch js := js.(type) {
				case map[string]any:
					n.jetstream = js["enabled"] != false
					n.storeDir, _ = js["store_dir"].(string)
				case bool:
					n.jetstream = js
				case string:
					n.jetstream = js == "enabled" || js == "true"
				}
			}
			if c, ok := m["cluster"].(map[string]any); ok {
				n.cluster, _ = c["name"].(string)
				n.clusterPort = composeInt(c["port"], n.clusterPort)
				if l, ok := c["listen"].(string); ok {
					n.clusterPort = composeInt(strings.TrimPrefix(composePortOf(l), ":"), n.clusterPort)
				}
				routes, _ = c["routes"].([]any)
			}
		}
		// Flags beat the file.
		args := s.Command
		if v := composeFlag(args, "--name"); v != "" {
			n.name = v
		} else if v := composeFlag(args, "--server_name"); v != "" {
			n.name = v
		}
		if v := composeFlag(args, "--cluster_name"); v != "" {
			n.cluster = v
		}
		if slices.Contains(args, "--jetstream") || slices.Contains(args, "-js") {
			n.jetstream = true
		}
		if v := composeFlag(args, "--store_dir"); v != "" {
			n.storeDir = v
		}
		if v := composeFlag(args, "--http_port"); v != "" {
			n.httpPort = composeInt(v, n.httpPort)
		}
		if v := composeFlag(args, "--routes"); v != "" {
			routes = nil
			for r := range strings.SplitSeq(v, ",") {
				routes = append(routes, strings.TrimSpace(r))
			}
		}
		for _, r := range routes {
			rs, _ := r.(string)
			u, err := url.Parse(rs)
			if err != nil || u.Port() == "" {
				t.Errorf("%s: route %q is not a nats-route://host:port URL", svc, rs)
				continue
			}
			n.routes = append(n.routes, u.Host)
		}
		nodes[svc] = n
	}
	return nodes
}

func composeInt(v any, def int) int {
	switch v := v.(type) {
	case int64:
		return int(v)
	case int:
		return v
	case string:
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return def
}

// composeDirective is one Caddyfile directive with its block.
type composeDirective struct {
	name  string
	args  []string
	block []composeDirective
	line  int
}

// composeParseCaddyfile reads the Caddyfile's structure: directives, their
// arguments and nested blocks (enough for this test: no snippets, no
// imports, no heredocs).
func composeParseCaddyfile(t *testing.T, file string) []composeDirective {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type frame struct{ list *[]composeDirective }
	var top []composeDirective
	stack := []frame{{&top}}
	sc := bufio.NewScanner(f)
	comment := regexp.MustCompile(`(^|\s)#.*$`)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(comment.ReplaceAllString(sc.Text(), ""))
		if line == "" {
			continue
		}
		if line == "}" {
			if len(stack) == 1 {
				t.Fatalf("%s:%d: unbalanced }", file, n)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		fields := strings.Fields(line)
		opens := fields[len(fields)-1] == "{"
		if opens {
			fields = fields[:len(fields)-1]
		}
		d := composeDirective{line: n}
		if len(fields) > 0 {
			d.name, d.args = fields[0], fields[1:]
		}
		for i, a := range d.args {
			d.args[i] = strings.Trim(a, `"`)
		}
		cur := stack[len(stack)-1].list
		*cur = append(*cur, d)
		if opens {
			stack = append(stack, frame{&(*cur)[len(*cur)-1].block})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(stack) != 1 {
		t.Fatalf("%s: unclosed block", file)
	}
	return top
}

// composeCheckCaddy checks the balancer: every replica an upstream of the
// site on :8080, no stickiness, no buffering, readiness checks.
func composeCheckCaddy(t *testing.T, file string, replicas []string) {
	t.Helper()
	top := composeParseCaddyfile(t, file)
	var site *composeDirective
	for i, d := range top {
		if d.name == "" { // the global options block
			continue
		}
		for _, addr := range append([]string{d.name}, d.args...) {
			if strings.HasSuffix(strings.TrimSuffix(addr, ","), ":8080") {
				site = &top[i]
			}
		}
	}
	if site == nil {
		t.Fatalf("%s: no site on :8080", file)
	}
	var proxies []composeDirective
	var walk func([]composeDirective)
	walk = func(ds []composeDirective) {
		for _, d := range ds {
			if d.name == "reverse_proxy" {
				proxies = append(proxies, d)
				continue
			}
			walk(d.block)
		}
	}
	walk(site.block)
	if len(proxies) != 1 {
		t.Fatalf("%s: %d reverse_proxy directives on :8080, want 1", file, len(proxies))
	}
	rp := proxies[0]
	upstreams := map[string]bool{}
	for _, a := range rp.args {
		if !strings.HasPrefix(a, "/") && !strings.HasPrefix(a, "@") && a != "*" {
			upstreams[strings.TrimPrefix(a, "http://")] = true
		}
	}
	sub := map[string][]string{}
	for _, d := range rp.block {
		if d.name == "to" {
			for _, a := range d.args {
				upstreams[strings.TrimPrefix(a, "http://")] = true
			}
		}
		sub[d.name] = d.args
	}
	for _, r := range replicas {
		if !upstreams[r] {
			t.Errorf("%s: replica %s is not an upstream (upstreams %v)", file, r, upstreams)
		}
	}
	if len(upstreams) != len(replicas) {
		t.Errorf("%s: upstreams %v, want exactly the replicas %v", file, upstreams, replicas)
	}
	if pol, ok := sub["lb_policy"]; ok {
		if len(pol) == 0 || !slices.Contains([]string{"random", "round_robin", "least_conn", "random_choose", "weighted_round_robin"}, pol[0]) {
			t.Errorf("%s: lb_policy %v: want a policy without stickiness (round_robin, random, least_conn)", file, pol)
		}
	}
	for _, sticky := range []string{"ip_hash", "client_ip_hash", "uri_hash", "cookie", "sticky"} {
		if strings.Contains(composeStrip(t, file), sticky) {
			t.Errorf("%s mentions %s: no sticky sessions", file, sticky)
		}
	}
	if fi := sub["flush_interval"]; len(fi) != 1 || fi[0] != "-1" {
		t.Errorf("%s: flush_interval %v, want -1 (no response buffering for SSE)", file, fi)
	}
	if _, ok := sub["response_buffers"]; ok {
		t.Errorf("%s: response_buffers set: SSE must not be buffered", file)
	}
	if hu := sub["health_uri"]; len(hu) != 1 || hu[0] != "/readyz" {
		t.Errorf("%s: health_uri %v, want /readyz (a replica without JetStream gets no requests)", file, hu)
	}
	for _, d := range rp.block {
		if d.name != "transport" {
			continue
		}
		for _, o := range d.block {
			if o.name == "read_timeout" && len(o.args) == 1 {
				if v, err := time.ParseDuration(o.args[0]); err != nil || v < time.Hour {
					t.Errorf("%s:%d: read_timeout %s: streams are quiet between events for up to the keep-alive interval and last long", file, o.line, o.args[0])
				}
			}
		}
	}
}

// composeStrip returns a file's text without comments.
func composeStrip(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	comment := regexp.MustCompile(`(?m)(^|\s)#.*$`)
	return comment.ReplaceAllString(string(b), "")
}

// composeCheckDockerfile checks the image the compose file builds: a Go
// builder, static binaries, a non-root final stage with every binary the
// compose file runs.
func composeCheckDockerfile(t *testing.T, file string, p *types.Project, top composeTopology) {
	t.Helper()
	text := composeStrip(t, file)
	text = strings.ReplaceAll(text, "\\\n", " ") // continuation lines
	type stage struct {
		from  string
		lines []string
	}
	var stages []stage
	for line := range strings.SplitSeq(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if strings.EqualFold(fields[0], "FROM") {
			st := stage{}
			for _, f := range fields[1:] {
				if !strings.HasPrefix(f, "--") {
					st.from = f
					break
				}
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, strings.Join(fields, " "))
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%s: %d stages, want a multi-stage build", file, len(stages))
	}
	if !strings.HasPrefix(stages[0].from, "golang:1.26") {
		t.Errorf("%s: builder FROM %s, want golang:1.26", file, stages[0].from)
	}
	build := strings.Join(stages[0].lines, "\n")
	if !regexp.MustCompile(`(?m)^(ENV|ARG|RUN).*\bCGO_ENABLED=0\b`).MatchString(build) {
		t.Errorf("%s: the builder does not set CGO_ENABLED=0 (static binaries)", file)
	}
	if !regexp.MustCompile(`(?m)^(ENV|ARG|RUN).*\bGOWORK=off\b`).MatchString(build) {
		t.Errorf("%s: the builder does not set GOWORK=off (go.work would bring in the tests' module and its dependencies)", file)
	}
	for _, pkg := range []string{"./cmd/reprise", "./cmd/mockllm"} {
		if !strings.Contains(build, pkg) {
			t.Errorf("%s: the builder does not build %s", file, pkg)
		}
	}
	// The release stamp: the VERSION and REVISION build arguments go into
	// the binary (cmd/reprise/version.go's variables) and the OCI labels.
	for _, want := range []string{`-X main.version=${VERSION}`, `-X main.revision=${REVISION}`} {
		if !strings.Contains(build, want) {
			t.Errorf("%s: the builder's go build does not stamp %s", file, want)
		}
	}
	final := stages[len(stages)-1]
	labels := strings.Join(final.lines, "\n")
	for _, want := range []string{`org.opencontainers.image.version="${VERSION}"`, `org.opencontainers.image.revision="${REVISION}"`, `org.opencontainers.image.source=`} {
		if !strings.Contains(labels, want) {
			t.Errorf("%s: the final stage has no label %s", file, want)
		}
	}
	if !strings.HasPrefix(final.from, "gcr.io/distroless/") && final.from != "scratch" {
		t.Errorf("%s: final stage FROM %s, want distroless or scratch", file, final.from)
	}
	var user, copied string
	exposed := false
	for _, l := range final.lines {
		f := strings.Fields(l)
		switch strings.ToUpper(f[0]) {
		case "USER":
			if len(f) > 1 {
				user = f[1]
			}
		case "COPY":
			copied += " " + l
		case "EXPOSE":
			exposed = exposed || slices.Contains(f[1:], "8080") || slices.Contains(f[1:], "8080/tcp")
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("%s: final stage USER %q, want a non-root user", file, user)
	}
	if !exposed {
		t.Errorf("%s: final stage does not EXPOSE 8080", file)
	}
	// Every binary the compose file runs from this image is in it.
	for _, svc := range append([]string{top.upstream}, top.reprise...) {
		s := p.Services[svc]
		var bins []string
		if len(s.Entrypoint) > 0 {
			bins = append(bins, s.Entrypoint[0])
		}
		if s.HealthCheck != nil && len(s.HealthCheck.Test) > 1 && s.HealthCheck.Test[0] == "CMD" {
			bins = append(bins, s.HealthCheck.Test[1])
		}
		for _, bin := range bins {
			if !strings.Contains(copied, filepath.Base(bin)) {
				t.Errorf("%s: %s runs %s, which the final stage does not copy", file, svc, bin)
			}
		}
	}
}

// moduleVersion is the version go.mod requires of module path (a test
// binary's build info lists no dependencies: go list tells).
func moduleVersion(tb testing.TB, path string) string {
	tb.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", path).Output()
	if err != nil {
		tb.Fatalf("go list -m %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}
