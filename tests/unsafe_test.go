package tests

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
)

// End-to-end tests of requests whose key reprise cannot serve safely:
// they are refused before anything reaches the upstream.

// sendWithKeys posts body to path with one Idempotency-Key header per key.
func sendWithKeys(tb testing.TB, url, body string, keys ...string) *http.Response {
	tb.Helper()
	req, err := http.NewRequestWithContext(waitCtx(tb, testutil.RequestTimeout), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// anthropicError reads resp as Anthropic's error shape and returns its
// error type and reprise's code.
func anthropicError(tb testing.TB, resp *http.Response) (typ, code string) {
	tb.Helper()
	body := readBody(tb, resp)
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Type != "error" || v.Error.Message == "" {
		tb.Fatalf("%d %q is not an Anthropic error", resp.StatusCode, body)
	}
	return v.Error.Type, v.Error.Code
}

// TestUnsafeKeysRefused: the keys "." and ".." (dot segments: their
// Location URL would resolve to another path, so the key could never be
// read back) and a request with two Idempotency-Key headers (which one is
// meant is unknowable) get 400 invalid_idempotency_key in the caller's API
// shape, on every path that takes a key, and cost no upstream call.
func TestUnsafeKeysRefused(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up))
	messages := `{"model":"mock-1","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"x"}]}`
	tests := []struct {
		name, path, body string
		keys             []string
	}{
		{"dot", chatPath, chatBody("x", true), []string{"."}},
		{"dot dot", chatPath, chatBody("x", true), []string{".."}},
		{"quoted dot dot", chatPath, chatBody("x", false), []string{`".."`}},
		{"two keys", chatPath, chatBody("x", true), []string{"k-one", "k-two"}},
		{"the same key twice", chatPath, chatBody("x", true), []string{"k-same", "k-same"}},
		{"an empty key and a key", chatPath, chatBody("x", true), []string{"", "k-two"}},
		{"two keys on a pass-through", "/v1/embeddings", `{"model":"mock-embed","input":"x"}`, []string{"k-one", "k-two"}},
		{"dot dot on a pass-through", "/v1/embeddings", `{"model":"mock-embed","input":"x"}`, []string{".."}},
		{"dot on messages", messagesPath, messages, []string{"."}},
		{"two keys on messages", messagesPath, messages, []string{"k-one", "k-two"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := sendWithKeys(t, e.URL+tc.path, tc.body, tc.keys...)
			if tc.path == messagesPath {
				if typ, code := anthropicError(t, resp); resp.StatusCode != http.StatusBadRequest || typ != "invalid_request_error" || code != "invalid_idempotency_key" {
					t.Errorf("got %d %s %s, want 400 invalid_request_error invalid_idempotency_key", resp.StatusCode, typ, code)
				}
				return
			}
			testutil.ExpectAPIError(t, resp, http.StatusBadRequest, "invalid_idempotency_key")
		})
	}
	if n := len(up.authorizations()); n != 0 {
		t.Errorf("refused requests reached the upstream %d times", n)
	}
	// One key, sent once, still works: the key itself is fine.
	if evs := readEvents(t, sendWithKeys(t, e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), "k-one"), -1); !hasDone(evs) {
		t.Error("a single key was refused")
	}
}

// echoUpstream answers every request with the Authorization it got, in
// every place an answer has: streamed chat events (the credential split
// across two writes), a whole chat answer, a pass-through body gzipped
// when the request accepts it, a response header, and a keyed
// pass-through answer. An upstream that does this (a debugging proxy, a
// hostile self-hosted model, an error page) shows its callers the key it
// was given.
func echoUpstream() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred := r.Header.Get("Authorization")
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Echo", cred)
		switch {
		case r.URL.Path == chatPath && bytes.Contains(body, []byte(`"stream":true`)):
			w.Header().Set("Content-Type", "text/event-stream")
			rc := http.NewResponseController(w)
			half := len(cred) / 2
			_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"`+cred[:half])
			_ = rc.Flush()
			_, _ = io.WriteString(w, cred[half:]+`"}}]}`+"\n\n")
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		case r.URL.Path == chatPath:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`+cred+`"}}]}`)
		case strings.Contains(r.Header.Get("Accept-Encoding"), "gzip"):
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = io.WriteString(zw, `{"object":"list","seen":"`+cred+`"}`)
			_ = zw.Close()
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"object":"list","seen":"`+cred+`"}`)
		}
	})
}

// TestStaticKeyNeverReachesClients: in static auth the operator's upstream
// key is taken out of every upstream answer before it is journaled or
// passed on — streamed events, whole answers, keyed and plain
// pass-throughs (compressed ones included), response headers — not only
// out of error bodies; and JetStream holds it nowhere.
func TestStaticKeyNeverReachesClients(t *testing.T) {
	t.Parallel()
	const upstreamKey = "sk-operator-static-4242"
	e := newEnv(t, withUpstream(echoUpstream()), withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys, c.Auth.UpstreamKey = auth.Static, []string{"pk-1"}, upstreamKey
	}))
	bearer := []string{"Authorization", "Bearer pk-1"}
	clean := func(what string, resp *http.Response, body string) {
		t.Helper()
		if strings.Contains(body, upstreamKey) {
			t.Errorf("%s: the answer carries the upstream key: %s", what, body)
		}
		if !strings.Contains(body, "[redacted]") {
			t.Errorf("%s: %d %s, want the upstream's answer with the key redacted", what, resp.StatusCode, body)
		}
		for name, vs := range resp.Header {
			if strings.Contains(strings.Join(vs, " "), upstreamKey) {
				t.Errorf("%s: header %s carries the upstream key", what, name)
			}
		}
	}
	eventsOf := func(what string, resp *http.Response) {
		t.Helper()
		var all strings.Builder
		for _, ev := range readEvents(t, resp, -1) {
			all.WriteString(ev.Type + " " + ev.Data + "\n")
		}
		clean(what, resp, all.String())
	}

	stream := chatBody("echo", true)
	eventsOf("streamed", do(t, "POST", e.URL+chatPath, stream, append([]string{"Idempotency-Key", "k-echo-stream"}, bearer...)...))
	eventsOf("streamed replay", do(t, "POST", e.URL+chatPath, stream, append([]string{"Idempotency-Key", "k-echo-stream"}, bearer...)...))
	eventsOf("streamed read", do(t, "GET", e.URL+"/v1/streams/k-echo-stream", "", bearer...))

	whole := chatBody("echo", false)
	for _, what := range []string{"whole", "whole replay"} {
		resp := do(t, "POST", e.URL+chatPath, whole, append([]string{"Idempotency-Key", "k-echo-whole"}, bearer...)...)
		clean(what, resp, readBody(t, resp))
	}

	embed := `{"model":"mock-embed","input":"echo"}`
	for _, what := range []string{"keyed pass-through", "keyed pass-through replay"} {
		resp := do(t, "POST", e.URL+"/v1/embeddings", embed, append([]string{"Idempotency-Key", "k-echo-embed"}, bearer...)...)
		clean(what, resp, readBody(t, resp))
	}

	resp := do(t, "GET", e.URL+"/v1/models", "", append([]string{"Accept-Encoding", "gzip"}, bearer...)...)
	body := readBody(t, resp)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(zr)
		body = string(b)
	}
	clean("plain pass-through", resp, body)

	// What JetStream holds: every event message, every record.
	ctx := waitCtx(t, 20*time.Second)
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{journal.DefaultStream, "KV_" + journal.DefaultBucket} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				continue // deleted (a record's older revision)
			}
			if bytes.Contains(m.Data, []byte(upstreamKey)) {
				t.Errorf("%s message %d holds the upstream key in clear", name, seq)
			}
		}
	}
}
