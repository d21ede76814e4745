// Package kubernetes_test checks deploy/kubernetes (the directory
// manifests) without a cluster: every
// manifest decodes strictly into the Kubernetes API types, what one names
// exists (ports, probes, Secrets, ConfigMaps and their keys, the files and
// flags reprise is given), the kustomization lists the directory, the NATS
// chart values use keys the chart has, and the reprise binary starts from
// the Deployment as its container would and answers its probes.
package kubernetes_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// manifests is the directory checked: the Kubernetes manifests, their
// inputs and the NATS chart's values (testdata).
const manifests = "../../deploy/kubernetes"

// TestKubernetesManifests checks the manifests as they are in the
// repository.
func TestKubernetesManifests(t *testing.T) {
	t.Parallel()
	for _, err := range check(manifests, facts(t)) {
		t.Error(err)
	}
	if b, err := os.ReadFile("../../docs/scaling.md"); err != nil || !strings.Contains(string(b), "(../deploy/kubernetes/README.md)") {
		t.Errorf("docs/scaling.md should link to deploy/kubernetes/README.md (%v)", err)
	}
}

// TestKubernetesBrokenManifests breaks the manifests one way at a time, in
// a copy, and wants check to say so: a check that passes whatever the
// manifests say checks nothing.
func TestKubernetesBrokenManifests(t *testing.T) {
	t.Parallel()
	f := facts(t)
	for _, tc := range []struct {
		name, file, old, new, want string
	}{
		{"unknown field", "deployment.yaml", "imagePullPolicy:", "imagePullPolicyy:", `unknown field "imagePullPolicyy"`},
		{"service targetPort", "service.yaml", "targetPort: http", "targetPort: web", `targetPort "web"`},
		{"second document", "service.yaml", "      appProtocol: http\n", "      appProtocol: http\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: extra\nspec:\n  selector:\n    app.kubernetes.io/name: reprise\n  ports:\n    - port: 80\n      targetPort: 81\n", "targetPort 81"},
		{"readiness path", "deployment.yaml", "path: /readyz", "path: /ready", "readinessProbe path"},
		{"probe port", "deployment.yaml", "              path: /healthz\n              port: http\n            periodSeconds: 10", "              path: /healthz\n              port: 8081\n            periodSeconds: 10", "livenessProbe port 8081"},
		{"secret key", "deployment.yaml", "key: OPENAI_API_KEY", "key: OPENAI_KEY", `no key "OPENAI_KEY"`},
		{"configmap name", "deployment.yaml", "name: reprise-config", "name: reprise-conf", `ConfigMap "reprise-conf"`},
		{"volume item", "deployment.yaml", "- key: proxy-keys.txt", "- key: proxy-keys", `no key "proxy-keys"`},
		{"grace", "deployment.yaml", "--grace=30s", "--grace=60s", "terminationGracePeriodSeconds"},
		{"unknown flag", "deployment.yaml", "--journal-timeout=30s", "--journal-timout=30s", "--journal-timout is not a reprise flag"},
		{"unknown variable", "deployment.yaml", "- name: REPRISE_SECRET", "- name: REPRISE_SECRETS", "REPRISE_SECRETS names no reprise flag"},
		{"service links", "deployment.yaml", "enableServiceLinks: false", "enableServiceLinks: true", "enableServiceLinks"},
		{"read-only root", "deployment.yaml", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false", "readOnlyRootFilesystem"},
		{"metrics port", "deployment.yaml", `prometheus.io/port: "8080"`, `prometheus.io/port: "9090"`, "prometheus.io/port"},
		{"file flag", "deployment.yaml", "--prices=/etc/reprise/config/prices.json", "--prices=/etc/reprise/prices.json", "--prices /etc/reprise/prices.json"},
		{"pdb selector", "pdb.yaml", "      app.kubernetes.io/component: proxy", "      app.kubernetes.io/component: web", "PodDisruptionBudget reprise"},
		{"unlisted file", "kustomization.yaml", "  - pdb.yaml\n", "", "pdb.yaml is in deploy/kubernetes"},
		{"key_env", "upstreams", "key_env=OPENAI_API_KEY", "key_env=OPENAI_KEY", "OPENAI_KEY"},
		{"example value", "secrets.env.example", "OPENAI_API_KEY=\n", "OPENAI_API_KEY=sk-live\n", "keep it empty"},
		{"prices", "prices.json", `"gpt-4o*": {"input_per_1m"`, `"gpt-4o*": {"input_price"`, "invalid price table"},
		{"nats replicas", "nats-values.yaml", "replicas: 3", "replicas: 1", "config.cluster.replicas"},
		{"nats key", "nats-values.yaml", "maxSize: 16Gi", "maxsize: 16Gi", "config.jetstream.fileStore.maxsize is not a key"},
		{"nats storage", "nats-values.yaml", "    fileStore:\n      enabled: true", "    fileStore:\n      enabled: false", "file storage"},
		{"nats service", "nats-values.yaml", "fullnameOverride: nats", "fullnameOverride: nats-js", "nats-js"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := mutate(t, tc.file, tc.old, tc.new)
			errs := check(dir, f)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					t.Logf("caught: %v", err)
					return
				}
			}
			t.Errorf("%s: %q → %q: want a problem containing %q, got %v", tc.file, tc.old, tc.new, tc.want, errs)
		})
	}
}

// TestKubernetesReprise runs the reprise binary as the Deployment's
// container would: its args and environment, its Secret's and ConfigMap's
// files where its volumes mount them, an empty working directory. Only the
// NATS cluster is an embedded JetStream instead (--nats, --replicas 1 and a
// free --listen appended). It must start (so reprise's own loaders accept
// the upstreams, prices and proxy keys files), answer the probes and the
// metrics path, warn of no variable, write nothing, and stop on SIGTERM
// within terminationGracePeriodSeconds.
func TestKubernetesReprise(t *testing.T) {
	t.Parallel()
	s, errs := load(manifests)
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	if err := smoke(t, s, facts(t).bin); err != nil {
		t.Fatal(err)
	}
	t.Run("broken upstreams file", func(t *testing.T) {
		t.Parallel()
		s, errs := load(mutate(t, "upstreams", "https://api.openai.com", "api.openai.com"))
		if len(errs) > 0 {
			t.Fatal(errors.Join(errs...))
		}
		err := smoke(t, s, facts(t).bin)
		if err == nil || !strings.Contains(err.Error(), "want http(s)://host") {
			t.Fatalf("an upstream without a scheme: got %v, want reprise to refuse the file", err)
		}
		t.Logf("caught: %v", err)
	})
}

// TestKubernetesKustomizeBuild builds the kustomization with kubectl, when
// it is installed (no cluster needed), and checks what it renders: strict
// types, the references to the generated (hashed) names, the namespace and
// the image.
func TestKubernetesKustomizeBuild(t *testing.T) {
	t.Parallel()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed")
	}
	s, errs := load(manifests)
	if len(errs) > 0 {
		t.Fatal(errors.Join(errs...))
	}
	dir := t.TempDir()
	copyDir(t, manifests, dir)
	for name, content := range s.inputs { // the Secret's inputs, filled in
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w\n%s", err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize: %v", err)
	}
	objs, err := decodeAll("kubectl kustomize", out)
	if err != nil {
		t.Fatal(err)
	}
	b := bundle(objs)
	var p problems
	checkReferences(b, &p)
	checkSelectors(b, &p)
	for _, o := range b {
		if m := meta(o); m.GetNamespace() != s.kust.Namespace {
			p.add("%s %s: namespace %q, want the kustomization's %q", kind(o), m.GetName(), m.GetNamespace(), s.kust.Namespace)
		}
	}
	// Each generator's object, named with its content's hash, which the
	// references above followed.
	for k, gens := range map[string][]generator{"ConfigMap": s.kust.ConfigMapGenerator, "Secret": s.kust.SecretGenerator} {
		for _, g := range gens {
			var names []string
			for _, o := range b {
				if name := meta(o).GetName(); kind(o) == k && strings.HasPrefix(name, g.Name+"-") {
					names = append(names, name)
				}
			}
			if len(names) != 1 {
				p.add("generator %s: rendered %s %v, want one named %s-<hash>", g.Name, k, names, g.Name)
			}
		}
	}
	d := b.deployment()
	switch {
	case d == nil:
		p.add("rendered no Deployment")
	case len(s.kust.Images) != 1:
		p.add("kustomization.yaml: %d images, want reprise's", len(s.kust.Images))
	default:
		img := s.kust.Images[0]
		if got, want := d.Spec.Template.Spec.Containers[0].Image, img.NewName+":"+img.NewTag; got != want {
			p.add("rendered image %q, want %q", got, want)
		}
	}
	for _, err := range p {
		t.Error(err)
	}
}

// problems collects what check finds.
type problems []error

func (p *problems) add(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// check runs every check that needs no process on the directory dir.
func check(dir string, f *toolFacts) problems {
	s, p := load(dir)
	if len(p) > 0 {
		return p
	}
	if s.deployment() == nil {
		return append(p, errors.New("no Deployment: nothing more to check"))
	}
	checkListing(s, &p)
	checkReferences(s.bundle, &p)
	checkSelectors(s.bundle, &p)
	c, ok := s.reprise(f, &p)
	if !ok {
		return p
	}
	checkDeployment(s, c, f, &p)
	checkFiles(s, c, &p)
	checkNATS(s, c, f, &p)
	checkReadme(s, &p)
	return p
}

// kustomization is what this directory's kustomization.yaml may say; it is
// decoded strictly, so a field this test does not know fails it (teach it
// the field).
type kustomization struct {
	APIVersion         string      `json:"apiVersion"`
	Kind               string      `json:"kind"`
	Namespace          string      `json:"namespace"`
	Resources          []string    `json:"resources"`
	ConfigMapGenerator []generator `json:"configMapGenerator"`
	SecretGenerator    []generator `json:"secretGenerator"`
	Images             []image     `json:"images"`
}

type image struct {
	Name    string `json:"name"`
	NewName string `json:"newName"`
	NewTag  string `json:"newTag"`
}

type generator struct {
	Name  string   `json:"name"`
	Files []string `json:"files"`
	Envs  []string `json:"envs"`
}

// source is the directory as kubectl apply -k would read it.
type source struct {
	dir  string
	kust kustomization
	bundle
	// inputs are the generators' inputs read from their .example files,
	// filled in as the README says (name → content).
	inputs map[string]string
	// chartFile is the pinned values.yaml of the NATS chart.
	chartFile string
}

// load reads dir's kustomization, decodes its resources and makes the
// generators' ConfigMaps and Secrets (named without kustomize's hash
// suffix, as the resources reference them).
func load(dir string) (*source, problems) {
	var p problems
	s := &source{dir: dir, inputs: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		p.add("%w", err)
		return s, p
	}
	if err := yaml.UnmarshalStrict(b, &s.kust); err != nil {
		p.add("kustomization.yaml: %w", err)
		return s, p
	}
	if s.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || s.kust.Kind != "Kustomization" {
		p.add("kustomization.yaml: %s %s, want kustomize.config.k8s.io/v1beta1 Kustomization", s.kust.APIVersion, s.kust.Kind)
	}
	for _, r := range s.kust.Resources {
		b, err := os.ReadFile(filepath.Join(dir, r))
		if err != nil {
			p.add("kustomization.yaml resources: %w", err)
			continue
		}
		objs, err := decodeAll(r, b)
		if err != nil {
			p.add("%w", err)
		}
		s.bundle = append(s.bundle, objs...)
	}
	for _, g := range s.kust.ConfigMapGenerator {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: g.Name}, Data: map[string]string{}}
		for k, v := range s.generate(g, &p) {
			cm.Data[k] = v
		}
		s.bundle = append(s.bundle, cm)
	}
	for _, g := range s.kust.SecretGenerator {
		sec := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}, ObjectMeta: metav1.ObjectMeta{Name: g.Name}, Data: map[string][]byte{}}
		for k, v := range s.generate(g, &p) {
			sec.Data[k] = []byte(v)
		}
		s.bundle = append(s.bundle, sec)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, "testdata", "nats-chart-*-values.yaml"))
	if len(matches) != 1 {
		p.add("want one testdata/nats-chart-VERSION-values.yaml, found %v", matches)
	} else {
		s.chartFile = matches[0]
	}
	return s, p
}

// generate returns a generator's keys and values. An input with an
// .example beside it (a Secret's, which git ignores) is read from the
// example, which must hold no value, and filled in with test values.
func (s *source) generate(g generator, p *problems) map[string]string {
	out := map[string]string{}
	read := func(name string) string {
		if b, err := os.ReadFile(filepath.Join(s.dir, name+".example")); err == nil {
			return s.fill(name, string(b), p)
		}
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			p.add("generator %s: %w", g.Name, err)
		}
		return string(b)
	}
	for _, f := range g.Files {
		key, name, ok := strings.Cut(f, "=")
		if !ok {
			key, name = path.Base(f), f
		}
		out[key] = read(name)
	}
	for _, f := range g.Envs {
		for line := range strings.Lines(read(f)) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			k, v, _ := strings.Cut(line, "=")
			out[k] = v
		}
	}
	return out
}

// fill returns an example input with values: an env file's empty values,
// or a list file's first line, are made up. A value already in the example
// is a problem: a secret everyone knows.
func (s *source) fill(name, example string, p *problems) string {
	var out strings.Builder
	listed := false
	for line := range strings.Lines(example) {
		t := strings.TrimSpace(line)
		k, v, isVar := strings.Cut(t, "=")
		switch {
		case t == "" || strings.HasPrefix(t, "#"):
		case isVar && v == "":
			line = k + "=test-" + strings.ToLower(k) + "-0123456789abcdef\n"
			listed = true
		default:
			p.add("%s.example: %q has a value; keep it empty (a value there is a secret everyone knows)", name, k)
			listed = true
		}
		out.WriteString(line)
	}
	if !listed {
		out.WriteString("test-" + name + "-0123456789abcdef\n")
	}
	s.inputs[name] = out.String()
	return out.String()
}

// scheme knows the API types the manifests may use.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// decodeAll decodes each YAML document of b strictly into its API type: an
// unknown or duplicate field, a wrong type or an unknown kind fails.
func decodeAll(file string, b []byte) ([]runtime.Object, error) {
	var out []runtime.Object
	for i, doc := range splitDocuments(b) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		obj, err := scheme.New(tm.GroupVersionKind())
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i+1, err)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: document %d (%s): %w", file, i+1, tm.Kind, err)
		}
		out = append(out, obj)
	}
	return out, nil
}

var separator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)

// splitDocuments splits a YAML stream at its --- lines, dropping documents
// that are only comments.
func splitDocuments(b []byte) [][]byte {
	var out [][]byte
	for _, doc := range separator.Split(string(b), -1) {
		for line := range strings.Lines(doc) {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
				out = append(out, []byte(doc))
				break
			}
		}
	}
	return out
}

// bundle is a set of decoded objects.
type bundle []runtime.Object

func (b bundle) deployment() *appsv1.Deployment {
	for _, o := range b {
		if d, ok := o.(*appsv1.Deployment); ok {
			return d
		}
	}
	return nil
}

// data returns the keys of the ConfigMap or Secret name, or false.
func (b bundle) data(kind, name string) (map[string]string, bool) {
	for _, o := range b {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			if kind == "ConfigMap" && o.Name == name {
				out := map[string]string{}
				for k, v := range o.Data {
					out[k] = v
				}
				for k, v := range o.BinaryData {
					out[k] = string(v)
				}
				return out, true
			}
		case *corev1.Secret:
			if kind == "Secret" && o.Name == name {
				out := map[string]string{}
				for k, v := range o.Data {
					out[k] = string(v)
				}
				for k, v := range o.StringData {
					out[k] = v
				}
				return out, true
			}
		}
	}
	return nil, false
}

func meta(o runtime.Object) metav1.Object {
	m, _ := o.(metav1.Object)
	return m
}

func kind(o runtime.Object) string { return o.GetObjectKind().GroupVersionKind().Kind }

// toolFacts are what the checks learn from outside the directory, once.
type toolFacts struct {
	bin         string            // the reprise binary
	flags       map[string]string // reprise's flags from its --help: name → kind of value ("" for none, FILE, duration…)
	natsVersion string            // the nats-server the tests run (go.mod), no v
}

var (
	factsOnce sync.Once
	theFacts  toolFacts
	factsErr  error
	binDir    string
)

// facts builds cmd/reprise once, reads its --help and go.mod's nats-server.
func facts(tb testing.TB) *toolFacts {
	tb.Helper()
	factsOnce.Do(func() {
		if binDir, factsErr = os.MkdirTemp("", "reprise-kubernetes"); factsErr != nil {
			return
		}
		f := &theFacts
		f.bin = filepath.Join(binDir, "reprise")
		if out, err := exec.Command("go", "build", "-o", f.bin, "github.com/reprise-dev/reprise/cmd/reprise").CombinedOutput(); err != nil {
			factsErr = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		help, err := exec.Command(f.bin, "--help").Output()
		if err != nil {
			factsErr = fmt.Errorf("reprise --help: %w", err)
			return
		}
		f.flags = helpFlags(string(help))
		if len(f.flags) < 20 || f.flags["grace"] != "duration" || f.flags["upstreams"] != "FILE" {
			factsErr = fmt.Errorf("reprise --help: found only %v; teach helpFlags its format:\n%s", f.flags, help)
			return
		}
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/nats-io/nats-server/v2").Output()
		if err != nil {
			factsErr = fmt.Errorf("go list -m: %w", err)
			return
		}
		f.natsVersion = strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	})
	if factsErr != nil {
		tb.Fatal(factsErr)
	}
	return &theFacts
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// helpLine is one flag of reprise --help: "  --name kind  usage", or
// "  --name  usage" for a flag that takes no value.
var helpLine = regexp.MustCompile(`^  --([a-z0-9-]+)( [^ ]+)?  `)

func helpFlags(help string) map[string]string {
	out := map[string]string{}
	for line := range strings.Lines(help) {
		if m := helpLine.FindStringSubmatch(line); m != nil {
			out[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return out
}

// mutate copies the directory and replaces old, which must occur once in
// file, by new.
func mutate(tb testing.TB, file, old, new string) string {
	tb.Helper()
	dir := tb.TempDir()
	copyDir(tb, manifests, dir)
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		tb.Fatal(err)
	}
	if n := strings.Count(string(b), old); n != 1 {
		tb.Fatalf("%s holds %q %d times, want once: update the case", file, old, n)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// copyDir copies the files of src and its testdata into dst, leaving out
// the Secret's inputs a developer may have (git ignores them).
func copyDir(tb testing.TB, src, dst string) {
	tb.Helper()
	for _, sub := range []string{".", "testdata"} {
		entries, err := os.ReadDir(filepath.Join(src, sub))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, sub), 0o700); err != nil {
			tb.Fatal(err)
		}
		for _, e := range entries {
			name := filepath.Join(sub, e.Name())
			if _, err := os.Stat(filepath.Join(src, name+".example")); e.IsDir() || err == nil {
				continue
			}
			b, err := os.ReadFile(filepath.Join(src, name))
			if err != nil {
				tb.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
				tb.Fatal(err)
			}
		}
	}
}
