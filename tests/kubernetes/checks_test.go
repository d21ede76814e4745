package kubernetes_test

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/reprise-dev/reprise/internal/cost"
)

// The routes reprise serves for each probe (stream/server.go): /healthz
// once it serves HTTP, /readyz while JetStream is usable; and the metrics
// (internal/proxy).
var (
	probePaths = map[string][]string{
		"readinessProbe": {"/readyz"},
		"livenessProbe":  {"/healthz"},
		"startupProbe":   {"/healthz", "/readyz"},
	}
	metricsPath = "/metrics"
)

// readyzWait is how long /readyz waits for JetStream before it answers 503:
// a readiness probe's timeout must be longer.
const readyzWait = 2 * time.Second

// container is the Deployment's reprise container and its flags.
type container struct {
	corev1.Container
	pod   corev1.PodSpec
	flags map[string]string // name → value, as the args set them
}

// reprise returns the Deployment's only container and parses its args
// against reprise's flags.
func (s *source) reprise(f *toolFacts, p *problems) (container, bool) {
	d := s.deployment()
	if len(d.Spec.Template.Spec.Containers) != 1 {
		p.add("Deployment %s: %d containers, want one, reprise", d.Name, len(d.Spec.Template.Spec.Containers))
		return container{}, false
	}
	c := container{Container: d.Spec.Template.Spec.Containers[0], pod: d.Spec.Template.Spec, flags: map[string]string{}}
	if len(c.Command) > 0 {
		p.add("container %s: command %v replaces the image's entrypoint, reprise; give args only", c.Name, c.Command)
	}
	for i := 0; i < len(c.Args); i++ {
		a := c.Args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		kind, ok := f.flags[name]
		switch {
		case !strings.HasPrefix(a, "-"):
			p.add("container %s: argument %q is no flag", c.Name, a)
			continue
		case !ok:
			p.add("container %s: --%s is not a reprise flag (reprise --help lists them)", c.Name, name)
			continue
		case !hasValue && kind == "":
			value = "true"
		case !hasValue && i+1 < len(c.Args):
			i++
			value = c.Args[i]
		case !hasValue:
			p.add("container %s: --%s needs a value", c.Name, name)
		}
		if _, dup := c.flags[name]; dup {
			p.add("container %s: --%s is set twice", c.Name, name)
		}
		c.flags[name] = value
	}
	for _, e := range c.Env {
		if v, ok := strings.CutPrefix(e.Name, "REPRISE_"); ok {
			if _, ok := f.flags[strings.ToLower(strings.ReplaceAll(v, "_", "-"))]; !ok {
				p.add("container %s: %s names no reprise flag (it would set nothing)", c.Name, e.Name)
			}
		}
	}
	return c, true
}

// file returns the content of the file at name in c's file system: a key of
// the ConfigMap or Secret a volume mounts there.
func (s *source) file(c container, name string) (string, error) {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(name, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if m.SubPath != "" {
			return "", fmt.Errorf("%s: mounted with subPath, which this test does not follow", name)
		}
		for _, v := range c.pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			var kind, obj string
			var items []corev1.KeyToPath
			switch {
			case v.ConfigMap != nil:
				kind, obj, items = "ConfigMap", v.ConfigMap.Name, v.ConfigMap.Items
			case v.Secret != nil:
				kind, obj, items = "Secret", v.Secret.SecretName, v.Secret.Items
			default:
				return "", fmt.Errorf("%s: volume %s is neither a ConfigMap nor a Secret", name, v.Name)
			}
			key := rel
			if len(items) > 0 {
				key = ""
				for _, it := range items {
					if it.Path == rel {
						key = it.Key
					}
				}
			}
			data, ok := s.data(kind, obj)
			if content, found := data[key]; ok && found && key != "" {
				return content, nil
			}
			return "", fmt.Errorf("%s: %s %q mounted at %s projects no such file", name, kind, obj, m.MountPath)
		}
	}
	return "", fmt.Errorf("%s: no volume mount holds it", name)
}

// checkListing: kustomization.yaml lists exactly the directory's manifests
// and inputs; what git ignores has an .example.
func checkListing(s *source, p *problems) {
	known := map[string]bool{"kustomization.yaml": true, "nats-values.yaml": true, "README.md": true, ".gitignore": true}
	for _, r := range s.kust.Resources {
		if strings.ContainsAny(r, "/:") {
			p.add("kustomization.yaml: resource %q is not a file of this directory (this test reads only those)", r)
		}
		if known[r] {
			p.add("kustomization.yaml: %s is listed twice", r)
		}
		known[r] = true
	}
	ignored, _ := os.ReadFile(filepath.Join(s.dir, ".gitignore"))
	for _, g := range slices.Concat(s.kust.ConfigMapGenerator, s.kust.SecretGenerator) {
		for _, in := range slices.Concat(g.Files, g.Envs) {
			_, name, ok := strings.Cut(in, "=")
			if !ok {
				name = in
			}
			known[name] = true
			if _, ok := s.inputs[name]; ok {
				known[name+".example"] = true
				if !regexp.MustCompile(`(?m)^/?` + regexp.QuoteMeta(name) + `$`).Match(ignored) {
					p.add(".gitignore: %s (made from %s.example, holding secrets) is not ignored", name, name)
				}
			}
		}
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		p.add("%w", err)
		return
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case e.IsDir() && name == "testdata", !e.IsDir() && known[name]:
		default:
			p.add("%s is in deploy/kubernetes but neither in kustomization.yaml (resources, a generator's input) nor the README, the NATS values or testdata", name)
		}
	}
}

// checkReferences: every ConfigMap and Secret a Deployment names (env,
// envFrom, volumes) exists, with the keys it names; every volume mount has
// its volume.
func checkReferences(b bundle, p *problems) {
	for _, o := range b {
		d, ok := o.(*appsv1.Deployment)
		if !ok {
			continue
		}
		spec, where := d.Spec.Template.Spec, "Deployment "+d.Name
		need := func(what, kind, name string, keys []string, optional *bool) {
			if optional != nil && *optional {
				return
			}
			data, ok := b.data(kind, name)
			if !ok {
				p.add("%s: %s references %s %q, which the kustomization does not make", where, what, kind, name)
				return
			}
			for _, k := range keys {
				if _, ok := data[k]; !ok {
					p.add("%s: %s: %s %q has no key %q (it has %v)", where, what, kind, name, k, sortedKeys(data))
				}
			}
		}
		items := func(its []corev1.KeyToPath) []string {
			var out []string
			for _, it := range its {
				out = append(out, it.Key)
			}
			return out
		}
		volumes := map[string]bool{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = true
			what := "volume " + v.Name
			if v.ConfigMap != nil {
				need(what, "ConfigMap", v.ConfigMap.Name, items(v.ConfigMap.Items), v.ConfigMap.Optional)
			}
			if v.Secret != nil {
				need(what, "Secret", v.Secret.SecretName, items(v.Secret.Items), v.Secret.Optional)
			}
			if v.Projected != nil {
				for _, src := range v.Projected.Sources {
					if src.ConfigMap != nil {
						need(what, "ConfigMap", src.ConfigMap.Name, items(src.ConfigMap.Items), src.ConfigMap.Optional)
					}
					if src.Secret != nil {
						need(what, "Secret", src.Secret.Name, items(src.Secret.Items), src.Secret.Optional)
					}
				}
			}
		}
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			for _, e := range c.Env {
				what := "env " + e.Name
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					r := e.ValueFrom.SecretKeyRef
					need(what, "Secret", r.Name, []string{r.Key}, r.Optional)
				}
				if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
					r := e.ValueFrom.ConfigMapKeyRef
					need(what, "ConfigMap", r.Name, []string{r.Key}, r.Optional)
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil {
					need("envFrom", "Secret", e.SecretRef.Name, nil, e.SecretRef.Optional)
				}
				if e.ConfigMapRef != nil {
					need("envFrom", "ConfigMap", e.ConfigMapRef.Name, nil, e.ConfigMapRef.Optional)
				}
			}
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					p.add("%s: container %s mounts volume %q, which the pod does not have", where, c.Name, m.Name)
				}
			}
		}
	}
}

// checkSelectors: the Deployment's, the Services' and the budgets'
// selectors pick its pods; a Service's ports reach container ports; a
// budget lets a drain evict one pod.
func checkSelectors(b bundle, p *problems) {
	d := b.deployment()
	if d == nil {
		return
	}
	pods := labels.Set(d.Spec.Template.Labels)
	if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(pods) {
		p.add("Deployment %s: selector %s does not select its pod template's labels %v", d.Name, metav1.FormatLabelSelector(d.Spec.Selector), pods)
	}
	replicas := 1
	if d.Spec.Replicas != nil {
		replicas = int(*d.Spec.Replicas)
	}
	for _, o := range b {
		switch o := o.(type) {
		case *corev1.Service:
			if len(o.Spec.Selector) == 0 || !labels.SelectorFromSet(o.Spec.Selector).Matches(pods) {
				p.add("Service %s: selector %v selects no pod of Deployment %s (labels %v)", o.Name, o.Spec.Selector, d.Name, pods)
				continue
			}
			for _, sp := range o.Spec.Ports {
				target := sp.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(sp.Port)
				}
				if _, ok := portOf(d.Spec.Template.Spec.Containers, target); !ok {
					p.add("Service %s port %d: targetPort %s is no container port of Deployment %s", o.Name, sp.Port, portString(target), d.Name)
				}
			}
		case *policyv1.PodDisruptionBudget:
			if sel, err := metav1.LabelSelectorAsSelector(o.Spec.Selector); err != nil || sel.Empty() || !sel.Matches(pods) {
				p.add("PodDisruptionBudget %s: selector %s selects no pod of Deployment %s (labels %v)", o.Name, metav1.FormatLabelSelector(o.Spec.Selector), d.Name, pods)
			}
			evictable := 0
			switch {
			case o.Spec.MaxUnavailable != nil:
				evictable, _ = intstr.GetScaledValueFromIntOrPercent(o.Spec.MaxUnavailable, replicas, false)
			case o.Spec.MinAvailable != nil:
				least, _ := intstr.GetScaledValueFromIntOrPercent(o.Spec.MinAvailable, replicas, true)
				evictable = replicas - least
			}
			if evictable < 1 {
				p.add("PodDisruptionBudget %s: lets no pod of %d be evicted: node drains would hang", o.Name, replicas)
			}
		}
	}
}

// checkDeployment: replicas, image, ports, probes, metrics, security,
// resources and shutdown of the reprise Deployment.
func checkDeployment(s *source, c container, f *toolFacts, p *problems) {
	d := s.deployment()
	where := "Deployment " + d.Name
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		p.add("%s: replicas %v, want 2 or more (one serves while another restarts)", where, d.Spec.Replicas)
	}
	if !slices.ContainsFunc(s.kust.Images, func(i image) bool { return i.Name == c.Image && i.NewName != "" }) {
		p.add("%s: image %q is not replaced by kustomization.yaml's images", where, c.Image)
	}
	if c.pod.EnableServiceLinks == nil || *c.pod.EnableServiceLinks {
		p.add("%s: enableServiceLinks must be false: the Service named reprise would set REPRISE_SERVICE_HOST, REPRISE_PORT…, variables that name no flag", where)
	}
	if c.pod.AutomountServiceAccountToken == nil || *c.pod.AutomountServiceAccountToken {
		p.add("%s: automountServiceAccountToken should be false: reprise does not call the Kubernetes API", where)
	}

	// The port reprise listens on is the container port the probes, the
	// metrics annotation and the Service use.
	listen := cmpOr(c.flags["listen"], ":8080")
	_, port, err := net.SplitHostPort(listen)
	lp, _ := strconv.Atoi(port)
	if err != nil {
		p.add("%s: --listen %q: %v", where, listen, err)
	} else if got, ok := portOf([]corev1.Container{c.Container}, intstr.FromInt(lp)); !ok || got != int32(lp) {
		p.add("%s: --listen %s is no container port", where, listen)
	}
	for name, probe := range map[string]*corev1.Probe{"readinessProbe": c.ReadinessProbe, "livenessProbe": c.LivenessProbe, "startupProbe": c.StartupProbe} {
		switch {
		case probe == nil && name == "startupProbe":
			continue
		case probe == nil:
			p.add("%s: no %s", where, name)
			continue
		case probe.HTTPGet == nil:
			p.add("%s: %s is no httpGet", where, name)
			continue
		}
		if !slices.Contains(probePaths[name], probe.HTTPGet.Path) {
			p.add("%s: %s path %q, want one of %v (the routes reprise serves for it)", where, name, probe.HTTPGet.Path, probePaths[name])
		}
		if got, ok := portOf([]corev1.Container{c.Container}, probe.HTTPGet.Port); !ok || int(got) != lp {
			p.add("%s: %s port %s is no container port reprise listens on (--listen %s)", where, name, portString(probe.HTTPGet.Port), listen)
		}
		if name == "readinessProbe" && time.Duration(max(probe.TimeoutSeconds, 1))*time.Second <= readyzWait {
			p.add("%s: readinessProbe timeoutSeconds %d: /readyz may take %s to answer", where, probe.TimeoutSeconds, readyzWait)
		}
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/path"] != metricsPath {
		p.add("%s: pod annotations prometheus.io/scrape %q, prometheus.io/path %q: want \"true\" and %s", where, ann["prometheus.io/scrape"], ann["prometheus.io/path"], metricsPath)
	}
	if mp, err := strconv.Atoi(ann["prometheus.io/port"]); err != nil || mp != lp {
		p.add("%s: pod annotation prometheus.io/port %q: reprise serves %s on --listen %s", where, ann["prometheus.io/port"], metricsPath, listen)
	}

	// Non-root, read-only root file system (with --nats and the secret
	// given, reprise writes nothing), no privileges.
	psc, csc := c.pod.SecurityContext, c.SecurityContext
	if csc == nil {
		csc = &corev1.SecurityContext{}
	}
	if !isTrue(csc.RunAsNonRoot) && (psc == nil || !isTrue(psc.RunAsNonRoot)) {
		p.add("%s: runAsNonRoot is not set", where)
	}
	if !isTrue(csc.ReadOnlyRootFilesystem) {
		p.add("%s: readOnlyRootFilesystem is not true", where)
	}
	if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
		p.add("%s: allowPrivilegeEscalation is not false", where)
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		p.add("%s: capabilities do not drop ALL", where)
	}
	if _, ok := c.flags["data"]; ok || c.flags["nats"] == "" {
		p.add("%s: reprise must use --nats and no --data: the embedded store would write to the read-only file system", where)
	}

	// Resources, and the Go runtime's memory limit below the container's.
	req, lim := c.Resources.Requests, c.Resources.Limits
	if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
		p.add("%s: want cpu and memory requests and a memory limit, got %v", where, c.Resources)
	}
	for _, e := range c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		if n, err := parseQuantity(e.Value); err != nil || n >= lim.Memory().Value() {
			p.add("%s: GOMEMLIMIT %q should be below the memory limit %s", where, e.Value, lim.Memory())
		}
	}

	// Shutdown: the preStop sleep, then --grace for running generations,
	// then --journal-timeout for those cut to be recorded as failed, all
	// before Kubernetes kills the container.
	grace, err1 := durationFlag(c.flags, "grace")
	journal, err2 := durationFlag(c.flags, "journal-timeout")
	for _, err := range []error{err1, err2} {
		if err != nil {
			p.add("%s: %w", where, err)
		}
	}
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	tgps := 30 * time.Second
	if c.pod.TerminationGracePeriodSeconds != nil {
		tgps = time.Duration(*c.pod.TerminationGracePeriodSeconds) * time.Second
	}
	if need := preStop + grace + journal; tgps <= need {
		p.add("%s: terminationGracePeriodSeconds %s is not above preStop %s + --grace %s + --journal-timeout %s: running generations would be killed before they are journaled", where, tgps, preStop, grace, journal)
	}

	// Every file flag names a file a volume mounts.
	for name, v := range c.flags {
		if f.flags[name] == "FILE" {
			if _, err := s.file(c, v); err != nil {
				p.add("%s: --%s %w", where, name, err)
			}
		}
	}
}

// checkFiles: the price table loads with reprise's loader; the upstreams
// file's keys come from the container's environment.
func checkFiles(s *source, c container, p *problems) {
	prices, err := s.file(c, c.flags["prices"])
	if err != nil {
		p.add("--prices: %w", err)
	} else if err := loadPrices(prices); err != nil {
		p.add("--prices: %w", err)
	}
	ups, err := s.file(c, c.flags["upstreams"])
	if err != nil {
		p.add("--upstreams: %w", err)
		return
	}
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	for _, host := range []string{"https://api.openai.com", "https://api.anthropic.com"} {
		if !strings.Contains(ups, host) {
			p.add("upstreams: no line for %s", host)
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^[^#\n]*?key_env=([^\s#]+)`).FindAllStringSubmatch(ups, -1) {
		if !env[m[1]] {
			p.add("upstreams: key_env=%s, but the container sets no %s", m[1], m[1])
		}
	}
}

// checkNATS: the chart values use keys the chart has, make a 3-node cluster
// with JetStream on files, and name the Service and port reprise uses.
func checkNATS(s *source, c container, f *toolFacts, p *problems) {
	var values, chart map[string]any
	for file, into := range map[string]*map[string]any{filepath.Join(s.dir, "nats-values.yaml"): &values, s.chartFile: &chart} {
		b, err := os.ReadFile(file)
		if err == nil {
			err = yaml.UnmarshalStrict(b, into)
		}
		if err != nil {
			p.add("%s: %w", file, err)
			return
		}
	}
	chartKeys(values, chart, "", p)
	merged := mergeValues(chart, values)
	get := func(path string) any {
		var v any = merged
		for k := range strings.SplitSeq(path, ".") {
			m, _ := v.(map[string]any)
			v = m[k]
		}
		return v
	}
	if get("config.cluster.enabled") != true || get("config.cluster.replicas") != 3.0 {
		p.add("nats-values.yaml: config.cluster.enabled %v, config.cluster.replicas %v: want a cluster of 3", get("config.cluster.enabled"), get("config.cluster.replicas"))
	}
	if get("config.jetstream.enabled") != true || get("config.jetstream.fileStore.enabled") != true || get("config.jetstream.fileStore.pvc.enabled") != true {
		p.add("nats-values.yaml: want JetStream with file storage on a PVC (config.jetstream.enabled, .fileStore.enabled, .fileStore.pvc.enabled)")
	}
	size, err := parseQuantity(fmt.Sprint(get("config.jetstream.fileStore.pvc.size")))
	if err != nil {
		p.add("nats-values.yaml: config.jetstream.fileStore.pvc.size: %w", err)
	}
	if ms := get("config.jetstream.fileStore.maxSize"); ms != nil {
		if n, err := parseQuantity(fmt.Sprint(ms)); err != nil || n >= size {
			p.add("nats-values.yaml: config.jetstream.fileStore.maxSize %v should be below the PVC's size %v", ms, get("config.jetstream.fileStore.pvc.size"))
		}
	}
	if r := c.flags["replicas"]; r != fmt.Sprint(get("config.cluster.replicas")) {
		p.add("container %s: --replicas %q, the NATS cluster has %v nodes: the journal should be on all", c.Name, r, get("config.cluster.replicas"))
	}
	service, _ := get("service.name").(string)
	if service == "" {
		service, _ = get("fullnameOverride").(string)
	}
	if service == "" {
		p.add("nats-values.yaml: set fullnameOverride, so the NATS Service's name does not depend on the release's")
	}
	host, port, err := natsURL(c.flags["nats"])
	switch {
	case err != nil:
		p.add("container %s: --nats %w", c.Name, err)
	case host != service || float64(port) != get("config.nats.port"):
		p.add("container %s: --nats %s, but the NATS chart's Service is %s:%v", c.Name, c.flags["nats"], service, get("config.nats.port"))
	}
	if tag := fmt.Sprint(get("container.image.tag")); tag != f.natsVersion && !strings.HasPrefix(tag, f.natsVersion+"-") {
		p.add("nats-values.yaml: container.image.tag %s, want nats-server %s, the version reprise's tests run (go.mod)", tag, f.natsVersion)
	}
	if get("promExporter.enabled") == true {
		ann := get("podTemplate.merge.metadata.annotations")
		if m, _ := ann.(map[string]any); m == nil || m["prometheus.io/port"] != fmt.Sprint(get("promExporter.port")) {
			p.add("nats-values.yaml: the exporter serves on %v; the pods' prometheus.io/port annotation says %v", get("promExporter.port"), ann)
		}
	}
}

// chartKeys reports the keys of values that the chart's values do not
// have. Below a key whose chart value is empty ({}, or unset) anything goes:
// merge, patch, env, resources…
func chartKeys(values, chart map[string]any, at string, p *problems) {
	for _, k := range sortedKeys(values) {
		path := strings.TrimPrefix(at+"."+k, ".")
		cv, ok := chart[k]
		if !ok {
			p.add("nats-values.yaml: %s is not a key of the NATS chart's values (testdata)", path)
			continue
		}
		sub, isMap := values[k].(map[string]any)
		csub, chartMap := cv.(map[string]any)
		switch {
		case cv == nil || chartMap && len(csub) == 0:
		case isMap && chartMap:
			chartKeys(sub, csub, path, p)
		case isMap != chartMap:
			p.add("nats-values.yaml: %s is a %T, the chart's is a %T", path, values[k], cv)
		}
	}
}

// mergeValues is Helm's merge of values over the chart's defaults.
func mergeValues(chart, values map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range chart {
		out[k] = v
	}
	for k, v := range values {
		cm, ok1 := out[k].(map[string]any)
		vm, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = mergeValues(cm, vm)
		} else {
			out[k] = v
		}
	}
	return out
}

// checkReadme: the README's steps install the chart version the values
// were checked against, with those values, then the kustomization.
func checkReadme(s *source, p *problems) {
	b, err := os.ReadFile(filepath.Join(s.dir, "README.md"))
	if err != nil {
		p.add("%w", err)
		return
	}
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(s.chartFile), "nats-chart-"), "-values.yaml")
	for _, want := range []string{"helm install nats nats/nats --version " + version, "-f deploy/kubernetes/nats-values.yaml", "kubectl apply -k deploy/kubernetes"} {
		if !strings.Contains(string(b), want) {
			p.add("README.md: no %q", want)
		}
	}
}

func isTrue(b *bool) bool { return b != nil && *b }

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// portOf resolves a port (a number or a name) to a container port of cs.
func portOf(cs []corev1.Container, port intstr.IntOrString) (int32, bool) {
	for _, c := range cs {
		for _, cp := range c.Ports {
			if port.Type == intstr.String && cp.Name == port.StrVal || port.Type == intstr.Int && cp.ContainerPort == port.IntVal {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

func portString(p intstr.IntOrString) string {
	if p.Type == intstr.String {
		return strconv.Quote(p.StrVal)
	}
	return strconv.Itoa(int(p.IntVal))
}

// parseQuantity parses a Kubernetes quantity, or a Go memory limit
// (GOMEMLIMIT: 900MiB).
func parseQuantity(s string) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSuffix(s, "B"))
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return q.Value(), nil
}

// natsURL returns the host and port of a --nats value naming one server.
func natsURL(v string) (host string, port int, err error) {
	if strings.Contains(v, ",") {
		return "", 0, fmt.Errorf("%q lists servers: name the chart's Service, which leads to a ready one", v)
	}
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "nats" || u.Port() == "" {
		return "", 0, fmt.Errorf("%q: want nats://host:port", v)
	}
	port, err = strconv.Atoi(u.Port())
	return u.Hostname(), port, err
}

// loadPrices loads a price table with reprise's own loader.
func loadPrices(content string) error {
	dir, err := os.MkdirTemp("", "prices")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f := filepath.Join(dir, "prices.json")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		return err
	}
	_, err = cost.Load(f)
	return err
}

// durationFlag parses a duration flag the args must set.
func durationFlag(flags map[string]string, name string) (time.Duration, error) {
	v, ok := flags[name]
	if !ok {
		return 0, fmt.Errorf("--%s is not set: set it explicitly", name)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("--%s %q: %w", name, v, err)
	}
	return d, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
