// Package webpage_test drives the demo page of package web (web/static) in a
// headless Chromium against a fake of the proxy's HTTP contract: the page's
// parser, its resume after a drop, its counters. The page served by a real
// reprise is checked in tests/browser_test.go.
package webpage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/tests/webtest"
	"github.com/reprise-dev/reprise/web"
)

// ---------------------------------------------------------------------------
// A fake of the proxy's HTTP contract, for the browser test.
// ---------------------------------------------------------------------------

const (
	fakeEvents = 20
	fakeToken  = "s3cret"
)

// fakeContent is the content of the event number i (1-based) of a generation.
// It has multi-byte characters and a JSON escape, so that a chunk boundary can
// fall inside a character and the page must decode the stream as a stream.
func fakeContent(gen, i int) string {
	if gen > 1 {
		return fmt.Sprintf("g%d-%02d ", gen, i)
	}
	return fmt.Sprintf("tok%02d·é\"%s ", i, strings.Repeat("x", i%3))
}

func fakeText(gen, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		b.WriteString(fakeContent(gen, i))
	}
	return b.String()
}

type fakeEvent struct {
	id      string
	kind    string // "data" or "reset"
	content string
}

type fakeStream struct {
	key  string
	body string

	mu      sync.Mutex
	events  []fakeEvent
	state   string // in_progress, completed, failed
	gen     int
	changed chan struct{} // closed and replaced on every change
	created time.Time
	updated time.Time
}

func (s *fakeStream) add(ev fakeEvent, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ev.kind != "" {
		s.events = append(s.events, ev)
	}
	if state != "" {
		s.state = state
	}
	if ev.kind == "reset" {
		s.gen++
	}
	s.updated = time.Now()
	close(s.changed)
	s.changed = make(chan struct{})
}

type fakeProxy struct {
	tick time.Duration
	wg   sync.WaitGroup // generators

	mu      sync.Mutex
	streams map[string]*fakeStream
	posts   []string // Idempotency-Key of each POST
	resumes []string // raw query of each stream GET (not the JSON status)
}

func newFakeProxy(tick time.Duration) *fakeProxy {
	return &fakeProxy{tick: tick, streams: map[string]*fakeStream{}}
}

func (p *fakeProxy) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", web.Handler())
	mux.HandleFunc("POST /v1/chat/completions", p.chat)
	mux.HandleFunc("GET /v1/streams/{key}", p.stream)
	return mux
}

func (p *fakeProxy) stream1(key string) *fakeStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams[key]
}

func (p *fakeProxy) postsFor(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, k := range p.posts {
		if k == key {
			n++
		}
	}
	return n
}

func (p *fakeProxy) resumeQueries() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.resumes)
}

func writeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "code": strings.ReplaceAll(strings.ToLower(http.StatusText(status)), " ", "_")},
	})
}

// generate runs one generation like an upstream would, at p.tick per event.
// It keeps running when the client goes away. The prompt steers it:
// "FAIL" breaks the upstream after 3 events, "RESET" replaces the generation
// by a second one after 5 events.
func (p *fakeProxy) generate(s *fakeStream, prompt string) {
	defer p.wg.Done()
	n := fakeEvents
	if strings.Contains(prompt, "FAIL") {
		n = 3
	}
	gen := 1
	for i := 1; i <= n; i++ {
		time.Sleep(p.tick)
		s.add(fakeEvent{id: strconv.Itoa(i), kind: "data", content: fakeContent(gen, i)}, "")
		if gen == 1 && i == 5 && strings.Contains(prompt, "RESET") {
			gen = 2
			s.add(fakeEvent{id: "reset-2", kind: "reset"}, "")
			for j := 1; j <= 8; j++ {
				time.Sleep(p.tick)
				s.add(fakeEvent{id: fmt.Sprintf("2-%d", j), kind: "data", content: fakeContent(gen, j)}, "")
			}
			break
		}
	}
	if strings.Contains(prompt, "FAIL") {
		s.add(fakeEvent{}, "failed")
		return
	}
	s.add(fakeEvent{}, "completed")
}

func (p *fakeProxy) chat(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if key == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "Idempotency-Key is required")
		return
	}
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Model != "demo" || !req.Stream || len(req.Messages) != 1 || req.Messages[0].Role != "user" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "bad body: "+string(body))
		return
	}
	prompt := req.Messages[0].Content
	if strings.Contains(prompt, "BUSY") {
		writeError(w, http.StatusTooManyRequests, "rate_limit_error", "upstream is busy")
		return
	}
	if r.Header.Get("Last-Event-ID") != "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the page must not send Last-Event-ID on a POST")
		return
	}

	p.mu.Lock()
	p.posts = append(p.posts, key)
	s, exists := p.streams[key]
	if !exists {
		now := time.Now()
		s = &fakeStream{key: key, body: string(body), state: "in_progress", gen: 1, changed: make(chan struct{}), created: now, updated: now}
		p.streams[key] = s
		p.wg.Add(1)
		go p.generate(s, prompt)
	}
	p.mu.Unlock()
	if exists && s.body != string(body) {
		writeError(w, http.StatusUnprocessableEntity, "invalid_request_error", "Idempotency-Key reused with another body")
		return
	}

	h := w.Header()
	h.Set("Idempotency-Key", key)
	h.Set("Location", "/v1/streams/"+url.PathEscape(key)+"?token="+fakeToken)
	s.mu.Lock()
	if exists && s.state == "completed" {
		h.Set("Idempotent-Replayed", "true")
	}
	s.mu.Unlock()
	p.follow(w, r, s, 0)
}

func (p *fakeProxy) stream(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("token") != fakeToken {
		writeError(w, http.StatusForbidden, "permission_error", "bad token")
		return
	}
	s := p.stream1(r.PathValue("key"))
	if s == nil {
		writeError(w, http.StatusNotFound, "not_found_error", "no such key")
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		s.mu.Lock()
		status := map[string]any{
			"key": s.key, "state": s.state, "generation": s.gen, "events": len(s.events),
			"created_at": s.created.UTC().Format(time.RFC3339Nano), "updated_at": s.updated.UTC().Format(time.RFC3339Nano),
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(status)
		return
	}

	p.mu.Lock()
	p.resumes = append(p.resumes, r.URL.RawQuery)
	p.mu.Unlock()

	last := r.URL.Query().Get("last_event_id")
	if last == "" {
		last = r.Header.Get("Last-Event-ID")
	}
	from := 0
	s.mu.Lock()
	switch {
	case last == "done" && s.state == "completed": // the id of [DONE]: the end
		from = len(s.events)
	case last != "":
		from = -1
		for i, ev := range s.events {
			if ev.id == last {
				from = i + 1
			}
		}
	}
	atEnd := from == len(s.events) && s.state == "completed"
	s.mu.Unlock()
	switch {
	case from < 0:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "unknown last_event_id "+last)
	case atEnd:
		w.WriteHeader(http.StatusNoContent)
	default:
		p.follow(w, r, s, from)
	}
}

// follow writes the journal of s from index from, then follows it live until
// the end. It varies the wire format on purpose: \r\n and \n line ends,
// comments, data split over several lines, and writes split inside lines.
func (p *fakeProxy) follow(w http.ResponseWriter, r *http.Request, s *fakeStream, from int) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	send := func(raw string) bool {
		// Two writes with a flush in between: the browser can get the
		// halves in separate chunks, maybe inside a UTF-8 character or
		// between \r and \n.
		cut := len(raw) / 2
		if i := strings.IndexByte(raw, '\r'); i >= 0 && len(raw)%2 == 0 {
			cut = i + 1
		}
		for _, part := range []string{raw[:cut], raw[cut:]} {
			if _, err := io.WriteString(w, part); err != nil {
				return false
			}
			if err := rc.Flush(); err != nil {
				return false
			}
		}
		return true
	}
	for i := from; ; {
		s.mu.Lock()
		events := slices.Clone(s.events[i:])
		state := s.state
		changed := s.changed
		s.mu.Unlock()
		for _, ev := range events {
			i++
			if !send(formatEvent(i, ev)) {
				return
			}
		}
		switch {
		case state == "completed":
			send("id: done\ndata: [DONE]\n\n")
			return
		case state == "failed":
			send(`event: error` + "\n" + `data: {"error":{"message":"upstream broke","type":"upstream_error","code":"upstream_failed"}}` + "\n\n")
			return
		case len(events) > 0:
			continue
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

func formatEvent(n int, ev fakeEvent) string {
	nl := "\n"
	if n%2 == 1 {
		nl = "\r\n"
	}
	if ev.kind == "reset" {
		return "id: " + ev.id + nl + "event: reset" + nl + "data: {}" + nl + nl
	}
	chunk, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1, "model": "demo",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": ev.content}, "finish_reason": nil}},
	})
	data := "data: " + string(chunk) + nl
	if n%4 == 0 {
		// The same JSON over two data lines: joined with \n it is still JSON.
		i := strings.Index(string(chunk), `,"`) + 1
		data = "data: " + string(chunk[:i]) + nl + "data:" + string(chunk[i:]) + nl
	}
	out := "id: " + ev.id + nl + data + nl
	if n%3 == 0 {
		out = ": keep-alive" + nl + out
	}
	return out
}

// ---------------------------------------------------------------------------
// The browser test.
// ---------------------------------------------------------------------------

type browser struct {
	*webtest.Browser
	t    *testing.T
	base string
}

func TestPageInBrowser(t *testing.T) {
	if _, err := os.Stat(webtest.DebianChromium); err != nil {
		t.Skipf("no Chromium at %s: %v", webtest.DebianChromium, err)
	}

	fake := newFakeProxy(60 * time.Millisecond)
	srv := httptest.NewServer(fake.handler())
	// Registered before Start's cleanups, so it runs after them: the
	// browser stops before the server closes.
	t.Cleanup(func() {
		srv.Close()
		fake.wg.Wait()
	})

	b := &browser{
		Browser: webtest.Start(t, webtest.Config{
			ExecPath:      webtest.DebianChromium,
			TempDirPrefix: "reprise-web-chromium-",
			StartTimeout:  30 * time.Second,
		}),
		t:    t,
		base: srv.URL,
	}

	t.Run("parser", func(t *testing.T) {
		b.open(t)
		got := evaluate[[]map[string]string](t, b, `(() => {
			const out = [];
			const p = new window.reprise.SSEParser((ev) => out.push({type: ev.type, id: ev.id, data: ev.data}));
			const wire = ": hello\r\nid: a\r\ndata: one\r\ndata:  two\r\n\r\nevent: reset\rid: b\rdata\r\rid: c\ndata: x\n\n" +
				"id: d\ndata: no end";
			// Feed one character at a time: every split point is tested.
			for (const ch of wire) p.push(ch);
			p.end();
			return out;
		})()`)
		want := []map[string]string{
			{"type": "message", "id": "a", "data": "one\n two"},
			{"type": "reset", "id": "b", "data": ""},
			{"type": "message", "id": "c", "data": "x"},
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("parsed %v\nwant %v", got, want)
		}
	})

	t.Run("callsSummary", func(t *testing.T) {
		b.open(t)
		ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
		defer cancel()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`import('/session.js').then(({callsSummary}) => [
			callsSummary({billed: {calls: 1}, saved: {calls: 3, by: {retry: 3}}}),
			callsSummary({billed: {calls: 2}}),
			callsSummary({billed: {completion_tokens: 40, generations: 1}, saved: {by: {replay: 1}}}),
			callsSummary({state: 'in_progress'}),
			callsSummary(null),
		])`, chromedp.EvalAwaitPromise))
		if err != nil {
			b.fail(t, "callsSummary: %v", err)
		}
		want := []string{"calls billed 1, calls saved 3", "calls billed 2, calls saved 0", "", "", ""}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("callsSummary: %q, want %q", got, want)
		}
	})

	full := fakeText(1, fakeEvents)

	t.Run("generate", func(t *testing.T) {
		b.open(t)
		b.click(t, "generate")
		b.waitText(t, "conn", "done", 10*time.Second)
		b.expectText(t, "output", full)
		b.expectText(t, "count", strconv.Itoa(fakeEvents+1)) // and [DONE]
		b.expectText(t, "lastid", "done")                    // the id of [DONE]
		key := b.text(t, "key")
		if len(key) != 36 {
			t.Errorf("#key = %q, want a UUID", key)
		}
		b.expectText(t, "replayed", "false")
		// The status poll shows the journal.
		b.waitText(t, "server-state", "completed", 5*time.Second)
		b.expectText(t, "server-events", strconv.Itoa(fakeEvents))
		b.expectText(t, "server-generation", "1")

		t.Run("replay", func(t *testing.T) {
			b.click(t, "replay")
			b.waitText(t, "conn", "done", 10*time.Second)
			b.expectText(t, "output", full)
			b.expectText(t, "count", strconv.Itoa(fakeEvents+1)) // and [DONE]
			b.expectText(t, "replayed", "true")
			if n := fake.postsFor(key); n != 2 {
				t.Errorf("%d POSTs for the key, want 2", n)
			}
			s := fake.stream1(key)
			s.mu.Lock()
			gen := s.gen
			s.mu.Unlock()
			if gen != 1 {
				t.Errorf("the replay started generation %d", gen)
			}
		})

		t.Run("resume at the end is done (204)", func(t *testing.T) {
			before := len(fake.resumeQueries())
			b.click(t, "resume")
			testutil.Eventually(t, 5*time.Second, "the page to send a resume request", func() bool { return len(fake.resumeQueries()) > before })
			b.waitText(t, "conn", "done", 5*time.Second)
			q := fake.resumeQueries()
			if len(q) != before+1 {
				t.Fatalf("%d resume requests, want 1", len(q)-before)
			}
			if want := "token=" + fakeToken + "&last_event_id=done"; q[len(q)-1] != want {
				t.Errorf("resume query %q, want %q", q[len(q)-1], want)
			}
			b.expectText(t, "output", full)
			if msg := b.text(t, "error"); msg != "" {
				t.Errorf("#error = %q", msg)
			}
		})
	})

	t.Run("drop and resume", func(t *testing.T) {
		b.open(t)
		b.click(t, "generate")
		b.waitJS(t, `+document.getElementById('count').textContent >= 3`, 5*time.Second)
		b.click(t, "drop")
		b.expectText(t, "conn", "dropped")
		atDrop := b.text(t, "output")
		lastID := b.text(t, "lastid")
		key := b.text(t, "key")

		// The server keeps generating; the page gets nothing meanwhile.
		s := fake.stream1(key)
		testutil.Eventually(t, 5*time.Second, "the fake proxy to generate 12 events after the drop", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return len(s.events) >= 12
		})
		if got := b.text(t, "output"); got != atDrop {
			t.Fatalf("the output changed after the drop: %q -> %q", atDrop, got)
		}
		if n, _ := strconv.Atoi(lastID); n < 3 || n >= fakeEvents || !strings.HasPrefix(full, atDrop) || atDrop != fakeText(1, n) {
			t.Fatalf("at the drop: last id %q, output %q", lastID, atDrop)
		}

		b.click(t, "resume")
		b.waitText(t, "conn", "done", 10*time.Second)
		b.expectText(t, "output", full)
		b.expectText(t, "count", strconv.Itoa(fakeEvents+1)) // and [DONE]
		b.expectText(t, "lastid", "done")                    // the id of [DONE]
		q := fake.resumeQueries()
		if want := "token=" + fakeToken + "&last_event_id=" + lastID; !slices.Contains(q, want) {
			t.Errorf("resume queries %q, want one %q", q, want)
		}
		if n := fake.postsFor(key); n != 1 {
			t.Errorf("%d POSTs for the key, want 1", n)
		}
	})

	t.Run("auto-resume", func(t *testing.T) {
		b.open(t)
		b.click(t, "autoresume")
		b.click(t, "generate")
		b.waitJS(t, `+document.getElementById('count').textContent >= 2`, 5*time.Second)
		b.click(t, "drop")
		b.expectText(t, "conn", "dropped")
		b.waitText(t, "conn", "done", 10*time.Second)
		b.expectText(t, "output", full)
		b.expectText(t, "count", strconv.Itoa(fakeEvents+1)) // and [DONE]
	})

	t.Run("duplicates are skipped", func(t *testing.T) {
		// Resume from an older id than the page has: the server sends
		// events the page already applied, and the page must skip them.
		b.open(t)
		b.click(t, "generate")
		b.waitJS(t, `+document.getElementById('count').textContent >= 6`, 5*time.Second)
		b.click(t, "drop")
		evaluate[chromedp.Void](t, b, `window.reprise.state.lastId = '2'`)
		b.click(t, "resume")
		b.waitText(t, "conn", "done", 10*time.Second)
		b.expectText(t, "output", full)
		b.expectText(t, "count", strconv.Itoa(fakeEvents+1)) // and [DONE]
		if n, _ := strconv.Atoi(b.text(t, "dupes")); n < 3 {
			t.Errorf("#dupes = %d, want at least 3", n)
		}
	})

	t.Run("reset", func(t *testing.T) {
		b.open(t)
		b.setPrompt(t, "RESET please")
		b.click(t, "generate")
		b.waitText(t, "conn", "done", 10*time.Second)
		b.expectText(t, "output", fakeText(2, 8))
		b.expectText(t, "count", "9") // 8 events of generation 2 and [DONE]
	})

	t.Run("upstream error", func(t *testing.T) {
		b.open(t)
		b.setPrompt(t, "FAIL please")
		b.click(t, "generate")
		b.waitText(t, "conn", "error", 5*time.Second)
		b.expectText(t, "output", fakeText(1, 3))
		if msg := b.text(t, "error"); !strings.Contains(msg, "upstream broke") {
			t.Errorf("#error = %q", msg)
		}
	})

	t.Run("HTTP error", func(t *testing.T) {
		b.open(t)
		b.setPrompt(t, "BUSY")
		b.click(t, "generate")
		b.waitText(t, "conn", "error", 5*time.Second)
		if msg := b.text(t, "error"); !strings.Contains(msg, "429") || !strings.Contains(msg, "upstream is busy") {
			t.Errorf("#error = %q", msg)
		}
	})

	if t.Failed() {
		b.DumpConsole(t)
	}
	// Leave the page so that its streams and polls stop before the server
	// closes.
	_ = b.run(t, 5*time.Second, chromedp.Navigate("about:blank"))
}

func evaluate[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.fail(t, "evaluate %s: %v", js, err)
	}
	return v
}

func (b *browser) run(t *testing.T, d time.Duration, steps ...chromedp.Action[chromedp.Void]) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, d)
	defer cancel()
	return chromedp.Do(ctx, steps...)
}

func (b *browser) fail(t *testing.T, format string, args ...any) {
	t.Helper()
	b.Dump(t, b.Ctx, "conn", "count", "lastid", "error", "output")
	t.Fatalf(format, args...)
}

func (b *browser) open(t *testing.T) {
	t.Helper()
	if err := b.run(t, 10*time.Second,
		chromedp.Navigate(b.base+"/"),
		chromedp.WaitVisible(chromedp.ID("generate")),
	); err != nil {
		b.fail(t, "open the page: %v", err)
	}
}

func (b *browser) click(t *testing.T, id string) {
	t.Helper()
	b.waitJS(t, fmt.Sprintf(`!document.getElementById(%q).disabled`, id), 5*time.Second)
	if err := b.run(t, 5*time.Second, chromedp.Click(chromedp.ID(id))); err != nil {
		b.fail(t, "click #%s: %v", id, err)
	}
}

func (b *browser) setPrompt(t *testing.T, text string) {
	t.Helper()
	if err := b.run(t, 5*time.Second, chromedp.SetValue(chromedp.ID("prompt"), text)); err != nil {
		b.fail(t, "set the prompt: %v", err)
	}
}

func (b *browser) text(t *testing.T, id string) string {
	t.Helper()
	return evaluate[string](t, b, fmt.Sprintf(`document.getElementById(%q).textContent`, id))
}

func (b *browser) expectText(t *testing.T, id, want string) {
	t.Helper()
	if got := b.text(t, id); got != want {
		b.fail(t, "#%s = %q, want %q", id, got, want)
	}
}

func (b *browser) waitJS(t *testing.T, predicate string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, d)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[bool](predicate,
		chromedp.WithPollingInterval(15*time.Millisecond), chromedp.WithPollingTimeout(0)))
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("not true after %v", d)
		}
		b.fail(t, "wait for %s: %v", predicate, err)
	}
}

func (b *browser) waitText(t *testing.T, id, want string, d time.Duration) {
	t.Helper()
	b.waitJS(t, fmt.Sprintf(`document.getElementById(%q).textContent === %q`, id, want), d)
}
