package tests

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// recorder is an upstream that records the path, credential and body size
// of every request it gets, and answers each with an empty JSON list.
type recorder struct {
	mu   sync.Mutex
	seen []seenRequest
}

type seenRequest struct {
	path, rawPath, key string
	bytes              int64
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, _ := io.Copy(io.Discard, r.Body)
	rc.mu.Lock()
	rc.seen = append(rc.seen, seenRequest{r.URL.Path, r.URL.EscapedPath(), r.Header.Get("Authorization") + r.Header.Get("X-Api-Key"), n})
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
}

// take returns what the upstream got since the last take.
func (rc *recorder) take() []seenRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := rc.seen
	rc.seen = nil
	return out
}

// TestPathConfined: no request leaves /v1/ or the upstream's version root:
// a dot segment (encoded or not, any case), an encoded slash or backslash,
// or a path parameter (;, raw or encoded) is refused with 400 invalid_path in the caller's shape, keyed or not, and
// nothing reaches the upstream (which would get the operator's key);
// ordinary paths, encoded characters included, still pass under the base.
func TestPathConfined(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := newEnv(t, withUpstream(rec), withConfig(func(c *proxy.Config) {
		c.Upstream = &url.URL{Scheme: c.Upstream.Scheme, Host: c.Upstream.Host, Path: "/gw/openai"}
		c.Auth.Mode, c.Auth.ProxyKeys, c.Auth.UpstreamKey = auth.Static, []string{"pk-1"}, "sk-operator"
	}))
	bad := []struct{ name, method, path string }{
		{"encoded dots", "POST", "/v1/%2e%2e/%2e%2e/%2e%2e/etc/escape"},
		{"encoded slashes", "POST", "/v1/x/..%2f..%2fescape2"},
		{"upper case", "GET", "/v1/%2E%2E/metrics"},
		{"mixed case", "GET", "/v1/%2e%2E/%2E%2e/x"},
		{"half encoded", "GET", "/v1/.%2e/x"},
		{"single dot", "GET", "/v1/%2e/models"},
		{"encoded backslash", "GET", "/v1/x%5c..%5c..%5cadmin"},
		{"encoded slash alone", "GET", "/v1/files%2Fx"},
		{"double encoded", "GET", "/v1/%252e%252e/%252e%252e/admin"},
		{"under a format's path", "POST", "/v1/chat/completions/%2e%2e/%2e%2e/admin"},
		{"outside v1", "GET", "/%76%31/%2e%2e/admin"},
		{"through reprise's namespace", "POST", "/v1/streams%2F..%2F..%2Fadmin"},
		{"reprise's namespace encoded", "POST", "/v1/stream%73/%2e%2e/%2e%2e/admin"},
		{"path parameter dot dot", "GET", "/v1/..;/admin"},
		{"encoded path parameter", "GET", "/v1/models%3B/..%3B/admin"},
		{"path parameter", "GET", "/v1/models;x=1"},
	}
	for _, c := range bad {
		for _, key := range []string{"", "k-confine-" + strings.ReplaceAll(c.name, " ", "-")} {
			h := []string{"Authorization", "Bearer pk-1", "Content-Type", "application/json"}
			if key != "" {
				h = append(h, "Idempotency-Key", key)
			}
			resp := do(t, c.method, e.URL+c.path, `{"model":"m","input":"x"}`, h...)
			testutil.ExpectAPIError(t, resp, http.StatusBadRequest, "invalid_path")
			if resp.Header.Get("X-Should-Retry") != "false" {
				t.Errorf("%s (key %q): X-Should-Retry %q, want false", c.name, key, resp.Header.Get("X-Should-Retry"))
			}
		}
		if got := rec.take(); len(got) != 0 {
			t.Errorf("%s: %s %s reached the upstream as %+v", c.name, c.method, c.path, got)
		}
	}
	// An Anthropic caller's path gets Anthropic's shape.
	resp := do(t, "POST", e.URL+"/v1/messages/%2e%2e/%2e%2e/admin", `{}`, "Authorization", "Bearer pk-1", "Content-Type", "application/json")
	if typ, code := anthropicError(t, resp); resp.StatusCode != http.StatusBadRequest || typ != "invalid_request_error" || code != "invalid_path" {
		t.Errorf("/v1/messages/%%2e%%2e/...: %d type %q code %q, want 400 invalid_path", resp.StatusCode, typ, code)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("/v1/messages/%%2e%%2e/... reached the upstream as %+v", got)
	}

	// What is ordinary passes, under the base, with the operator's key.
	for _, p := range []string{"/v1/models", "/v1/files/file-abc/content", "/v1/models/ft%3Agpt-4o%3Aorg", "/v1/files/a.b..c/x."} {
		resp := do(t, "GET", e.URL+p, "", "Authorization", "Bearer pk-1")
		if body := readBody(t, resp); resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, resp.StatusCode, body)
		}
		got := rec.take()
		want, _ := url.PathUnescape(p)
		want = "/gw/openai" + strings.TrimPrefix(want, "/v1") // the base is the version root
		if len(got) != 1 || got[0].path != want || got[0].key != "Bearer sk-operator" {
			t.Errorf("GET %s reached the upstream as %+v, want %s with the operator's key", p, got, want)
		}
	}
}

// TestPathConfinedRoutes: with named upstreams a path is routed by its
// cleaned form: a dot segment under a route's prefix is refused, not sent
// to that route with its key.
func TestPathConfinedRoutes(t *testing.T) {
	t.Parallel()
	claude, gpt := &recorder{}, &recorder{}
	cs, gs := serveUpstream(t, claude), serveUpstream(t, gpt)
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys = auth.Static, []string{"pk-1"}
		c.Routes = []proxy.Route{
			{Name: "claude", URL: &url.URL{Scheme: cs.Scheme, Host: cs.Host, Path: "/anthropic/v1"}, Key: "sk-claude", Paths: []string{"/v1/messages"}},
			{Name: "gpt", URL: gs, Key: "sk-gpt"},
		}
	}))
	resp := do(t, "POST", e.URL+"/v1/messages/%2e%2e/%2e%2e/admin", `{}`, "Authorization", "Bearer pk-1", "Content-Type", "application/json")
	if body := readBody(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "invalid_path") {
		t.Errorf("/v1/messages/%%2e%%2e/%%2e%%2e/admin: %d %s, want 400 invalid_path", resp.StatusCode, body)
	}
	if got := append(claude.take(), gpt.take()...); len(got) != 0 {
		t.Errorf("/v1/messages/%%2e%%2e/%%2e%%2e/admin reached an upstream as %+v", got)
	}
	resp = do(t, "POST", e.URL+"/v1/messages/count_tokens", `{}`, "Authorization", "Bearer pk-1", "Content-Type", "application/json")
	readBody(t, resp)
	if got := claude.take(); len(got) != 1 || got[0].path != "/anthropic/v1/messages/count_tokens" || got[0].key != "sk-claude" {
		t.Errorf("count_tokens reached claude as %+v", got)
	}
}

// serveUpstream serves h on a loopback port for the test and returns its URL.
func serveUpstream(tb testing.TB, h http.Handler) *url.URL {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	tb.Cleanup(func() { _ = srv.Close() })
	return &url.URL{Scheme: "http", Host: ln.Addr().String()}
}

// TestPassThroughNoRoute: with named upstreams, a pass-through path no
// route serves is a configuration error (404 no_upstream, not to be
// retried), not a call to the first upstream with its key.
func TestPassThroughNoRoute(t *testing.T) {
	t.Parallel()
	claude, chat := &recorder{}, &recorder{}
	cs, gs := serveUpstream(t, claude), serveUpstream(t, chat)
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys = auth.Static, []string{"pk-1"}
		c.Routes = []proxy.Route{
			{Name: "claude", URL: cs, Key: "sk-claude", Paths: []string{"/v1/messages"}},
			{Name: "chat", URL: gs, Key: "sk-chat", Paths: []string{"/v1/chat/"}},
		}
	}))
	for _, m := range []string{"GET", "POST"} {
		resp := do(t, m, e.URL+"/v1/models", "", "Authorization", "Bearer pk-1")
		testutil.ExpectAPIError(t, resp, http.StatusNotFound, "no_upstream")
		if resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Reprise-Upstream") != "" {
			t.Errorf("%s /v1/models: X-Should-Retry %q, Reprise-Upstream %q; want false and none", m,
				resp.Header.Get("X-Should-Retry"), resp.Header.Get("Reprise-Upstream"))
		}
	}
	if got := append(claude.take(), chat.take()...); len(got) != 0 {
		t.Errorf("a path no route serves reached an upstream as %+v", got)
	}
	resp := do(t, "POST", e.URL+"/v1/messages/count_tokens", `{}`, "Authorization", "Bearer pk-1", "Content-Type", "application/json")
	readBody(t, resp)
	if got := claude.take(); len(got) != 1 || got[0].key != "sk-claude" {
		t.Errorf("count_tokens reached claude as %+v", got)
	}
	// A journaled format no route serves: the same configuration error,
	// streamed or not, keyed or not.
	for _, stream := range []bool{false, true} {
		for _, key := range []string{"", "k-noroute-" + strconv.FormatBool(stream)} {
			h := []string{"Authorization", "Bearer pk-1"}
			if key != "" {
				h = append(h, "Idempotency-Key", key)
			}
			resp := do(t, "POST", e.URL+"/v1/responses", `{"model":"m","input":"hi","stream":`+strconv.FormatBool(stream)+`}`, h...)
			testutil.ExpectAPIError(t, resp, http.StatusNotFound, "no_upstream")
			if resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Reprise-Upstream") != "" {
				t.Errorf("POST /v1/responses (stream %v, key %q): X-Should-Retry %q, Reprise-Upstream %q; want false and none", stream, key,
					resp.Header.Get("X-Should-Retry"), resp.Header.Get("Reprise-Upstream"))
			}
		}
	}
}

// TestPassThroughTooLarge: an unkeyed pass-through over the body limit is
// 413 request_too_large, not to be retried — at once, with nothing sent
// upstream, when its Content-Length says so; when its chunked body runs
// over, once it does — and a malformed chunked body is 400.
func TestPassThroughTooLarge(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := newEnv(t, withUpstream(rec), withConfig(func(c *proxy.Config) { c.HTTP.MaxBody = 1 << 10 }))
	big := strings.Repeat("x", 4<<10)

	// Content-Length over the limit.
	resp := do(t, "POST", e.URL+"/v1/files", big, "Content-Type", "application/octet-stream")
	testutil.ExpectAPIError(t, resp, http.StatusRequestEntityTooLarge, "request_too_large")
	if resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("Content-Length over the limit: X-Should-Retry %q", resp.Header.Get("X-Should-Retry"))
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a body known too large reached the upstream: %+v", got)
	}

	// Chunked, running over.
	ctx := waitCtx(t, testutil.RequestTimeout)
	req, _ := http.NewRequestWithContext(ctx, "POST", e.URL+"/v1/files", io.MultiReader(strings.NewReader(big))) // no length: chunked
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	testutil.ExpectAPIError(t, resp, http.StatusRequestEntityTooLarge, "request_too_large")
	if resp.Header.Get("X-Should-Retry") != "false" {
		t.Errorf("chunked over the limit: X-Should-Retry %q", resp.Header.Get("X-Should-Retry"))
	}
	for _, s := range rec.take() {
		if s.bytes > 1<<10 {
			t.Errorf("the upstream got %d bytes of a body over the 1 KiB limit", s.bytes)
		}
	}

	// Malformed chunked.
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nzz\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	testutil.ExpectAPIError(t, resp, http.StatusBadRequest, "invalid_body")

	// Under the limit, the body goes through.
	resp = do(t, "POST", e.URL+"/v1/files", "small", "Content-Type", "application/octet-stream")
	if body := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Errorf("a small body: %d %s", resp.StatusCode, body)
	}
}

// TestCrossSitePassThrough: a page on a foreign origin cannot make reprise
// forward a request with the operator's key: the requests a browser sends
// cross-site without a preflight (a POST of text/plain, a form, a
// multipart upload) are refused 403 when their Origin is neither reprise's
// own nor an allowed CORS origin. Reads (GET /v1/models), clients that are
// no browser, same-origin pages and allowed origins pass.
func TestCrossSitePassThrough(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := newEnv(t, withUpstream(rec), withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.UpstreamKey = auth.None, "sk-operator"
		c.HTTP.CORSOrigins = []string{"https://app.example"}
	}))
	host := "http://" + e.addr
	cases := []struct {
		name, method, path, ctype string
		header                    []string
		refused                   bool
	}{
		{"text/plain from a foreign origin", "POST", "/v1/files", "text/plain", []string{"Origin", "https://evil.example"}, true},
		{"a form from a foreign origin", "POST", "/v1/images/generations", "application/x-www-form-urlencoded", []string{"Origin", "https://evil.example"}, true},
		{"multipart from a foreign origin", "POST", "/v1/files", "multipart/form-data; boundary=x", []string{"Origin", "https://evil.example"}, true},
		{"Sec-Fetch-Site cross-site", "POST", "/v1/files", "text/plain", []string{"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"}, true},
		{"an opaque origin", "POST", "/v1/files", "text/plain", []string{"Origin", "null"}, true},
		{"GET /v1/models from a foreign origin", "GET", "/v1/models", "", []string{"Origin", "https://evil.example"}, false},
		{"no browser", "POST", "/v1/files", "multipart/form-data; boundary=x", nil, false},
		{"same origin", "POST", "/v1/files", "text/plain", []string{"Origin", host, "Sec-Fetch-Site", "same-origin"}, false},
		{"an allowed CORS origin", "POST", "/v1/files", "multipart/form-data; boundary=x", []string{"Origin", "https://app.example", "Sec-Fetch-Site", "cross-site"}, false},
	}
	for _, c := range cases {
		h := c.header
		if c.ctype != "" {
			h = append(append([]string{}, h...), "Content-Type", c.ctype)
		}
		resp := do(t, c.method, e.URL+c.path, "--x--", h...)
		got := rec.take()
		if c.refused {
			testutil.ExpectAPIError(t, resp, http.StatusForbidden, "cors_origin_not_allowed")
			if len(got) != 0 {
				t.Errorf("%s reached the upstream: %+v", c.name, got)
			}
			continue
		}
		if body := readBody(t, resp); resp.StatusCode != http.StatusOK || len(got) != 1 || got[0].key != "Bearer sk-operator" {
			t.Errorf("%s: %d %s, upstream got %+v", c.name, resp.StatusCode, body, got)
		}
	}
}

// TestCrossSitePassThroughOwnKey: in passthrough auth, a multipart upload
// with the client's own credential passes (a browser sends one only after a
// preflight reprise answered).
func TestCrossSitePassThroughOwnKey(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := newEnv(t, withUpstream(rec))
	resp := do(t, "POST", e.URL+"/v1/files", "--x--", "Content-Type", "multipart/form-data; boundary=x", "Authorization", "Bearer sk-client")
	if body := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Errorf("a multipart upload with the client's key: %d %s", resp.StatusCode, body)
	}
	if got := rec.take(); len(got) != 1 || got[0].key != "Bearer sk-client" {
		t.Errorf("the upstream got %+v", got)
	}
}

// TestUpstreamCodeNotReprises: an upstream error that names one of
// reprise's own codes (owner_lost, journal_failure …) is recorded as the
// upstream's, never as reprise's: a reader of the status can tell them
// apart, and reprise does not act on it as on its own.
func TestUpstreamCodeNotReprises(t *testing.T) {
	t.Parallel()
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"message":"the journal failed","type":"server_error","code":"journal_failure"}}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n")
		_, _ = io.WriteString(w, "event: error\n"+`data: {"error":{"message":"lost","type":"server_error","code":"owner_lost"}}`+"\n\n")
	})
	e := newEnv(t, withUpstream(up))
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody("own code", true), "Idempotency-Key", "k-own-stream"), -1)
	if last := lastEvent(t, evs); last.Type != "error" || strings.Contains(last.Data, `"code":"owner_lost"`) {
		t.Errorf("the stream's error event %+v names reprise's owner_lost", last)
	}
	st := testutil.WaitState(t, e.URL, "k-own-stream", "failed")
	if st.Error == "owner_lost" || !strings.Contains(st.Error, "owner_lost") {
		t.Errorf("an upstream's owner_lost is recorded as %q: reprise's own, or lost", st.Error)
	}
	resp := do(t, "POST", e.URL+chatPath, chatBody("own code", false), "Idempotency-Key", "k-own-whole")
	readBody(t, resp)
	st = testutil.WaitState(t, e.URL, "k-own-whole", "failed")
	if st.Error == "journal_failure" || !strings.Contains(st.Error, "journal_failure") {
		t.Errorf("an upstream's journal_failure is recorded as %q: reprise's own, or lost", st.Error)
	}
}

// TestResponseMadeElsewhere: GET /v1/responses/{id} of a response reprise
// never journaled asks the upstream with the caller's own credential (a
// response made elsewhere); where callers share the proxy's key (static)
// it is 404 and nothing is asked, since the upstream would answer with
// another tenant's response.
func TestResponseMadeElsewhere(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	e := newEnv(t, withUpstream(rec))
	resp := do(t, "GET", e.URL+"/v1/responses/resp_elsewhere", "", "Authorization", "Bearer sk-caller")
	if b := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Errorf("passthrough: %d %s, want the upstream's answer", resp.StatusCode, b)
	}
	if got := rec.take(); len(got) != 1 || got[0].path != "/v1/responses/resp_elsewhere" || got[0].key != "Bearer sk-caller" {
		t.Errorf("passthrough: the upstream got %+v, want the GET with the caller's key", got)
	}

	static := newEnv(t, withUpstream(rec), withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys, c.Auth.UpstreamKey = auth.Static, []string{"pk-elsewhere-1"}, "sk-operator"
	}))
	resp = do(t, "GET", static.URL+"/v1/responses/resp_elsewhere", "", "Authorization", "Bearer pk-elsewhere-1")
	testutil.ExpectAPIError(t, resp, http.StatusNotFound, "key_not_found")
	if got := rec.take(); len(got) != 0 {
		t.Errorf("static: the upstream got %+v, want nothing", got)
	}
}
