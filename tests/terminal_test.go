package tests

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/chromedp/chromedp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/tests/webtest"
)

// A stream is completed only by its format's terminal event: whatever else
// a hostile upstream answers a streaming request with is no result, with
// upstream_bad_response, and the key generates afresh.

// hostile is an upstream that answers each request as the case its body
// names ("case=<name>" in the prompt), counting the calls per path and
// case.
type hostile struct {
	cases map[string]http.HandlerFunc

	mu    sync.Mutex
	calls map[string]int
}

var caseName = regexp.MustCompile(`case=([a-z0-9_-]+)`)

func newHostile(cases map[string]http.HandlerFunc) *hostile {
	return &hostile{cases: cases, calls: map[string]int{}}
}

func (h *hostile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	m := caseName.FindSubmatch(b)
	if m == nil {
		http.Error(w, "no case", http.StatusBadRequest)
		return
	}
	name := string(m[1])
	h.mu.Lock()
	h.calls[r.URL.Path+" "+name]++
	h.mu.Unlock()
	fn, ok := h.cases[name]
	if !ok {
		http.Error(w, "unknown case "+name, http.StatusBadRequest)
		return
	}
	fn(w, r)
}

// Calls is how many requests the upstream got at path for case name.
func (h *hostile) Calls(path, name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[path+" "+name]
}

// streamFormat is a format's streaming request for a case, and how its
// callers' errors are shaped.
type streamFormat struct {
	name      string
	path      string
	body      func(caseName string) string
	anthropic bool
}

var streamFormats = []streamFormat{
	{name: "chat", path: chatPath, body: func(c string) string { return chatBody("case="+c, true) }},
	{name: "responses", path: responsesPath, body: func(c string) string { return responsesBody("case="+c, true) }},
	{name: "messages", path: messagesPath, anthropic: true, body: func(c string) string {
		return `{"model":"mock-1","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"case=` + c + `"}]}`
	}},
}

// parseError reads an error body in f's shape: its type and code.
func (f streamFormat) parseError(tb testing.TB, body string) (typ, code, msg string) {
	tb.Helper()
	if !f.anthropic {
		x := testutil.ParseAPIError(tb, body)
		return x.Type, x.Code, x.Message
	}
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Type != "error" || v.Error.Type == "" || v.Error.Message == "" {
		tb.Fatalf("%q is not an Anthropic error", body)
	}
	return v.Error.Type, v.Error.Code, v.Error.Message
}

// expectNoResult checks that a streaming request of format f for case c is
// no result: its client gets 502 code (in f's shape) instead of what the
// upstream answered, a reader of its Location the same error as an event,
// the key is failed with code, and the same key generates afresh (the
// upstream is called again).
func expectNoResult(t *testing.T, e *env, up *hostile, f streamFormat, c, code string) {
	t.Helper()
	key := "k-" + f.name + "-" + c
	for try := 1; try <= 2; try++ {
		// No redirect is followed: what reprise answers is what is checked.
		req, _ := http.NewRequestWithContext(waitCtx(t, testutil.RequestTimeout), "POST", e.URL+f.path, strings.NewReader(f.body(c)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readBody(t, resp)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s %s try %d: %d %s %q, want 502 %s", f.name, c, try, resp.StatusCode, resp.Header.Get("Content-Type"), body, code)
		}
		typ, got, msg := f.parseError(t, body)
		if got != code || msg == "" || (f.anthropic && typ != "api_error") {
			t.Fatalf("%s %s try %d: error %s %s %q, want %s", f.name, c, try, typ, got, msg, code)
		}
		st := waitState(t, e, key, "failed")
		if st.Error != code || st.Generation != try {
			t.Fatalf("%s %s try %d: status %+v, want failed %s in generation %d", f.name, c, try, st, code, try)
		}
		evs := readEvents(t, do(t, "GET", e.URL+resp.Header.Get("Location"), ""), -1)
		if last := lastEvent(t, evs); len(evs) != 1 || last.Type != "error" {
			t.Fatalf("%s %s try %d: the Location's reader got %+v, want one event: error", f.name, c, try, evs)
		} else if _, got, _ := f.parseError(t, last.Data); got != code {
			t.Fatalf("%s %s try %d: the Location's reader got %s, want %s", f.name, c, try, got, code)
		}
		if n := up.Calls(f.path, c); n != try {
			t.Fatalf("%s %s try %d: %d upstream calls, want %d (a failed key generates afresh)", f.name, c, try, n, try)
		}
	}
}

// TestUpstreamRedirectIsNoAnswer: a 3xx answering a streaming request is
// neither passed on (its status would make the client follow reprise's own
// Location) nor a result: 502 upstream_bad_response, and the key generates
// afresh.
func TestUpstreamRedirectIsNoAnswer(t *testing.T) {
	t.Parallel()
	redirect := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		}
	}
	up := newHostile(map[string]http.HandlerFunc{"r301": redirect(301), "r302": redirect(302), "r303": redirect(303), "r307": redirect(307), "r308": redirect(308)})
	e := newEnv(t, withUpstream(up))
	for _, f := range streamFormats {
		for _, c := range []string{"r301", "r302", "r303", "r307", "r308"} {
			expectNoResult(t, e, up, f, c, "upstream_bad_response")
		}
	}
}

// TestUpstreamAnswersNoStream: a 2xx that is neither an event stream nor
// the format's whole answer (the JSON object of an upstream that ignored
// "stream") answering a streaming request — an HTML page, an empty body, a
// 204, no Content-Type, plain text, "JSON" that is not — is no result:
// 502 upstream_bad_response in the format's shape, never stored and
// replayed as the completed result. What the SDKs see: an API error, not
// an empty stream that succeeded.
func TestUpstreamAnswersNoStream(t *testing.T) {
	t.Parallel()
	answer := func(status int, contentType, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if contentType == "" {
				w.Header()["Content-Type"] = nil // no sniffing either
			} else {
				w.Header().Set("Content-Type", contentType)
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	cases := map[string]http.HandlerFunc{
		"html":      answer(200, "text/html; charset=utf-8", "<html><body>Welcome to nginx!</body></html>"),
		"empty":     answer(200, "application/json", ""),
		"nocontent": answer(204, "", ""),
		"sse204":    answer(204, "text/event-stream", ""),
		"untyped":   answer(200, "", `{"id":"x","object":"chat.completion"}`),
		"text":      answer(200, "text/plain", "OK"),
		"notjson":   answer(200, "application/json", "<html>not json</html>"),
		"array":     answer(201, "application/json", `[1,2,3]`),
	}
	up := newHostile(cases)
	e := newEnv(t, withUpstream(up))
	for _, f := range streamFormats {
		for c := range cases {
			expectNoResult(t, e, up, f, c, "upstream_bad_response")
		}
	}

	oc := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	s := oc.Chat.Completions.NewStreaming(waitCtx(t, testutil.RequestTimeout), openai.ChatCompletionNewParams{
		Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("case=html")},
	}, option.WithHeader("Idempotency-Key", "k-sdk-html"))
	for s.Next() {
		t.Errorf("openai-go got a chunk from an HTML answer: %+v", s.Current())
	}
	var oerr *openai.Error
	if !errors.As(s.Err(), &oerr) || oerr.StatusCode != http.StatusBadGateway || oerr.Code != "upstream_bad_response" {
		t.Errorf("openai-go: %v, want a 502 upstream_bad_response API error", s.Err())
	}
	ac := anthropic.NewClient(aoption.WithBaseURL(e.URL), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0))
	as := ac.Messages.NewStreaming(waitCtx(t, testutil.RequestTimeout), anthropic.MessageNewParams{
		Model: "mock-1", MaxTokens: 64, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("case=empty"))},
	}, aoption.WithHeader("Idempotency-Key", "k-sdk-empty"))
	for as.Next() {
		t.Errorf("anthropic-sdk-go got an event from an empty answer: %+v", as.Current())
	}
	var aerr *anthropic.Error
	if !errors.As(as.Err(), &aerr) || aerr.StatusCode != http.StatusBadGateway || !strings.Contains(aerr.RawJSON(), `"type":"api_error"`) {
		t.Errorf("anthropic-sdk-go: %v, want a 502 api_error", as.Err())
	}
}

// sseAnswer is an upstream handler that streams blocks, each an SSE event
// without its blank line, flushed one by one.
func sseAnswer(blocks ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, b := range blocks {
			_, _ = io.WriteString(w, b+"\n\n")
			f.Flush()
		}
	}
}

// TestUpstreamEventsNamedAsReprises: an upstream event named as one of
// reprise's control events can never be mistaken for one. An event named
// reset or reprise.* anywhere, or error with data that is no error (e.g.
// data: [DONE], which counted as completed), fails the generation with
// upstream_bad_response; an error event that carries an error (Anthropic's
// own mid-stream error, or an OpenAI-shaped one) is the upstream's failure,
// passed on as reprise's error event with the upstream's code. Either way
// no result: the readers see the events before it, then reprise's one
// error event and no terminal event; the key generates afresh.
func TestUpstreamEventsNamedAsReprises(t *testing.T) {
	t.Parallel()
	const (
		chunk = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"half"}}]}`
		start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"mock-1\",\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}"
		stop  = "event: message_stop\ndata: {\"type\":\"message_stop\"}"
		rdone = "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{\"id\":\"r\"}}"
	)
	type tc struct {
		f      streamFormat
		blocks []string
		code   string // the error the stream ends with
	}
	chat, responses, messages := streamFormats[0], streamFormats[1], streamFormats[2]
	cases := map[string]tc{
		"chat-reset":    {chat, []string{chunk, "event: reset\ndata: {\"generation\":2}", "data: [DONE]"}, "upstream_bad_response"},
		"chat-errdone":  {chat, []string{chunk, "event: error\ndata: [DONE]"}, "upstream_bad_response"},
		"chat-body":     {chat, []string{chunk, "event: reprise.body\ndata: {\"x\":1}", "data: [DONE]"}, "upstream_bad_response"},
		"chat-errchunk": {chat, []string{chunk, "event: error\n" + chunk, "data: [DONE]"}, "upstream_bad_response"},
		"chat-errobj": {chat, []string{chunk, "event: error\ndata: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\",\"code\":\"overloaded\"}}",
			"data: [DONE]"}, "upstream:overloaded"}, // reprise's own code, kept apart
		"responses-reset": {responses, []string{"event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"r\"}}",
			"event: reset\ndata: {\"type\":\"response.created\"}", rdone}, "upstream_bad_response"},
		"messages-reset": {messages, []string{start, "event: reset\ndata: {\"type\":\"ping\"}", stop}, "upstream_bad_response"},
		"messages-errobj": {messages, []string{start, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}",
			stop}, "overloaded_error"},
	}
	handlers := map[string]http.HandlerFunc{}
	for name, c := range cases {
		handlers[name] = sseAnswer(c.blocks...)
	}
	up := newHostile(handlers)
	e := newEnv(t, withUpstream(up))
	for name, c := range cases {
		key := "k-" + name
		for try := 1; try <= 2; try++ {
			check := func(who string, evs []event) {
				t.Helper()
				last := lastEvent(t, evs)
				if len(evs) != 2 || last.Type != "error" {
					t.Fatalf("%s try %d: the %s got %+v, want the first event, then reprise's event: error", name, try, who, evs)
				}
				if evs[0].Type == "error" || evs[0].Type == "reset" {
					t.Fatalf("%s try %d: the %s got an upstream event named %s", name, try, who, evs[0].Type)
				}
				if _, code, _ := c.f.parseError(t, last.Data); code != c.code {
					t.Fatalf("%s try %d: the %s's error is %s (%s), want %s", name, try, who, code, last.Data, c.code)
				}
			}
			resp := do(t, "POST", e.URL+c.f.path, c.f.body(name), "Idempotency-Key", key)
			check("client", readEvents(t, resp, -1))
			waitState(t, e, key, "failed")
			check("reader", readEvents(t, do(t, "GET", e.URL+resp.Header.Get("Location"), ""), -1))
			if st := waitState(t, e, key, "failed"); st.Error != c.code || st.Generation != try {
				t.Fatalf("%s try %d: status %+v, want failed %s in generation %d", name, try, st, c.code, try)
			}
			if n := up.Calls(c.f.path, name); n != try {
				t.Fatalf("%s try %d: %d upstream calls, want %d (a failed key generates afresh)", name, try, n, try)
			}
		}
	}

	// What openai-go sees of an upstream's event: reset: the stream fails,
	// it does not complete with the reset read as a chunk.
	oc := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	s := oc.Chat.Completions.NewStreaming(waitCtx(t, testutil.RequestTimeout), openai.ChatCompletionNewParams{
		Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("case=chat-reset")},
	}, option.WithHeader("Idempotency-Key", "k-sdk-reset"))
	chunks := 0
	for s.Next() {
		chunks++
	}
	if err := s.Err(); chunks != 1 || err == nil || !strings.Contains(err.Error(), "upstream_bad_response") {
		t.Errorf("openai-go: %d chunks, then %v; want 1 chunk, then the upstream_bad_response error", chunks, err)
	}
}

// dispatched is what an EventSource dispatches of an event stream, by the
// WHATWG algorithm (only an event with a data line is dispatched; its type
// defaults to message): the reference for what a browser sees.
func dispatched(raw string) []event {
	var out []event
	typ, data, id := "", "", ""
	lines := strings.Split(strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(raw), "\n")
	for _, line := range lines {
		if line == "" {
			if data != "" {
				if typ == "" {
					typ = "message"
				}
				out = append(out, event{ID: id, Type: typ, Data: strings.TrimSuffix(data, "\n")})
			}
			typ, data = "", ""
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			typ = value
		case "data":
			data += value + "\n"
		case "id":
			id = value
		}
	}
	return out
}

// TestEmptyDataEvents: an upstream event with empty data (data: with
// nothing after it), or with data that ends with an empty line, is re-sent
// as it came — live and replayed — and a browser's EventSource dispatches
// it with the same data (an event written without a data line is never
// dispatched by a browser).
func TestEmptyDataEvents(t *testing.T) {
	t.Parallel()
	const chunk = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}`
	up := newHostile(map[string]http.HandlerFunc{
		"empty": sseAnswer("data: "+chunk, "data:", "event: keepalive\ndata:", "event: keepalive\ndata: x\ndata:", "data: [DONE]"),
	})
	e := newEnv(t, withUpstream(up))
	want := []event{{Type: "message", Data: chunk}, {Type: "message"}, {Type: "keepalive"}, {Type: "keepalive", Data: "x\n"}, {Type: "message", Data: "[DONE]"}}
	same := func(who string, got []event) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s dispatched %d events %+v, want %d %+v", who, len(got), got, len(want), want)
		}
		for i := range want {
			if got[i].Type != want[i].Type || got[i].Data != want[i].Data {
				t.Fatalf("%s: event %d is %s %q, want %s %q", who, i+1, got[i].Type, got[i].Data, want[i].Type, want[i].Data)
			}
		}
	}
	body := chatBody("case=empty", true)
	resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-empty-data")
	loc := resp.Header.Get("Location")
	same("the live stream", dispatched(readBody(t, resp)))
	waitState(t, e, "k-empty-data", "completed")
	resp = do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-empty-data")
	if resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the second request was no replay")
	}
	same("the replay", dispatched(readBody(t, resp)))
	if n := up.Calls(chatPath, "empty"); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}

	if testing.Short() {
		t.Skip("browser part skipped in -short mode")
	}
	chromium := webtest.FindChromium()
	if chromium == "" {
		t.Skip("no Chromium: the browser part is skipped")
	}
	b := webtest.Start(t, webtest.Config{ExecPath: chromium, TempDirPrefix: "reprise-tests-chromium-", StartTimeout: 20 * time.Second})
	ctx, cancel := context.WithTimeout(b.Ctx, 20*time.Second)
	defer cancel()
	// The Location's capability lets EventSource read without headers;
	// the page is on the proxy's origin.
	js := `(() => {
		window.got = [];
		const es = new EventSource(` + strconv.Quote(loc) + `);
		const on = (ev) => {
			window.got.push({Type: ev.type, Data: ev.data});
			if (ev.data === '[DONE]') { es.close(); window.done = true; }
		};
		es.onmessage = on;
		es.addEventListener('keepalive', on);
	})()`
	if err := chromedp.Do(ctx, chromedp.Navigate(e.URL+"/healthz"), chromedp.Evaluate[chromedp.Void](js)); err != nil {
		t.Fatalf("open the EventSource: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`window.done === true`, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("the browser did not get [DONE]: %v", err)
	}
	seen, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.got)`))
	if err != nil {
		t.Fatal(err)
	}
	var got []event
	if err := json.Unmarshal([]byte(seen), &got); err != nil {
		t.Fatalf("%s: %v", seen, err)
	}
	same("the browser", got)
}

// TestAttachToWholeAnswer: when the upstream ignores "stream" and answers
// a streaming request with its JSON object, a duplicate that attaches while
// the generation runs — on the owner and on another instance — and a
// reader of the Location get the same answer as the first client (the
// JSON, not its stored chunks as events), and the upstream is called once.
func TestAttachToWholeAnswer(t *testing.T) {
	t.Parallel()
	const answer = `{"id":"chatcmpl-whole","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"whole"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`
	release := make(chan struct{})
	var calls atomic.Int32
	e := newEnv(t, withNATSPort(), withUpstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answer)
	})))
	regB := prometheus.NewRegistry()
	b := startInstance(t, "B", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{replicas: 1, configure: func(c *proxy.Config) { c.Registerer = regB }})

	type got struct {
		who, ct, body string
		status        int
	}
	answers := make(chan got, 4)
	ctx := waitCtx(t, 30*time.Second)
	ask := func(who, method, url, body string) {
		go func() {
			resp, err := send(ctx, method, url, body, "Idempotency-Key", "k-whole-attach")
			if err != nil {
				answers <- got{who: who, body: err.Error()}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- got{who: who, status: resp.StatusCode, ct: resp.Header.Get("Content-Type"), body: string(b)}
		}()
	}
	body := chatBody("an upstream that ignores stream, slowly", true)
	ask("the first client", "POST", e.URL+chatPath, body)
	pollUntil(t, 10*time.Second, "the upstream called", func() bool { return calls.Load() == 1 })
	ask("a reader of the Location on B", "GET", b.URL+"/v1/streams/k-whole-attach", "")
	ask("an attach on the owner", "POST", e.URL+chatPath, body)
	ask("an attach on B", "POST", b.URL+chatPath, body)
	pollUntil(t, 10*time.Second, "both duplicates attached", func() bool {
		return metric(t, e, "reprise_requests_total", "attach") == 1 && gathered(t, regB, "reprise_requests_total", "attach") == 1
	})
	close(release)
	for range 4 {
		select {
		case a := <-answers:
			if a.status != http.StatusOK || a.ct != "application/json" || a.body != answer {
				t.Errorf("%s got %d %s %q, want the upstream's JSON answer", a.who, a.status, a.ct, a.body)
			}
		case <-ctx.Done():
			t.Fatal("not every request was answered")
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}

// TestAttachToUnaskedStream: the mirror of TestAttachToWholeAnswer. An
// upstream that answers a request asking for no stream with an event
// stream: a duplicate that attaches before it answered, or while its
// stream runs — on the owner and on another instance — gets the events
// the first client got (not an empty body), and the upstream is called
// once.
func TestAttachToUnaskedStream(t *testing.T) {
	t.Parallel()
	headers, rest := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	e := newEnv(t, withNATSPort(), withUpstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		for _, gate := range []chan struct{}{headers, rest} {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			if gate == headers {
				_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"one"}}]}`+"\n\n")
			} else {
				_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":" two"}}]}`+"\n\ndata: [DONE]\n\n")
			}
			w.(http.Flusher).Flush()
		}
	})))
	regB := prometheus.NewRegistry()
	b := startInstance(t, "B", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{replicas: 1, configure: func(c *proxy.Config) { c.Registerer = regB }})
	attached := func(n float64) func() bool {
		return func() bool {
			return metric(t, e, "reprise_requests_total", "attach") == n && gathered(t, regB, "reprise_requests_total", "attach") == n
		}
	}

	type got struct {
		who, ct, raw string
		err          error
	}
	answers := make(chan got, 5)
	ctx := waitCtx(t, 30*time.Second)
	body := chatBody("an upstream that streams unasked", false)
	ask := func(who, url string) {
		go func() {
			resp, err := send(ctx, "POST", url+chatPath, body, "Idempotency-Key", "k-unasked-stream")
			if err != nil {
				answers <- got{who: who, err: err}
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			answers <- got{who: who, ct: resp.Header.Get("Content-Type"), raw: string(raw), err: err}
		}()
	}
	ask("the first client", e.URL)
	pollUntil(t, 10*time.Second, "the upstream called", func() bool { return calls.Load() == 1 })
	ask("an attach on the owner before the answer", e.URL)
	ask("an attach on B before the answer", b.URL)
	pollUntil(t, 10*time.Second, "the first duplicates attached", attached(1))
	close(headers)
	// The first client's stream has begun once the owner's tail has an
	// event: later duplicates attach to a running stream.
	pollUntil(t, 10*time.Second, "the stream begun", func() bool {
		st, code := testutil.GetStatus(t, e.URL, "k-unasked-stream")
		return code == http.StatusOK && st.Events >= 1
	})
	ask("an attach on the owner while it streams", e.URL)
	ask("an attach on B while it streams", b.URL)
	pollUntil(t, 10*time.Second, "the later duplicates attached", attached(2))
	close(rest)
	got5 := map[string]got{}
	for range 5 {
		select {
		case a := <-answers:
			got5[a.who] = a
		case <-ctx.Done():
			t.Fatal("not every request was answered")
		}
	}
	first := got5["the first client"]
	want := dispatched(first.raw)
	if first.err != nil || first.ct != "text/event-stream" || len(want) != 3 || want[2].Data != "[DONE]" {
		t.Fatalf("the first client got %s %q (%v), want two chunks and [DONE]", first.ct, first.raw, first.err)
	}
	for who, a := range got5 {
		evs := dispatched(a.raw)
		if a.err != nil || a.ct != first.ct || len(evs) != len(want) {
			t.Errorf("%s got %s %q (%v), want the first client's %d events", who, a.ct, a.raw, a.err, len(want))
			continue
		}
		for i := range want {
			if evs[i] != want[i] {
				t.Errorf("%s: event %d is %+v, want %+v", who, i+1, evs[i], want[i])
			}
		}
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}
