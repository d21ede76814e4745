package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reprise-dev/reprise/tests/testutil"
	"github.com/reprise-dev/reprise/web"
	"github.com/reprise-dev/reprise/web/mockllm"
	"github.com/reprise-dev/reprise/web/webtest"
)

// TestBrowserDemo drives the real demo page, served by the real proxy on the
// same origin, in headless Chromium: generate, drop and resume, replay and
// auto-resume. Every scenario checks the text the page shows against the
// mock's deterministic content, and the upstream ledger: one generation per
// prompt, whatever the browser did.
func TestBrowserDemo(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	chromium := webtest.FindChromium()
	if chromium == "" {
		t.Skip("no Chromium: /usr/bin/chromium is absent and none of chromium, chromium-browser, google-chrome is in PATH")
	}

	e := newEnv(t, withTokenDelay(15*time.Millisecond))
	web.Mount(e.p)

	// Start stops the browser in a t.Cleanup registered after newEnv's, so
	// the browser stops before the proxy closes.
	p := &demoPage{
		Browser: webtest.Start(t, webtest.Config{
			ExecPath:      chromium,
			TempDirPrefix: "reprise-tests-chromium-",
			StartTimeout:  20 * time.Second,
			Options:       []chromedp.ExecAllocatorOption{chromedp.WindowSize(1280, 900)},
		}),
		base: e.URL,
	}
	// Leave the page before the proxy closes, so that its EventSource and
	// status polls stop first (deferred calls run before t.Cleanup).
	defer func() { _ = p.run(5*time.Second, chromedp.Navigate("about:blank")) }()

	ledgerIs1 := func(t *testing.T, prompt string) {
		t.Helper()
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 || g.Requests != 1 {
			p.fail(t, "upstream ledger for %q: %+v, want exactly 1 request and 1 generation", prompt, g)
		}
	}

	t.Run("generate", func(t *testing.T) {
		start := time.Now()
		prompt := uniquePrompt(t, "[tokens=40]")
		want := strings.Join(mockllm.Content(prompt, 40, false), "")
		p.open(t)
		p.typePrompt(t, prompt)
		p.click(t, "generate")
		p.waitText(t, "conn", "done", 10*time.Second)
		p.expectText(t, "output", want)
		p.expectText(t, "count", "42") // role, 40 tokens, stop
		p.expectText(t, "dupes", "0")
		p.expectText(t, "replayed", "false")
		if key := p.text(t, "key"); len(key) != 36 {
			p.fail(t, "#key = %q, want a UUID", key)
		}
		if msg := p.text(t, "error"); msg != "" {
			p.fail(t, "#error = %q", msg)
		}
		ledgerIs1(t, prompt)
		p.waitText(t, "server-state", "completed", 5*time.Second)
		p.expectText(t, "server-generation", "1")
		t.Logf("generate: %v", time.Since(start).Round(time.Millisecond))
	})

	var resumed bool // the page holds a completed, resumed stream for replay
	var resumedPrompt, resumedWant string

	t.Run("drop and resume", func(t *testing.T) {
		start := time.Now()
		prompt := uniquePrompt(t, "[tokens=60]")
		want := strings.Join(mockllm.Content(prompt, 60, false), "")
		p.open(t)
		p.typePrompt(t, prompt)
		p.click(t, "generate")
		p.waitJS(t, `+document.getElementById('count').textContent >= 5`, 10*time.Second)
		p.click(t, "drop")
		p.expectText(t, "conn", "dropped")
		atDrop := p.text(t, "output")
		lastID := p.text(t, "lastid")
		count, _ := strconv.Atoi(p.text(t, "count"))
		if lastID == "" || count < 5 || count >= 63 || !strings.HasPrefix(want, atDrop) || atDrop == want {
			p.fail(t, "at the drop: count %d, last id %q, output %q: want a strict prefix of %q", count, lastID, atDrop, want)
		}

		// The server keeps generating without a client; the page gets
		// nothing meanwhile.
		testutil.Settled(t, e.LLM.Ledger(), prompt, 1) // the generation finishes after the drop
		if gens := e.LLM.Ledger().Generations(prompt); len(gens) != 1 || !gens[0].Completed || gens[0].Content != want {
			p.fail(t, "upstream generations after the drop: %+v, want one completed with the full content", gens)
		}
		p.expectText(t, "conn", "dropped")
		p.expectText(t, "output", atDrop)

		p.click(t, "resume")
		p.waitText(t, "conn", "done", 10*time.Second)
		p.expectText(t, "output", want)
		p.expectText(t, "count", "62") // role, 60 tokens, stop
		p.expectText(t, "dupes", "0")
		if msg := p.text(t, "error"); msg != "" {
			p.fail(t, "#error = %q", msg)
		}
		ledgerIs1(t, prompt)
		p.waitText(t, "server-state", "completed", 5*time.Second)
		t.Logf("drop and resume: dropped after %d events (last id %s); %v", count, lastID, time.Since(start).Round(time.Millisecond))

		sctx, cancel := context.WithTimeout(p.Ctx, 10*time.Second)
		defer cancel()
		shot, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Logf("screenshot: %v", err)
		} else {
			path := filepath.Join(os.TempDir(), "reprise-demo.png")
			if err := os.WriteFile(path, shot, 0o644); err != nil {
				t.Logf("screenshot: %v", err)
			} else {
				t.Logf("screenshot of the demo page after drop and resume: %s", path)
			}
		}
		resumed, resumedPrompt, resumedWant = true, prompt, want
	})

	t.Run("replay", func(t *testing.T) {
		if !resumed {
			t.Skip("needs the completed stream of drop and resume")
		}
		start := time.Now()
		key := p.text(t, "key")
		p.click(t, "replay")
		p.waitText(t, "conn", "done", 10*time.Second)
		p.expectText(t, "replayed", "true")
		p.expectText(t, "key", key)
		p.expectText(t, "output", resumedWant)
		p.expectText(t, "count", "62") // role, 60 tokens, stop
		p.expectText(t, "dupes", "0")
		ledgerIs1(t, resumedPrompt)
		t.Logf("replay: %v", time.Since(start).Round(time.Millisecond))
	})

	t.Run("auto-resume", func(t *testing.T) {
		// 150 tokens take about 2.3 s upstream, so the auto-resume (1 s
		// after the drop) normally joins the generation while it runs.
		start := time.Now()
		prompt := uniquePrompt(t, "[tokens=150]")
		want := strings.Join(mockllm.Content(prompt, 150, false), "")
		p.open(t)
		p.typePrompt(t, prompt)
		p.click(t, "autoresume")
		if !evaluate[bool](t, p, `document.getElementById('autoresume').checked`) {
			p.fail(t, "#autoresume is not checked after the click")
		}
		p.click(t, "generate")
		p.waitJS(t, `+document.getElementById('count').textContent >= 3`, 10*time.Second)
		p.click(t, "drop")
		p.expectText(t, "conn", "dropped")
		count, _ := strconv.Atoi(p.text(t, "count"))
		if count >= 153 {
			p.fail(t, "the stream had ended (%d events) before the drop", count)
		}
		// No click on Resume: the page resumes by itself with an EventSource.
		p.waitJS(t, `window.reprise.state.conn?.kind === 'eventsource' || document.getElementById('conn').textContent === 'done'`, 5*time.Second)
		live := "after"
		if gens := e.LLM.Ledger().Generations(prompt); len(gens) == 1 && !gens[0].Completed {
			live = "while"
		}
		p.waitText(t, "conn", "done", 10*time.Second)
		p.expectText(t, "output", want)
		p.expectText(t, "count", "152") // role, 150 tokens, stop
		p.expectText(t, "dupes", "0")
		if !evaluate[bool](t, p, `Array.from(document.querySelectorAll('#log li'), (li) => li.textContent).some((s) => s.includes('auto-resume'))`) {
			p.fail(t, "the log does not show an auto-resume")
		}
		ledgerIs1(t, prompt)
		t.Logf("auto-resume: dropped after %d events, resumed %s the upstream generation ran; %v",
			count, live, time.Since(start).Round(time.Millisecond))
	})

	if t.Failed() {
		p.DumpConsole(t)
	}
}

// demoPage is the tab that shows the demo page.
type demoPage struct {
	*webtest.Browser
	base string
}

func (p *demoPage) run(d time.Duration, steps ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(p.Ctx, d)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

func evaluate[T any](t *testing.T, p *demoPage, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		p.fail(t, "evaluate %s: %v", js, err)
	}
	return v
}

// fail logs the state of the page and the browser console, and stops the test.
func (p *demoPage) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, 5*time.Second)
	defer cancel()
	p.Dump(t, ctx, "conn", "key", "count", "dupes", "lastid", "replayed", "server-state", "error", "output")
	t.Fatalf(format, args...)
}

// open loads the demo page from the proxy.
func (p *demoPage) open(t *testing.T) {
	t.Helper()
	if err := p.run(10*time.Second,
		chromedp.Navigate(p.base+"/"),
		chromedp.WaitVisible(chromedp.ID("generate")),
		chromedp.WaitReady(chromedp.ID("prompt")),
	); err != nil {
		p.fail(t, "open the page: %v", err)
	}
	// app.js runs deferred; wait until it has wired the page.
	p.waitJS(t, `!!(window.reprise && window.reprise.state)`, 5*time.Second)
}

// typePrompt replaces the prompt with text, typed key by key.
func (p *demoPage) typePrompt(t *testing.T, text string) {
	t.Helper()
	// Select the old text, so that the typed text replaces it.
	evaluate[chromedp.Void](t, p, `(() => { const el = document.getElementById('prompt'); el.focus(); el.select(); })()`)
	if err := p.run(10*time.Second, chromedp.SendKeys(chromedp.ID("prompt"), text)); err != nil {
		p.fail(t, "type the prompt: %v", err)
	}
	if got := evaluate[string](t, p, `document.getElementById('prompt').value`); got != text {
		p.fail(t, "#prompt = %q after typing, want %q", got, text)
	}
}

// click waits until the control is enabled, then clicks it.
func (p *demoPage) click(t *testing.T, id string) {
	t.Helper()
	p.waitJS(t, fmt.Sprintf(`!document.getElementById(%q).disabled`, id), 5*time.Second)
	if err := p.run(5*time.Second, chromedp.Click(chromedp.ID(id))); err != nil {
		p.fail(t, "click #%s: %v", id, err)
	}
}

func (p *demoPage) text(t *testing.T, id string) string {
	t.Helper()
	return evaluate[string](t, p, fmt.Sprintf(`document.getElementById(%q).textContent`, id))
}

func (p *demoPage) expectText(t *testing.T, id, want string) {
	t.Helper()
	if got := p.text(t, id); got != want {
		p.fail(t, "#%s = %q, want %q", id, got, want)
	}
}

// waitJS polls predicate in the page until it is true, for at most d.
func (p *demoPage) waitJS(t *testing.T, predicate string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(p.Ctx, d+2*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](predicate,
		chromedp.WithPollingInterval(15*time.Millisecond), chromedp.WithPollingTimeout(d)))
	if err != nil {
		if errors.Is(err, chromedp.ErrPollingTimeout) || errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("not true after %v", d)
		}
		p.fail(t, "wait for %s: %v", predicate, err)
	}
}

func (p *demoPage) waitText(t *testing.T, id, want string, d time.Duration) {
	t.Helper()
	p.waitJS(t, fmt.Sprintf(`document.getElementById(%q).textContent === %q`, id, want), d)
}
