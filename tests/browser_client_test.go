package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/tests/webtest"
	"github.com/reprise-dev/reprise/web"
)

// clientPage is a page of another origin than the proxy's: it imports
// /reprise.js from the proxy (a module script: CORS), streams with its
// fetch, and reads a Location with an EventSource.
const clientPage = `<!doctype html><meta charset="utf-8"><title>reprise.js</title>
<script type="module">
import { createFetch } from "%s/reprise.js";

// stream POSTs a chat completion through the helper and reads its SSE.
window.stream = async (base, prompt) => {
  const resumes = [];
  const fetch = createFetch({ onResume: (info) => resumes.push(info.lastEventId) });
  const res = await fetch(base + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer sk-test" },
    body: JSON.stringify({ model: "mock-1", stream: true, messages: [{ role: "user", content: prompt }] }),
  });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "", text = "", events = 0, done = false;
  for (;;) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buf += value;
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      // A heartbeat (": ping", after 500 ms without an event: a loaded
      // machine) is no event; SDKs skip it too.
      if (ev.split("\n").every((line) => line.startsWith(":"))) continue;
      events++;
      for (const line of ev.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const d = line.slice(6);
        if (d === "[DONE]") done = true;
        else text += JSON.parse(d).choices[0]?.delta?.content ?? "";
      }
    }
  }
  return { text, events, done, rest: buf, key: res.headers.get("Idempotency-Key") ?? "", resumes: resumes.length };
};

// watch reads url with an EventSource to [DONE]; gaps are the times from
// each error to the next message (the reconnection time).
window.watch = (url) => new Promise((resolve, reject) => {
  const es = new EventSource(url);
  let text = "", errAt = 0;
  const gaps = [];
  setTimeout(() => { es.close(); reject(new Error("no [DONE] after 20 s; text " + JSON.stringify(text))); }, 20000);
  es.onerror = () => { if (!errAt) errAt = performance.now(); };
  es.onmessage = (m) => {
    if (errAt) { gaps.push(Math.round(performance.now() - errAt)); errAt = 0; }
    if (m.data === "[DONE]") { es.close(); resolve({ text, gaps }); return; }
    text += JSON.parse(m.data).choices[0]?.delta?.content ?? "";
  };
});
window.createFetch = createFetch;
window.ready = true;
</script>`

// TestBrowserClientHelper: in headless Chromium, a page of another origin
// (allowed by CORSOrigins) imports /reprise.js from the proxy and streams
// through a link that cuts the stream three times: the exact text, every
// event once, one upstream generation. A stream whose Location is on
// another origin is resumed there without the caller's credential. And
// an EventSource on the Location, cut three times, reconnects after the
// stream's retry: (50 ms here), not the browser's default 3 s.
func TestBrowserClientHelper(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	chromium := webtest.FindChromium()
	if chromium == "" {
		t.Skip("no Chromium: /usr/bin/chromium is absent and none of chromium, chromium-browser, google-chrome is in PATH")
	}
	var proxyURL atomic.Value
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, clientPage, proxyURL.Load())
	}))
	t.Cleanup(page.Close)
	e := newEnv(t, withTokenDelay(5*time.Millisecond), withConfig(func(c *proxy.Config) {
		c.HTTP.SSERetry = 50 * time.Millisecond
		c.HTTP.CORSOrigins = []string{page.URL}
	}))
	web.Mount(e.p)
	proxyURL.Store(e.URL)

	b := webtest.Start(t, webtest.Config{ExecPath: chromium, TempDirPrefix: "reprise-tests-chromium-", StartTimeout: 20 * time.Second})
	run := func(d time.Duration, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(b.Ctx, d)
		defer cancel()
		if err := chromedp.Do(ctx, steps...); err != nil {
			b.DumpConsole(t)
			t.Fatal(err)
		}
	}
	run(10*time.Second, chromedp.Navigate(page.URL), chromedp.Poll[chromedp.Void]("window.ready === true"))
	defer func() { _ = chromedp.Do(b.Ctx, chromedp.Navigate("about:blank")) }()

	t.Run("fetch", func(t *testing.T) {
		link := newDropLink(t, e.addr, clientCutBytes, clientDrops)
		prompt := uniquePrompt(t, "[tokens=60]")
		got := awaitJS[struct {
			Text    string `json:"text"`
			Events  int    `json:"events"`
			Done    bool   `json:"done"`
			Rest    string `json:"rest"`
			Key     string `json:"key"`
			Resumes int    `json:"resumes"`
		}](t, b, fmt.Sprintf("stream(%q, %q)", link.URL, prompt))
		if want := strings.Join(mockllm.Content(prompt, clientTokens, false), ""); got.Text != want {
			t.Errorf("text %q, want %q", got.Text, want)
		}
		if got.Events != clientTokens+3 || !got.Done || got.Rest != "" { // role, tokens, stop, [DONE]
			t.Errorf("%d events (done %v, rest %q), want %d ending with [DONE]", got.Events, got.Done, got.Rest, clientTokens+3)
		}
		if len(got.Key) != 36 || got.Resumes != clientDrops {
			t.Errorf("key %q, %d resumes; want a UUID and %d", got.Key, got.Resumes, clientDrops)
		}
		checkOnce(t, e, prompt, link)
	})

	t.Run("a Location on another origin gets no credential", func(t *testing.T) {
		text, headers, urls := browserOtherOrigin(t, b, page.URL)
		if want := "retry: 10\nid: 1\ndata: {}\n\nid: 2\ndata: [DONE]\n\n"; text != want {
			t.Errorf("the stream read %q, want %q", text, want)
		}
		if len(headers) != 1 {
			t.Fatalf("the other origin got %d GETs, want 1 resume", len(headers))
		}
		for _, h := range []string{"Authorization", "X-Api-Key", "Cookie"} {
			if v := headers[0].Get(h); v != "" {
				t.Errorf("the other origin got %s: %q", h, v)
			}
		}
		if headers[0].Get("Last-Event-ID") != "1" || urls[0].Query().Get("token") != "cap" {
			t.Errorf("the resume was %s with %v, want the Location's token and Last-Event-ID 1", urls[0], headers[0])
		}
	})

	t.Run("EventSource honours retry", func(t *testing.T) {
		prompt := uniquePrompt(t, "[tokens=60]")
		resp := testutil.Do(t, http.MethodPost, e.URL+"/v1/chat/completions", chatBody(prompt, true), "Authorization", "Bearer sk-test")
		_ = testutil.ReadBody(t, resp)
		link := newDropLink(t, e.addr, clientCutBytes, clientDrops)
		got := awaitJS[struct {
			Text string  `json:"text"`
			Gaps []int64 `json:"gaps"`
		}](t, b, fmt.Sprintf("watch(%q)", link.URL+resp.Header.Get("Location")))
		if want := strings.Join(mockllm.Content(prompt, clientTokens, false), ""); got.Text != want {
			t.Errorf("text %q, want %q", got.Text, want)
		}
		t.Logf("EventSource reconnection gaps: %v ms", got.Gaps)
		if len(got.Gaps) != clientDrops {
			t.Fatalf("reconnections %v, want %d", got.Gaps, clientDrops)
		}
		for _, g := range got.Gaps {
			if g > 1500 { // Chromium's own default is 3 s
				t.Errorf("reconnection gaps %v ms: the retry: of 50 ms was not honoured", got.Gaps)
				break
			}
		}
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
			t.Errorf("ledger %+v", g)
		}
	})
}

// browserOtherOrigin: in the page, the helper's POST goes to origin, whose
// answer ends after its first event and names a Location on other
// (another port: another origin); the helper resumes it there with the
// Location's token alone. It returns the stream's text and what other got.
func browserOtherOrigin(t *testing.T, b *webtest.Browser, pageOrigin string) (string, []http.Header, []*url.URL) {
	t.Helper()
	cors := func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Access-Control-Allow-Origin", pageOrigin)
		w.Header().Set("Access-Control-Expose-Headers", "Location")
		if r.Method != http.MethodOptions {
			return false
		}
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
		w.Header().Set("Access-Control-Allow-Headers", r.Header.Get("Access-Control-Request-Headers"))
		w.WriteHeader(http.StatusNoContent)
		return true
	}
	var mu sync.Mutex
	var headers []http.Header
	var urls []*url.URL
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Method != http.MethodOptions {
			headers, urls = append(headers, r.Header.Clone()), append(urls, r.URL)
		}
		mu.Unlock()
		if cors(w, r) {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: 2\ndata: [DONE]\n\n")
	}))
	t.Cleanup(other.Close)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cors(w, r) {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Location", other.URL+"/v1/streams/k?token=cap")
		// Ends before the terminal event: a broken stream to the helper.
		// (An abort could make Chromium drop the event unread.)
		_, _ = io.WriteString(w, "retry: 10\nid: 1\ndata: {}\n\n")
	}))
	t.Cleanup(origin.Close)
	text := awaitJS[string](t, b, fmt.Sprintf(`(async () => {
  const fetch = createFetch({ retryDelay: 1, maxDelay: 20, maxAttempts: 3 });
  const res = await fetch(%q + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer sk-test", "x-api-key": "sk-ant-test" },
    body: "{}",
  });
  return await res.text();
})()`, origin.URL))
	mu.Lock()
	defer mu.Unlock()
	return text, headers, urls
}

// awaitJS evaluates js in b's page and waits for the promise it returns.
func awaitJS[T any](t *testing.T, b *webtest.Browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.DumpConsole(t)
		t.Fatalf("%s: %v", js, err)
	}
	return v
}
