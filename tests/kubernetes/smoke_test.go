package kubernetes_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/reprise-dev/reprise/journal"
)

// smoke runs the reprise binary bin as the Deployment's container would
// (see TestKubernetesReprise) and returns what went wrong.
func smoke(tb testing.TB, s *source, bin string) error {
	tb.Helper()
	var p problems
	c, ok := s.reprise(facts(tb), &p)
	if !ok || len(p) > 0 {
		return errors.Join(p...)
	}

	// The files the volumes project, under root; paths in the args and the
	// environment are rewritten to them.
	root := tb.TempDir()
	local := func(v string) string {
		for _, m := range c.VolumeMounts {
			if v == m.MountPath || strings.HasPrefix(v, strings.TrimSuffix(m.MountPath, "/")+"/") {
				return filepath.Join(root, v)
			}
		}
		return v
	}
	for _, m := range c.VolumeMounts {
		files, err := s.projected(c, m)
		if err != nil {
			return err
		}
		for rel, content := range files {
			f := filepath.Join(root, m.MountPath, rel)
			if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
				return err
			}
		}
	}
	var args []string
	for _, a := range c.Args {
		if name, v, ok := strings.Cut(a, "="); ok {
			args = append(args, name+"="+local(v))
		} else {
			args = append(args, local(a))
		}
	}
	// The working directory, HOME and TMPDIR must stay empty: the root
	// file system is read-only.
	work, home, tmp := tb.TempDir(), tb.TempDir(), tb.TempDir()
	env := []string{"HOME=" + home, "TMPDIR=" + tmp}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REPRISE_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	for _, e := range c.Env {
		v := e.Value
		if r := e.ValueFrom; r != nil {
			var kind, name, key string
			switch {
			case r.SecretKeyRef != nil:
				kind, name, key = "Secret", r.SecretKeyRef.Name, r.SecretKeyRef.Key
			case r.ConfigMapKeyRef != nil:
				kind, name, key = "ConfigMap", r.ConfigMapKeyRef.Name, r.ConfigMapKeyRef.Key
			default:
				return fmt.Errorf("env %s: this test resolves Secret and ConfigMap keys only", e.Name)
			}
			data, _ := s.data(kind, name)
			v = data[key]
		}
		env = append(env, e.Name+"="+local(v))
	}

	// The NATS cluster's stand-in: one node, so one replica.
	js, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: tb.TempDir(), Port: -1})
	if err != nil {
		return err
	}
	defer js.Shutdown()
	args = append(args, "--nats="+js.Server.ClientURL(), "--replicas=1", "--listen=127.0.0.1:0")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir, cmd.Env = work, env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		lines []string
		ready = make(chan logLine, 1)
		eof   = make(chan struct{})
	)
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
			if l, ok := parseLogLine(sc.Text()); ok && strings.HasPrefix(l.Msg, "reprise is ready: ") {
				ready <- l
			}
		}
	}()
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(lines, "\n")
	}
	var waitErr error
	exited := make(chan struct{})
	go func() {
		<-eof
		waitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		cancel() // kills it if it still runs
		<-exited
	}()

	var up logLine
	select {
	case up = <-ready:
	case <-exited:
		return fmt.Errorf("reprise exited before it was ready (%w):\n%s", waitErr, output())
	case <-time.After(time.Minute):
		return fmt.Errorf("reprise was not ready within a minute:\n%s", output())
	}
	ups, _ := s.file(c, c.flags["upstreams"])
	if want := countRoutes(ups); len(up.Routes) != want {
		return fmt.Errorf("reprise started with %d routes, the upstreams file has %d:\n%s", len(up.Routes), want, output())
	}

	// The probes' and the metrics' paths answer.
	base := up.URL
	paths := []string{s.deployment().Spec.Template.Annotations["prometheus.io/path"]}
	for _, pr := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if pr != nil && pr.HTTPGet != nil {
			paths = append(paths, pr.HTTPGet.Path)
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, path := range paths {
		resp, err := client.Get(base + path)
		if err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("GET %s: %w", path, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s\n%s", path, resp.Status, body)
		}
		if path == metricsPath && !strings.Contains(string(body), "reprise_") {
			return fmt.Errorf("GET %s: no reprise_ series:\n%s", path, body)
		}
	}

	// SIGTERM, as Kubernetes sends after the preStop hook.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	tgps := 30 * time.Second
	if c.pod.TerminationGracePeriodSeconds != nil {
		tgps = time.Duration(*c.pod.TerminationGracePeriodSeconds) * time.Second
	}
	select {
	case <-exited:
	case <-time.After(tgps):
		return fmt.Errorf("reprise did not stop within terminationGracePeriodSeconds (%s) of SIGTERM:\n%s", tgps, output())
	}
	if waitErr != nil {
		return fmt.Errorf("reprise stopped with %w:\n%s", waitErr, output())
	}
	for _, line := range strings.Split(output(), "\n") {
		if l, ok := parseLogLine(line); ok && (l.Level == "WARN" || l.Level == "ERROR") {
			return fmt.Errorf("reprise logged %s", line)
		}
	}
	for _, dir := range []string{work, home, tmp} {
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			return fmt.Errorf("reprise wrote %s: a read-only root file system refuses it", filepath.Join(dir, entries[0].Name()))
		}
	}
	return nil
}

// projected returns the files volume mount m shows, by path below it.
func (s *source) projected(c container, m corev1.VolumeMount) (map[string]string, error) {
	for _, v := range c.pod.Volumes {
		if v.Name != m.Name {
			continue
		}
		var kind, name string
		var items []corev1.KeyToPath
		switch {
		case v.ConfigMap != nil:
			kind, name, items = "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items
		case v.Secret != nil:
			kind, name, items = "Secret", v.Secret.SecretName, v.Secret.Items
		default:
			return nil, fmt.Errorf("volume %s: this test projects ConfigMaps and Secrets only", v.Name)
		}
		data, _ := s.data(kind, name)
		out := map[string]string{}
		if len(items) == 0 {
			return data, nil
		}
		for _, it := range items {
			out[it.Path] = data[it.Key]
		}
		return out, nil
	}
	return nil, fmt.Errorf("volume mount %s: no such volume", m.Name)
}

// countRoutes counts the upstreams of an upstreams file.
func countRoutes(content string) int {
	n := 0
	for line := range strings.Lines(content) {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) != "" {
			n++
		}
	}
	return n
}

// logLine is one line of reprise's JSON log.
type logLine struct {
	Level  string   `json:"level"`
	Msg    string   `json:"msg"`
	URL    string   `json:"url"`    // the ready line's base URL
	Routes []string `json:"routes"` // each "name url"
}

func parseLogLine(line string) (logLine, bool) {
	var l logLine
	err := json.Unmarshal([]byte(line), &l)
	return l, err == nil
}
