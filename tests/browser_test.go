package tests

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/tests/webtest"
	"github.com/reprise-dev/reprise/web"
)

// TestBrowserDemo drives the real demo page, served by the real proxy on the
// same origin, in headless Chromium: generate, drop and resume, replay and
// auto-resume; the unreliable network in SSE and WebSocket modes; the speech
// pane through two drops and more. Every scenario checks what the page shows
// against the mock's deterministic content, and the upstream ledger: one
// generation per prompt, whatever the browser did.
//
// With REPRISE_SCREENSHOT=1 it writes docs/demo.png (the README's picture);
// otherwise the screenshot goes to the temp directory.
func TestBrowserDemo(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)

	e := newEnv(t, withTokenDelay(15*time.Millisecond))
	web.Mount(e.p)
	p := newDemoPage(t, chromium, e.URL)
	// Leave the page before the proxy closes, so that its EventSource and
	// status polls stop first (deferred calls run before t.Cleanup).
	defer func() { _ = p.run(5*time.Second, chromedp.Navigate("about:blank")) }()

	ledgerIs1 := func(t *testing.T, prompt string) mockllm.Generation {
		t.Helper()
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 || g.Requests != 1 {
			p.fail(t, "upstream ledger for %q: %+v, want exactly 1 request and 1 generation", prompt, g)
		}
		gens := e.LLM.Ledger().Generations(prompt)
		if len(gens) != 1 || !gens[0].Completed {
			p.fail(t, "upstream generations for %q: %+v, want one completed", prompt, gens)
		}
		return gens[0]
	}

	t.Run("generate", func(t *testing.T) {
		start := time.Now()
		// 2 s of tokens: the page's status polls (every 500 ms) answer
		// while it streams, on a busy box too.
		prompt := uniquePrompt(t, "[tokens=40] [delay=50ms]")
		want := strings.Join(mockllm.Content(prompt, 40, false), "")
		p.open(t)
		p.typePrompt(t, prompt)
		p.watchAhead(t, "conn", "count", "server-events", "ahead")
		p.click(t, "generate")
		p.waitText(t, "conn", "done", 10*time.Second)
		// Mid-stream the client held events the server's count lacked yet
		// (shown before stored, and counted at the last poll): the page
		// said so beside the numbers.
		if seen := p.aheadSeen(t); !strings.Contains(seen.Hint, "the journal catches up") || !seen.Shown {
			p.fail(t, "client %s > server journaled %s, with the hint %q (shown %v): want it explained", seen.Count, seen.Server, seen.Hint, seen.Shown)
		}
		p.expectText(t, "output", want)
		p.expectText(t, "count", "43") // role, 40 tokens, stop, [DONE]
		p.expectText(t, "tokens-delivered", "40")
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
		p.expectText(t, "server-events", "43") // the client got every event the server journaled
		p.expectText(t, "ahead", "")
		p.expectText(t, "replay-note", "") // no replay yet
		p.expectText(t, "tokens-billed", "40")
		p.expectText(t, "gens-naive", "1")
		p.expectText(t, "saved", "") // nothing served without a generation
		p.expectText(t, "calls", "") // no price per call: no calls shown
		// No --prices: the page prices the demo model and says so.
		if cost := p.text(t, "cost-key"); !strings.HasPrefix(cost, "$") || cost != p.text(t, "cost-naive") {
			p.fail(t, "#cost-key %q, #cost-naive %q: want one price, the same with no drop", cost, p.text(t, "cost-naive"))
		}
		if note := p.text(t, "cost-note"); !strings.Contains(note, "Demo price") {
			p.fail(t, "#cost-note = %q, want it to say the price is a demo price", note)
		}
		t.Logf("generate: %v", time.Since(start).Round(time.Millisecond))
	})

	var resumed bool // the page holds a completed, resumed stream for replay
	var resumedPrompt, resumedWant string
	var resumedTokens int // the resumed generation's, as the ledger has them

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
		// nothing meanwhile, and shows the journal's count climbing.
		testutil.Settled(t, e.LLM.Ledger(), prompt, 1) // the generation finishes after the drop
		if gens := e.LLM.Ledger().Generations(prompt); len(gens) != 1 || !gens[0].Completed || gens[0].Content != want {
			p.fail(t, "upstream generations after the drop: %+v, want one completed with the full content", gens)
		}
		p.waitText(t, "server-events", "63", 5*time.Second)
		p.expectText(t, "conn", "dropped")
		p.expectText(t, "output", atDrop)
		p.expectText(t, "count", strconv.Itoa(count))

		p.click(t, "resume")
		p.waitText(t, "conn", "done", 10*time.Second)
		p.expectText(t, "output", want)
		p.expectText(t, "count", "63") // role, 60 tokens, stop, [DONE]
		p.expectText(t, "dupes", "0")
		p.expectText(t, "gens-naive", "2") // a naive client would have started over once
		if msg := p.text(t, "error"); msg != "" {
			p.fail(t, "#error = %q", msg)
		}
		gen := ledgerIs1(t, prompt)
		p.waitText(t, "server-state", "completed", 5*time.Second)
		resumedTokens = gen.PromptTokens + gen.Tokens
		p.waitText(t, "saved", fmt.Sprintf("saved by reprise: 1 resume — %d tokens", resumedTokens), 5*time.Second)
		t.Logf("drop and resume: dropped after %d events (last id %s); %v", count, lastID, time.Since(start).Round(time.Millisecond))
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
		p.expectText(t, "count", "63")
		p.expectText(t, "dupes", "0") // repeated events: none, beside Idempotent-Replayed: true
		// The page says what the replay was, and why it skipped nothing.
		if note := p.text(t, "replay-note"); !strings.Contains(note, "from the journal") || !strings.Contains(note, "skipped only when a resume") {
			p.fail(t, "#replay-note = %q, want it to say the replay came from the journal and that repeats are skipped only on a resume", note)
		}
		// The replay is a saving the page shows beside the resume.
		p.waitText(t, "saved", fmt.Sprintf("saved by reprise: 1 resume, 1 replay — %d tokens", 2*resumedTokens), 5*time.Second)
		ledgerIs1(t, resumedPrompt)
		t.Logf("replay: %v", time.Since(start).Round(time.Millisecond))
	})

	// Stop is not a drop: Stop cancels the generation on the server, and
	// Regenerate (the same prompt, a new key) is a second generation
	// that the page shows from its first token; a Drop (drop and resume
	// above) leaves the one generation running.
	t.Run("stop and regenerate", func(t *testing.T) {
		start := time.Now()
		prompt := uniquePrompt(t, "[tokens=100] [delay=20ms]")
		want := strings.Join(mockllm.Content(prompt, 100, false), "")
		p.open(t)
		p.typePrompt(t, prompt)
		p.click(t, "generate")
		p.waitJS(t, `+document.getElementById('count').textContent >= 5`, 10*time.Second)
		first := p.text(t, "key")
		p.click(t, "stop")
		p.waitText(t, "conn", "stopped", 5*time.Second)
		p.waitText(t, "server-state", "cancelled", 5*time.Second)
		atStop := p.text(t, "output")
		if !strings.HasPrefix(want, atStop) || atStop == want {
			p.fail(t, "at the stop: output %q, want a strict prefix of %q", atStop, want)
		}
		if !p.logHas(t, "cancelled: the upstream request ends") {
			p.fail(t, "the log does not show the cancel")
		}
		testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
		if gens := e.LLM.Ledger().Generations(prompt); len(gens) != 1 || !gens[0].Aborted || gens[0].Completed {
			p.fail(t, "upstream generations after the stop: %+v, want one aborted", gens)
		}

		p.click(t, "regenerate")
		p.waitText(t, "conn", "done", 10*time.Second)
		p.expectText(t, "output", want) // from its first token: the stopped text is gone
		p.expectText(t, "count", "103")
		if second := p.text(t, "key"); second == first || len(second) != 36 {
			p.fail(t, "the regenerate's key %q, want a new one (the first %q)", second, first)
		}
		if line := p.text(t, "answer"); !strings.HasPrefix(line, "Answer 2 to this prompt") || !strings.Contains(line, first[:8]+"… was cancelled") {
			p.fail(t, "#answer = %q, want answer 2 and the first key cancelled", line)
		}
		p.waitText(t, "server-state", "completed", 5*time.Second)
		p.expectText(t, "server-generation", "1") // the new key's first
		testutil.Settled(t, e.LLM.Ledger(), prompt, 2)
		if gens := e.LLM.Ledger().Generations(prompt); len(gens) != 2 || !gens[0].Aborted || !gens[1].Completed || gens[1].Content != want {
			p.fail(t, "upstream generations: %+v, want the stopped one aborted and a second one completed", gens)
		}
		if st := testutil.WaitState(t, e.URL, first, "cancelled"); st.Generation != 1 {
			p.fail(t, "the first key's status %+v, want its generation 1 cancelled", st)
		}
		t.Logf("stop and regenerate: stopped at %d bytes of text; %v", len(atStop), time.Since(start).Round(time.Millisecond))
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
		p.expectText(t, "count", "153")
		p.expectText(t, "dupes", "0")
		if !p.logHas(t, "auto-resume") {
			p.fail(t, "the log does not show an auto-resume")
		}
		ledgerIs1(t, prompt)
		t.Logf("auto-resume: dropped after %d events, resumed %s the upstream generation ran; %v",
			count, live, time.Since(start).Round(time.Millisecond))
	})

	// The unreliable network drops every connection after N events and
	// reconnects; the page must end with exactly the text of one
	// generation, and show the server's count ahead of the client's
	// while the client is away.
	for _, mode := range []struct{ name, radio, kind string }{
		{"SSE", "mode-sse", "eventsource"},
		{"WebSocket", "mode-ws", "websocket"},
	} {
		t.Run("unreliable network "+mode.name, func(t *testing.T) {
			start := time.Now()
			prompt := uniquePrompt(t, "[tokens=60] [delay=20ms]")
			want := strings.Join(mockllm.Content(prompt, 60, false), "")
			p.open(t)
			p.typePrompt(t, prompt)
			p.clickLabel(t, mode.radio)
			p.setNumber(t, "every", 10)
			p.setNumber(t, "delay", 700)
			p.click(t, "unreliable")
			p.click(t, "generate")
			// Dropped, and the server journaled more than the client got.
			p.waitJS(t, `document.getElementById('conn').textContent === 'dropped' && `+
				`+document.getElementById('server-events').textContent > +document.getElementById('count').textContent`, 10*time.Second)
			p.waitJS(t, fmt.Sprintf(`window.reprise.state.conn?.kind === %q`, mode.kind), 5*time.Second)
			p.waitText(t, "conn", "done", 20*time.Second)
			p.expectText(t, "output", want)
			p.expectText(t, "count", "63")
			p.expectText(t, "tokens-delivered", "60")
			drops, _ := strconv.Atoi(evaluate[string](t, p, `String(window.reprise.state.drops)`))
			if drops < 3 {
				p.fail(t, "%d drops, want at least 3 (every 10 of 63 events)", drops)
			}
			if !p.logHas(t, "unreliable network: dropped after 10 events") || !p.logHas(t, "reconnected over "+mode.name+" after") {
				p.fail(t, "the log does not show the drops and reconnections")
			}
			ledgerIs1(t, prompt)
			p.waitText(t, "server-state", "completed", 5*time.Second)
			p.expectText(t, "server-events", "63")
			p.expectText(t, "tokens-billed", "60")
			p.expectText(t, "server-generation", "1")
			p.expectText(t, "gens-naive", strconv.Itoa(1+drops))
			t.Logf("unreliable %s: %d drops, one generation; %v", mode.name, drops, time.Since(start).Round(time.Millisecond))
		})
	}

	// The speech pane plays every chunk once, in order, through drops: the
	// bytes it fed to Web Audio are the bytes the upstream generated.
	for _, mode := range []struct{ name, radio string }{{"SSE", "mode-sse"}, {"WebSocket", "mode-ws"}} {
		t.Run("speech "+mode.name, func(t *testing.T) {
			start := time.Now()
			input := uniquePrompt(t, "[tokens=30] [delay=25ms]") // 30 chunks of 50 ms
			p.open(t)
			p.clickLabel(t, mode.radio)
			p.setNumber(t, "every", 8)
			p.setNumber(t, "delay", 300)
			p.click(t, "unreliable")
			p.setValue(t, "sp-input", input)
			p.watchAhead(t, "sp-conn", "sp-count", "sp-server-events", "sp-ahead")
			p.click(t, "sp-speak")
			p.waitJS(t, `document.getElementById('sp-verdict').dataset.ok !== ''`, 20*time.Second)
			if seen := p.aheadSeen(t); !strings.Contains(seen.Hint, "the journal catches up") || !seen.Shown {
				p.fail(t, "client %s > server journaled %s, with the hint %q (shown %v): want it explained", seen.Count, seen.Server, seen.Hint, seen.Shown)
			}
			p.expectText(t, "sp-conn", "done")
			p.waitText(t, "sp-ahead", "", 5*time.Second) // once the status says the journal holds them all
			gen := ledgerIs1(t, input)
			want := len(gen.Content)
			if want != 30*mockllm.ChunkBytes {
				p.fail(t, "the upstream generated %d bytes, want %d", want, 30*mockllm.ChunkBytes)
			}
			// The same bytes in the same order, no chunk twice: the page's
			// running hash of what it played, and its chunk offsets.
			drops := p.checkPlayed(t, gen.Content)
			if !evaluate[bool](t, p, `window.reprise.speech.chunks.every(([off, n], i, a) => n === 2400 && off === (i === 0 ? 0 : a[i-1][0] + a[i-1][1]))`) {
				p.fail(t, "the played chunks are not contiguous 2400-byte chunks")
			}
			p.expectText(t, "sp-dupes", "0")
			if v := p.text(t, "sp-verdict"); !strings.HasPrefix(v, "✓") {
				p.fail(t, "#sp-verdict = %q", v)
			}
			// The meter counts events here: all of them, full.
			if bar := p.meter(t); bar.Value != bar.Max || bar.Max != float64(30+1) {
				p.fail(t, "#sp-progress %v of %v at the end, want 31 of 31 (30 chunks and the done event)", bar.Value, bar.Max)
			}
			t.Logf("speech %s: %d bytes played = generated after %d drops; %v", mode.name, want, drops, time.Since(start).Round(time.Millisecond))
		})
	}

	// Raw WAV: dropped connections resume with Range: bytes=N- on the
	// Location while the upstream still speaks (206 from byte N, then
	// live); the PCM played is the PCM generated.
	t.Run("speech raw WAV and Range", func(t *testing.T) {
		start := time.Now()
		input := uniquePrompt(t, "[tokens=30] [delay=40ms]")
		p.open(t)
		p.clickLabel(t, "sp-format-raw")
		p.setNumber(t, "every", 6)
		p.setNumber(t, "delay", 300)
		p.click(t, "unreliable")
		p.setValue(t, "sp-input", input)
		p.click(t, "sp-speak")
		p.waitJS(t, `document.getElementById('sp-verdict').dataset.ok !== ''`, 20*time.Second)
		p.expectText(t, "sp-conn", "done")
		gen := ledgerIs1(t, input)
		want := len(gen.Content)
		drops := p.checkPlayed(t, gen.Content)
		if !evaluate[bool](t, p, `window.reprise.speech.chunks.every(([off, n], i, a) => off === (i === 0 ? 0 : a[i-1][0] + a[i-1][1]))`) {
			p.fail(t, "the played chunks are not contiguous")
		}
		if !p.logHas(t, "→ 206 bytes ") {
			p.fail(t, "the log shows no Range resume answered 206")
		}
		// The meter counts the answer's bytes (not body reads against
		// journal chunks): all of them, full.
		if bar, size := p.meter(t), float64(mockllm.WAVHeaderSize+want); bar.Value != size || bar.Max != size {
			p.fail(t, "#sp-progress %v of %v at the end, want %v of %v (the WAV's bytes)", bar.Value, bar.Max, size, size)
		}
		for _, l := range evaluate[[]string](t, p, `Array.from(document.querySelectorAll('#log li'), (li) => li.textContent).filter((l) => l.includes('206')).reverse()`) {
			t.Logf("page log: %s", l)
		}
		t.Logf("speech raw WAV: %d bytes played = generated after %d Range resumes; %v", want, drops, time.Since(start).Round(time.Millisecond))
	})

	t.Run("screenshot", func(t *testing.T) {
		// Both panes through an unreliable network at once, with the
		// page's own prompts and the demo model as `go run ./cmd/reprise`
		// serves it; then the picture.
		demo := newEnv(t, withTokenDelay(20*time.Millisecond), withDemoModel())
		web.Mount(demo.p)
		p.base = demo.URL
		defer func() {
			_ = p.run(5*time.Second, chromedp.Navigate("about:blank"))
			p.base = e.URL
		}()
		p.open(t)
		p.setNumber(t, "every", 25)
		p.setNumber(t, "delay", 500)
		p.click(t, "unreliable")
		p.click(t, "generate")
		p.click(t, "sp-speak")
		p.waitText(t, "conn", "done", 30*time.Second)
		p.waitJS(t, `document.getElementById('sp-verdict').dataset.ok === 'true'`, 30*time.Second)
		p.waitText(t, "server-state", "completed", 5*time.Second)
		p.waitJS(t, `document.getElementById('tokens-billed').textContent !== ''`, 5*time.Second)
		p.expectText(t, "server-generation", "1")
		p.expectText(t, "sp-generation", "1")
		sctx, cancel := context.WithTimeout(p.Ctx, 10*time.Second)
		defer cancel()
		shot, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		path := filepath.Join(t.TempDir(), "demo.png")
		if os.Getenv("REPRISE_SCREENSHOT") == "1" {
			path = filepath.Join("..", "docs", "demo.png")
		}
		if err := os.WriteFile(path, shot, 0o644); err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		t.Logf("screenshot: %s (%d bytes)", path, len(shot))
	})

	if t.Failed() {
		p.DumpConsole(t)
	}
}

// formatThousands writes n as the page does (en-US grouping).
func formatThousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// needChromium returns the browser to drive the page with. Without one the
// test skips, or fails when CI is set; in -short mode it skips.
func needChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	chromium := webtest.FindChromium()
	if chromium == "" {
		const msg = "no Chromium: /usr/bin/chromium is absent and none of chromium, chromium-browser, google-chrome is in PATH (apt-get install chromium)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + "; CI is set")
		}
		t.Skip(msg + "; CI=1 makes this a failure")
	}
	return chromium
}

// demoPage is the tab that shows the demo page.
type demoPage struct {
	*webtest.Browser
	base string
}

// newDemoPage starts chromium headless and returns its tab, to show the
// pages of base. The browser stops in a t.Cleanup registered after those
// of the caller's environment, so it stops before the proxy closes.
func newDemoPage(t *testing.T, chromium, base string) *demoPage {
	t.Helper()
	return &demoPage{
		Browser: webtest.Start(t, webtest.Config{
			ExecPath:      chromium,
			TempDirPrefix: "reprise-tests-chromium-",
			StartTimeout:  20 * time.Second,
			Options: []chromedp.ExecAllocatorOption{
				chromedp.WindowSize(1280, 1000),
				chromedp.Flag("autoplay-policy", "no-user-gesture-required"),
			},
		}),
		base: base,
	}
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
	p.Dump(t, ctx, "conn", "key", "count", "dupes", "lastid", "replayed", "server-state", "server-events", "error", "output",
		"sp-conn", "sp-played", "sp-generated", "sp-verdict", "sp-error")
	if lines, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#log li'), (li) => li.textContent).reverse()`)); err == nil {
		for _, l := range lines {
			t.Logf("page log: %s", l)
		}
	}
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

// clickLabel clicks the label of the control id (a radio button drawn as
// a segmented switch is its label).
func (p *demoPage) clickLabel(t *testing.T, id string) {
	t.Helper()
	if err := p.run(5*time.Second, chromedp.Click(chromedp.CSS(`label[for="`+id+`"]`))); err != nil {
		p.fail(t, "click the label of #%s: %v", id, err)
	}
	if !evaluate[bool](t, p, fmt.Sprintf(`document.getElementById(%q).checked`, id)) {
		p.fail(t, "#%s is not checked after a click on its label", id)
	}
}

// setNumber sets a number input to v, as typing would (an input event).
func (p *demoPage) setNumber(t *testing.T, id string, v int) {
	t.Helper()
	p.setValue(t, id, strconv.Itoa(v))
}

// setValue sets a field's value and fires its input and change events.
func (p *demoPage) setValue(t *testing.T, id, v string) {
	t.Helper()
	evaluate[chromedp.Void](t, p, fmt.Sprintf(`(() => { const el = document.getElementById(%q); el.value = %q; `+
		`el.dispatchEvent(new Event('input', {bubbles: true})); el.dispatchEvent(new Event('change', {bubbles: true})); })()`, id, v))
}

// logHas reports whether a line of the page's log contains s.
func (p *demoPage) logHas(t *testing.T, s string) bool {
	t.Helper()
	return evaluate[bool](t, p, fmt.Sprintf(`Array.from(document.querySelectorAll('#log li'), (li) => li.textContent).some((l) => l.includes(%q))`, s))
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

// aheadSeen is a pane's client count ahead of the server's journaled
// count, and the hint the page showed with them.
type aheadSeen struct {
	Count, Server, Hint string
	Shown               bool
}

// watchAhead records, from now on, the first moment the pane whose ids are
// given streams with its client count above the server's journaled count,
// and what the page showed then (the hint is "" when it has none): a
// MutationObserver looks at every change of the pane, so no moment is
// missed on a busy machine. aheadSeen returns it once the stream is over.
func (p *demoPage) watchAhead(t *testing.T, conn, count, server, hint string) {
	t.Helper()
	evaluate[bool](t, p, fmt.Sprintf(`(() => {
		const text = (id) => document.getElementById(id)?.textContent ?? '';
		window.aheadSeen = null;
		const look = () => {
			if (window.aheadSeen || text(%[1]q) !== 'streaming' || text(%[3]q) === '' || +text(%[2]q) <= +text(%[3]q)) return;
			const h = document.getElementById(%[4]q);
			window.aheadSeen = {Count: text(%[2]q), Server: text(%[3]q), Hint: text(%[4]q), Shown: !!h && h.getClientRects().length > 0};
		};
		new MutationObserver(look).observe(document.body, {subtree: true, childList: true, characterData: true, attributes: true});
		return true;
	})()`, conn, count, server, hint))
}

// aheadSeen is what watchAhead recorded; it fails the test when the
// client was never ahead while streaming.
func (p *demoPage) aheadSeen(t *testing.T) aheadSeen {
	t.Helper()
	if !evaluate[bool](t, p, `window.aheadSeen !== null`) {
		p.fail(t, "the client's count was never above the server's while streaming")
	}
	return evaluate[aheadSeen](t, p, `window.aheadSeen`)
}

// meter is what the speech pane's progress bar shows.
type meter struct{ Value, Max float64 }

func (p *demoPage) meter(t *testing.T) meter {
	t.Helper()
	return evaluate[meter](t, p, `(() => { const b = document.getElementById('sp-progress'); return {Value: b.value, Max: b.max}; })()`)
}

// checkPlayed checks the speech pane against the audio the upstream
// generated: bytes played and generated shown, at least two drops, and the
// hash of what it played; it returns the drops.
func (p *demoPage) checkPlayed(t *testing.T, generated string) int {
	t.Helper()
	p.expectText(t, "sp-played", formatThousands(len(generated)))
	p.expectText(t, "sp-generated", formatThousands(len(generated)))
	drops := evaluate[int](t, p, `window.reprise.speech.session.drops`)
	if drops < 2 {
		p.fail(t, "%d drops, want at least 2", drops)
	}
	h := fnv.New32a()
	h.Write([]byte(generated))
	if got, want := evaluate[string](t, p, `window.reprise.speech.hash.hex()`), fmt.Sprintf("%08x", h.Sum32()); got != want {
		p.fail(t, "hash of the played audio %s, want %s (the upstream's)", got, want)
	}
	return drops
}
