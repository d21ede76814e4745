// Package webtest drives the demo page of package web in a headless Chromium,
// for tests only: the page's own test (tests/webpage) and the end-to-end tests
// in tests.
//
// [Start] launches the browser with a throwaway profile and returns its tab;
// the browser stops and the profile goes away when the test ends.
// [Browser.Dump] logs what the page shows and what it wrote to its console,
// for a test that fails.
package webtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// DebianChromium is where Debian's chromium package installs the browser.
const DebianChromium = "/usr/bin/chromium"

// FindChromium returns the browser to drive: [DebianChromium] when it exists,
// else the first of chromium, chromium-browser, google-chrome and
// google-chrome-stable in PATH, else "".
func FindChromium() string {
	if _, err := os.Stat(DebianChromium); err == nil {
		return DebianChromium
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Config says which browser [Start] launches and how.
type Config struct {
	// ExecPath is the browser binary. The caller checks that it exists (and
	// skips the test when it does not).
	ExecPath string
	// TempDirPrefix names the profile directory, made in os.TempDir.
	TempDirPrefix string
	// StartTimeout bounds the start of the browser; the test fails when it
	// takes longer.
	StartTimeout time.Duration
	// Options are added to the allocator options, e.g. chromedp.WindowSize.
	Options []chromedp.ExecAllocatorOption
}

// Browser is the tab of a started headless Chromium, with the messages the
// pages it showed wrote to the console.
type Browser struct {
	// Ctx is the tab's context. Give actions a timeout through a context
	// derived from it; a timeout on Ctx itself would stop the browser.
	Ctx context.Context

	mu      sync.Mutex
	console []string
}

// Start launches a headless Chromium as c says and returns its tab. It fails
// the test when the browser does not start within c.StartTimeout. When the
// test ends, tb.Cleanup stops the browser and removes its profile, so a test
// should close the servers the page talks to after that (in a Cleanup
// registered before Start) or leave the page first.
func Start(tb testing.TB, c Config) *Browser {
	tb.Helper()
	dir, err := os.MkdirTemp("", c.TempDirPrefix)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// Chromium's child processes can write into the directory for a
		// moment after the browser stops.
		for range 50 {
			if os.RemoveAll(dir) == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	opts := append([]chromedp.ExecAllocatorOption{
		chromedp.ExecPath(c.ExecPath),
		chromedp.UserDataDir(dir),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
	}, c.Options...)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	tb.Cleanup(cancelAlloc)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	tb.Cleanup(cancelCtx)

	// Start the browser with a bounded wait, but without a timeout on the
	// context of the first action (that would stop the browser when it ends).
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			tb.Fatalf("start Chromium (%s): %v", c.ExecPath, err)
		}
	case <-time.After(c.StartTimeout):
		tb.Fatalf("Chromium did not start within %v", c.StartTimeout)
	}

	b := &Browser{Ctx: ctx}
	go func() {
		for m, err := range chromedp.Console(ctx) {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m.String())
			b.mu.Unlock()
		}
	}()
	return b
}

// Dump logs the text of the elements with the given ids and the entries of
// the page's #log, newest first, then the console (see [Browser.DumpConsole]).
// It evaluates in ctx, which the caller may bound; when that fails, it logs
// the console only.
func (b *Browser) Dump(tb testing.TB, ctx context.Context, ids ...string) {
	tb.Helper()
	var js strings.Builder
	js.WriteString("JSON.stringify({\n")
	for _, id := range ids {
		fmt.Fprintf(&js, "\t%q: document.getElementById(%q)?.textContent,\n", id, id)
	}
	js.WriteString("\tlog: Array.from(document.querySelectorAll('#log li'), (li) => li.textContent).reverse(),\n})")
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](js.String()))
	if err == nil {
		tb.Logf("page state: %s", state)
	}
	b.DumpConsole(tb)
}

// DumpConsole logs every console message the browser has seen so far.
func (b *Browser) DumpConsole(tb testing.TB) {
	tb.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.console {
		tb.Logf("console: %s", m)
	}
}
