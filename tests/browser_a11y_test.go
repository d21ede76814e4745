package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reprise-dev/reprise/web"
)

// axeVersion is the axe-core that tests/js/package.json pins.
const axeVersion = "4.14.1"

// axeScript is where npm ci --prefix tests/js puts axe-core's browser build.
var axeScript = filepath.Join("js", "node_modules", "axe-core", "axe.min.js")

// needAxe returns the source of axe-core's browser build. Without it the
// test skips, or fails when CI is set.
func needAxe(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(axeScript)
	if err != nil {
		msg := fmt.Sprintf("axe-core is not installed (npm ci --prefix tests/js): %v", err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set")
		}
		t.Skip(msg + "; CI=1 makes this a failure")
	}
	return string(src)
}

// axeViolation is one rule axe-core found broken, with the elements that
// break it.
type axeViolation struct {
	ID      string `json:"id"`
	Impact  string `json:"impact"`
	Help    string `json:"help"`
	HelpURL string `json:"helpUrl"`
	Nodes   []struct {
		Target  string `json:"target"`
		HTML    string `json:"html"`
		Summary string `json:"summary"`
	} `json:"nodes"`
}

// axeFails are the impacts that fail the test; moderate and minor ones are
// logged.
var axeFails = map[string]bool{"serious": true, "critical": true}

// TestA11yDemoPage runs axe-core in Chromium on the demo page, served by
// the real proxy in front of the demo model, in the states a visitor sees:
// idle, a chat stream dropped by the visitor, both panes after their
// streams completed (resumed, replayed, spoken) and a request the upstream
// refused. Every violation of impact serious or critical fails the test,
// with its rule and the elements that break it.
func TestA11yDemoPage(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	axe := needAxe(t)

	e := newEnv(t, withTokenDelay(10*time.Millisecond), withDemoModel())
	web.Mount(e.p)
	p := newDemoPage(t, chromium, e.URL)
	defer func() { _ = p.run(5*time.Second, chromedp.Navigate("about:blank")) }()

	p.open(t)
	p.checkA11y(t, axe, "idle")

	p.typePrompt(t, uniquePrompt(t, "[tokens=200]"))
	p.click(t, "generate")
	p.waitJS(t, `+document.getElementById('count').textContent >= 5`, 10*time.Second)
	p.click(t, "drop")
	p.expectText(t, "conn", "dropped")
	p.checkA11y(t, axe, "dropped mid-stream")

	p.click(t, "resume")
	p.waitText(t, "conn", "done", 20*time.Second)
	p.click(t, "replay")
	p.waitText(t, "conn", "done", 10*time.Second)
	p.expectText(t, "replayed", "true")
	p.click(t, "sp-speak") // the page's own text, the demo model's speech
	p.waitJS(t, `document.getElementById('sp-verdict').dataset.ok === 'true'`, 20*time.Second)
	p.waitJS(t, `document.getElementById('saved').textContent.includes('1 replay') && `+
		`document.getElementById('tokens-billed').textContent !== ''`, 5*time.Second)
	p.checkA11y(t, axe, "after the streams")

	p.typePrompt(t, uniquePrompt(t, "[status=400]"))
	p.click(t, "generate")
	p.waitText(t, "conn", "error", 10*time.Second)
	p.checkA11y(t, axe, "upstream error")

	if t.Failed() {
		p.DumpConsole(t)
	}
}

// checkA11y runs axe-core (source axe) on the page as it is, in its light
// and its dark colours, and fails the test for every violation of impact
// serious or critical, naming state.
func (p *demoPage) checkA11y(t *testing.T, axe, state string) {
	t.Helper()
	if !evaluate[bool](t, p, `typeof window.axe === 'object'`) {
		// ~0.5 MB of script to parse: beside a CPU burner on 2 cores it
		// took over evaluate's 5 s once. Bounded as axe.run is.
		ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
		defer cancel()
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](axe+"\n;0")); err != nil {
			p.fail(t, "inject axe-core %s: %v", axeVersion, err)
		}
	}
	if v := evaluate[string](t, p, `window.axe.version`); v != axeVersion {
		t.Fatalf("axe-core %s in the page, want %s (npm ci --prefix tests/js)", v, axeVersion)
	}
	for _, scheme := range []string{"light", "dark"} {
		p.colorScheme(t, scheme)
		p.runAxe(t, state+", "+scheme)
	}
	p.colorScheme(t, "")
}

// colorScheme makes the page see prefers-color-scheme: scheme, as a browser
// set to it would; "" ends the emulation.
func (p *demoPage) colorScheme(t *testing.T, scheme string) {
	t.Helper()
	features := []map[string]string{}
	if scheme != "" {
		features = append(features, map[string]string{"name": "prefers-color-scheme", "value": scheme})
	}
	if err := p.run(5*time.Second, chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
		return tab.Call(ctx, "Emulation.setEmulatedMedia", map[string]any{"features": features}, nil)
	})); err != nil {
		t.Fatalf("emulate prefers-color-scheme: %q: %v", scheme, err)
	}
	if scheme != "" && !evaluate[bool](t, p, fmt.Sprintf(`matchMedia('(prefers-color-scheme: %s)').matches`, scheme)) {
		t.Fatalf("the page does not see prefers-color-scheme: %s", scheme)
	}
}

// runAxe runs axe-core on the page and fails the test for every violation
// of impact serious or critical, naming state.
func (p *demoPage) runAxe(t *testing.T, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 30*time.Second)
	defer cancel()
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](`axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations.map((v) => ({
		id: v.id, impact: v.impact || '', help: v.help, helpUrl: v.helpUrl,
		nodes: v.nodes.map((n) => ({target: n.target.map(String).join(' '), html: n.html, summary: n.failureSummary || ''})),
	})))`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("%s: axe.run: %v", state, err)
	}
	failed := 0
	for _, v := range violations {
		var b strings.Builder
		fmt.Fprintf(&b, "%s: axe %s (%s): %s <%s>", state, v.ID, v.Impact, v.Help, v.HelpURL)
		for _, n := range v.Nodes {
			fmt.Fprintf(&b, "\n\t%s  %s\n\t\t%s", n.Target, n.HTML, strings.ReplaceAll(n.Summary, "\n", "\n\t\t"))
		}
		if axeFails[v.Impact] {
			failed++
			t.Error(b.String())
		} else {
			t.Log(b.String())
		}
	}
	t.Logf("%s: axe-core %s: %d violations, %d serious or critical", state, axeVersion, len(violations), failed)
}
