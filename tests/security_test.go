package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// End-to-end tests of the security layer (internal/auth.go, capability.go,
// get.go, the limits in server.go and upstream.go): tenants, capability
// tokens, auth modes, resource limits, hostile upstreams, byte ranges and
// what reaches the logs. The threat model they check: docs/security.md.

// secUpstream is a fake upstream that records the Authorization header of
// every request and lets a hook answer some requests itself (hostile
// upstreams); everything else goes to its own mockllm.
type secUpstream struct {
	llm  *mockllm.Server
	hook func(w http.ResponseWriter, r *http.Request, body []byte) bool

	mu    sync.Mutex
	auths []string // every request's Authorization values, joined by " | "
}

func newSecUpstream(hook func(w http.ResponseWriter, r *http.Request, body []byte) bool) *secUpstream {
	return &secUpstream{llm: mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond}), hook: hook}
}

func (u *secUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(b))
	u.mu.Lock()
	u.auths = append(u.auths, strings.Join(r.Header.Values("Authorization"), " | "))
	u.mu.Unlock()
	if u.hook != nil && u.hook(w, r, b) {
		return
	}
	u.llm.ServeHTTP(w, r)
}

func (u *secUpstream) authorizations() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auths...)
}

// secNotFound is the 404 of a key that does not exist, as an unauthenticated
// caller sees it: every refused read must be byte-identical to it.
func secNotFound(tb testing.TB, e *env) testutil.APIError {
	tb.Helper()
	return testutil.ExpectAPIError(tb, do(tb, "GET", e.URL+"/v1/streams/sec-no-such-key-"+strconv.FormatInt(time.Now().UnixNano(), 10), ""), 404, "key_not_found")
}

// secSameNotFound checks that resp is exactly the unknown key's 404.
func secSameNotFound(tb testing.TB, resp *http.Response, want testutil.APIError, what string) {
	tb.Helper()
	got := testutil.ReadAPIError(tb, resp)
	if got.Status != want.Status || got.Body != want.Body || got.ContentType != want.ContentType || resp.Header.Get("Cache-Control") != "no-store" {
		tb.Errorf("%s: got %d %s %q, want the unknown key's %d %s %q", what, got.Status, got.ContentType, got.Body, want.Status, want.ContentType, want.Body)
	}
}

func secBearer(cred string) []string { return []string{"Authorization", "Bearer " + cred} }

func secHeaders(kv ...[]string) []string {
	var out []string
	for _, p := range kv {
		out = append(out, p...)
	}
	return out
}

// secLocation is the Location of a POST answer: /v1/streams/{key}?token=…
func secLocation(tb testing.TB, resp *http.Response) string {
	tb.Helper()
	loc := resp.Header.Get("Location")
	u, err := url.Parse(loc)
	if err != nil || !strings.HasPrefix(u.Path, "/v1/streams/") || u.Query().Get("token") == "" {
		tb.Fatalf("Location %q is not a stream URL with a capability", loc)
	}
	return loc
}

func secToken(tb testing.TB, loc string) string {
	tb.Helper()
	u, err := url.Parse(loc)
	if err != nil {
		tb.Fatal(err)
	}
	return u.Query().Get("token")
}

// secCollect reads a whole event stream without failing the test, for
// goroutines.
func secCollect(e *env, method, path, body string, header ...string) ([]event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return fetchEvents(ctx, method, e.URL+path, body, 0, nil, header...)
}

// secNormalStream runs a well-behaved stream concurrently; the returned
// function waits for it and checks that it completed exactly.
func secNormalStream(t *testing.T, e *env, header ...string) func() {
	t.Helper()
	// Not uniquePrompt: the test's name may hold a hostile upstream's marker.
	prompt := fmt.Sprintf("normal %d [tokens=30] [delay=5ms]", time.Now().UnixNano())
	done := make(chan error, 1)
	var evs []event
	go func() {
		var err error
		evs, err = secCollect(e, "POST", chatPath, chatBody(prompt, true), header...)
		done <- err
	}()
	return func() {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("the concurrent normal stream: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the concurrent normal stream did not end")
		}
		checkComplete(t, evs, prompt, 30)
	}
}

// secLastError checks that evs end with event: error carrying code and
// hold no terminal event.
func secLastError(tb testing.TB, evs []event, codes ...string) event {
	tb.Helper()
	last := lastEvent(tb, evs)
	if last.Type != "error" {
		tb.Fatalf("last event %+v, want event: error %v", last, codes)
	}
	ok := false
	for _, c := range codes {
		ok = ok || strings.Contains(last.Data, `"code":"`+c+`"`)
	}
	if !ok {
		tb.Fatalf("error event %s, want code %v", last.Data, codes)
	}
	if hasDone(evs) {
		tb.Fatal("a failed stream carried [DONE]")
	}
	return last
}

func secWSURL(e *env, loc string) string { return "ws" + strings.TrimPrefix(e.URL, "http") + loc }

// secReadWS reads JSON frames until the connection ends; err is the error
// that ended it.
func secReadWS(conn *websocket.Conn, d time.Duration) (frames []event, err error) {
	_ = conn.SetReadDeadline(time.Now().Add(d))
	for {
		var f struct{ ID, Event, Data string }
		if err := conn.ReadJSON(&f); err != nil {
			return frames, err
		}
		frames = append(frames, event{ID: f.ID, Type: f.Event, Data: f.Data})
	}
}

// TestSecurityCrossTenantRead: another credential cannot read a key, and
// its refusal is byte-identical to the answer for a key that does not exist,
// over SSE, JSON status and WebSocket.
func TestSecurityCrossTenantRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	notFound := secNotFound(t, e)
	resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=3]"), true), secHeaders([]string{"Idempotency-Key", "sec-x"}, secBearer("alice"))...)
	readEvents(t, resp, -1)
	testutil.WaitState(t, e.URL, "sec-x", "completed", secBearer("alice")...)

	for name, h := range map[string][]string{
		"other bearer":         secBearer("bob"),
		"no credential":        nil,
		"bearer prefix":        secBearer("alic"),
		"bearer with suffix":   secBearer("alice2"),
		"other bearer as JSON": secHeaders(secBearer("bob"), []string{"Accept", "application/json"}),
		"other bearer, cursor": secHeaders(secBearer("bob"), []string{"Last-Event-ID", "1-1-1"}),
		"basic auth":           {"Authorization", "Basic YWxpY2U6"},
	} {
		secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-x", "", h...), notFound, name)
	}
	// A malformed cursor of another tenant's key is still a 404: the cursor
	// is checked only once the reader may see the key.
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-x?last_event_id=zzz", "", secBearer("bob")...), notFound, "bad cursor")
	// WebSocket: the upgrade is refused with the same 404.
	conn, wresp, err := websocket.DefaultDialer.DialContext(waitCtx(t, 5*time.Second), secWSURL(e, "/v1/streams/sec-x"), http.Header{"Authorization": {"Bearer bob"}})
	if err == nil {
		conn.Close()
		t.Fatal("bob upgraded to alice's stream")
	}
	if wresp == nil {
		t.Fatalf("websocket dial: %v", err)
	}
	secSameNotFound(t, wresp, notFound, "websocket")
	// Alice still reads it.
	if evs := readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-x", "", secBearer("alice")...), -1); !hasDone(evs) {
		t.Fatal("alice cannot read her own key")
	}
}

// TestSecurityAttachAndReplayAcrossTenants: another tenant that sends the same
// key (with the same body or another) gets its own generation, never an
// attach to or a replay of the first tenant's, and never a 422.
func TestSecurityAttachAndReplayAcrossTenants(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up))

	// Replay: alice's generation is complete; bob sends the same key and body.
	prompt := uniquePrompt(t, "[tokens=4]")
	body := chatBody(prompt, true)
	a := readEvents(t, do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-shared"}, secBearer("alice"))...), -1)
	testutil.WaitState(t, e.URL, "sec-shared", "completed", secBearer("alice")...)
	resp := do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-shared"}, secBearer("bob"))...)
	if resp.Header.Get("Idempotent-Replayed") != "" || resp.Header.Get("Reprise-Attempts") != "1" {
		t.Errorf("bob's request was answered from alice's key: Idempotent-Replayed %q, Reprise-Attempts %q",
			resp.Header.Get("Idempotent-Replayed"), resp.Header.Get("Reprise-Attempts"))
	}
	b := readEvents(t, resp, -1)
	checkComplete(t, a, prompt, 4)
	checkComplete(t, b, prompt, 4)
	if g := testutil.Settled(t, up.llm.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("ledger %+v: want 2 generations, one per tenant", g)
	}

	// Attach: alice's generation is running; bob's identical request does not join it.
	slow := uniquePrompt(t, "[tokens=30] [delay=10ms]")
	sbody := chatBody(slow, true)
	first := do(t, "POST", e.URL+chatPath, sbody, secHeaders([]string{"Idempotency-Key", "sec-running"}, secBearer("alice"))...)
	readEvents(t, first, 2) // running; alice drops, the generation goes on
	resp = do(t, "POST", e.URL+chatPath, sbody, secHeaders([]string{"Idempotency-Key", "sec-running"}, secBearer("bob"))...)
	if got := resp.Header.Get("Reprise-Attempts"); got != "1" {
		t.Errorf("bob attached to alice's running generation (Reprise-Attempts %q)", got)
	}
	checkComplete(t, readEvents(t, resp, -1), slow, 30)
	if g := testutil.Settled(t, up.llm.Ledger(), slow, 2); g.Generations != 2 {
		t.Errorf("ledger %+v: want 2 generations", g)
	}

	// Another body under a key only alice used is bob's own key: no 422.
	mine, other := uniquePrompt(t, "mine [tokens=2]"), uniquePrompt(t, "other [tokens=2]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(mine, true), secHeaders([]string{"Idempotency-Key", "sec-alice-only"}, secBearer("alice"))...), -1)
	resp = do(t, "POST", e.URL+chatPath, chatBody(other, true), secHeaders([]string{"Idempotency-Key", "sec-alice-only"}, secBearer("bob"))...)
	if resp.StatusCode == 422 {
		t.Fatalf("bob got alice's mismatch: %s", readBody(t, resp))
	}
	checkComplete(t, readEvents(t, resp, -1), other, 2)
	// …whereas alice herself gets the mismatch, and her key is untouched.
	testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, chatBody(other, true), secHeaders([]string{"Idempotency-Key", "sec-alice-only"}, secBearer("alice"))...), 422, "idempotency_key_mismatch")
	checkComplete(t, readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-alice-only", "", secBearer("alice")...), -1), mine, 2)

	// Keyless SDK retries are absorbed per tenant only.
	kl := uniquePrompt(t, "[tokens=2]")
	r1 := do(t, "POST", e.URL+chatPath, chatBody(kl, true), secBearer("alice")...)
	k1 := r1.Header.Get("Idempotency-Key")
	readEvents(t, r1, -1)
	r2 := do(t, "POST", e.URL+chatPath, chatBody(kl, true), secHeaders(secBearer("bob"), []string{"X-Stainless-Retry-Count", "1"})...)
	k2 := r2.Header.Get("Idempotency-Key")
	readEvents(t, r2, -1)
	if k1 == "" || k1 == k2 {
		t.Errorf("bob's SDK retry took alice's keyless key %q", k1)
	}
	if g := testutil.Settled(t, up.llm.Ledger(), kl, 2); g.Generations != 2 {
		t.Errorf("keyless ledger %+v: want 2 generations", g)
	}
}

// TestSecurityCapability: the Location's token reads the stream without any
// credential, over SSE, WebSocket and JSON status; without token and
// credential the key is a 404.
func TestSecurityCapability(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	notFound := secNotFound(t, e)
	prompt := uniquePrompt(t, "[tokens=6]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), secHeaders([]string{"Idempotency-Key", "sec-cap"}, secBearer("alice"))...)
	loc := secLocation(t, resp)
	evs := readEvents(t, resp, -1)
	testutil.WaitState(t, e.URL, "sec-cap", "completed", secBearer("alice")...)

	// SSE, whole and resumed.
	got := readEvents(t, do(t, "GET", e.URL+loc, ""), -1)
	if strings.Join(ids(got), ",") != strings.Join(ids(evs), ",") || !hasDone(got) {
		t.Fatalf("capability read %v, want %v", ids(got), ids(evs))
	}
	rest := readEvents(t, do(t, "GET", e.URL+loc+"&last_event_id="+evs[2].ID, ""), -1)
	if len(rest) != len(evs)-3 {
		t.Errorf("resumed capability read: %d events, want %d", len(rest), len(evs)-3)
	}
	// The token wins over a credential of another tenant.
	if got := readEvents(t, do(t, "GET", e.URL+loc, "", secBearer("bob")...), -1); !hasDone(got) {
		t.Error("the capability did not work for a caller with another credential")
	}
	// JSON status.
	st := do(t, "GET", e.URL+loc, "", "Accept", "application/json")
	if b := readBody(t, st); st.StatusCode != 200 || !strings.Contains(b, `"state":"completed"`) {
		t.Errorf("capability JSON status: %d %s", st.StatusCode, b)
	}
	// WebSocket.
	conn, wresp, err := websocket.DefaultDialer.DialContext(waitCtx(t, 5*time.Second), secWSURL(e, loc), nil)
	if err != nil {
		t.Fatalf("websocket with capability: %v", err)
	}
	wresp.Body.Close()
	frames, err := secReadWS(conn, 10*time.Second)
	conn.Close()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) || len(frames) != len(evs) || frames[len(frames)-1].Data != "[DONE]" {
		t.Fatalf("websocket with capability: %d frames, end %v; want %d ending [DONE]", len(frames), err, len(evs))
	}
	// No token, no credential.
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-cap", ""), notFound, "no token, no credential")
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-cap?token=", ""), notFound, "empty token")

	// A non-streamed answer's Location serves the stored result.
	jr := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=3]"), false), secHeaders([]string{"Idempotency-Key", "sec-cap-json"}, secBearer("alice"))...)
	jloc := secLocation(t, jr)
	first := readBody(t, jr)
	if again := readBody(t, do(t, "GET", e.URL+jloc, "")); again != first {
		t.Errorf("capability read of a stored result %q, want %q", again, first)
	}
}

// TestSecurityForgedCapability: every altered, borrowed or made-up token is
// refused exactly like a key that does not exist.
func TestSecurityForgedCapability(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	notFound := secNotFound(t, e)
	post := func(key, cred string) string {
		resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, key+" [tokens=2]"), true), secHeaders([]string{"Idempotency-Key", key}, secBearer(cred))...)
		loc := secLocation(t, resp)
		readEvents(t, resp, -1)
		return secToken(t, loc)
	}
	tok := post("sec-forge", "alice")
	other := post("sec-forge-2", "alice")
	bobs := post("sec-forge-bob", "bob")
	parts := strings.Split(tok, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		t.Fatalf("token %q: want v1.<exp>.<tenant>.<mac>", tok)
	}
	with := func(i int, v string) string {
		p := append([]string(nil), parts...)
		p[i] = v
		return strings.Join(p, ".")
	}
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	exp, err := strconv.ParseInt(parts[1], 36, 64)
	if err != nil {
		t.Fatal(err)
	}
	forged := map[string]string{
		"mac first char flipped":    with(3, flip(parts[3], 0)),
		"mac last char flipped":     with(3, flip(parts[3], len(parts[3])-1)),
		"mac truncated":             with(3, parts[3][:len(parts[3])-1]),
		"mac empty":                 with(3, ""),
		"tenant char flipped":       with(2, flip(parts[2], 0)),
		"tenant anonymous":          with(2, "anonymous"),
		"tenant of bob":             with(2, strings.Split(bobs, ".")[2]),
		"expiry extended":           with(1, strconv.FormatInt(exp+3600, 36)),
		"expiry with sign":          with(1, "+"+parts[1]),
		"wrong version v2":          with(0, "v2"),
		"wrong version V1":          with(0, "V1"),
		"no version":                strings.Join(parts[1:], "."),
		"extra part":                tok + ".x",
		"token of another key":      other,
		"bob's token on alice's":    bobs,
		"garbage":                   "garbage",
		"dots":                      "...",
		"long":                      strings.Repeat("v1.", 200),
		"nul in tenant":             with(2, parts[2]+"\x00"),
		"mac of another key's":      with(3, strings.Split(other, ".")[3]),
		"whitespace around a token": " " + tok + " ",
	}
	for name, ft := range forged {
		if ft == tok {
			t.Fatalf("%s: not a forgery", name)
		}
		resp := do(t, "GET", e.URL+"/v1/streams/sec-forge?token="+url.QueryEscape(ft), "")
		secSameNotFound(t, resp, notFound, name)
		// A forged token does not fall back to the caller's credential either.
		resp = do(t, "GET", e.URL+"/v1/streams/sec-forge?token="+url.QueryEscape(ft), "", secBearer("alice")...)
		secSameNotFound(t, resp, notFound, name+" with alice's bearer")
	}
	// The genuine token still works, and only for its key.
	if evs := readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-forge?token="+url.QueryEscape(tok), ""), -1); !hasDone(evs) {
		t.Fatal("the genuine token stopped working")
	}
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-forge-bob?token="+url.QueryEscape(tok), ""), notFound, "alice's token on bob's key")
}

// TestSecurityExpiredCapability: a token past its TTL grants nothing; the
// creator's credential still reads the key.
func TestSecurityExpiredCapability(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.Auth.CapabilityTTL = time.Second }))
	notFound := secNotFound(t, e)
	t0 := time.Now()
	resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), secHeaders([]string{"Idempotency-Key", "sec-exp"}, secBearer("alice"))...)
	loc := secLocation(t, resp)
	readEvents(t, resp, -1)
	// Valid at once (its expiry is whole seconds: at least 1 s from now).
	if evs := readEvents(t, do(t, "GET", e.URL+loc, ""), -1); !hasDone(evs) {
		t.Fatal("a fresh token did not read")
	}
	time.Sleep(time.Until(t0.Add(2200 * time.Millisecond))) // the token's expiry second has passed
	secSameNotFound(t, do(t, "GET", e.URL+loc, ""), notFound, "expired token")
	secSameNotFound(t, do(t, "GET", e.URL+loc, "", "Accept", "application/json"), notFound, "expired token, JSON")
	if evs := readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-exp", "", secBearer("alice")...), -1); !hasDone(evs) {
		t.Error("alice's credential no longer reads her key")
	}
}

// TestSecurityStaticAuth: only proxy keys are accepted; the upstream gets the
// configured key and never a proxy key.
func TestSecurityStaticAuth(t *testing.T) {
	t.Parallel()
	const upstreamKey = "sk-upstream-static-7777"
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys, c.Auth.UpstreamKey = auth.Static, []string{"pk-good-1", "pk-good-2"}, upstreamKey
	}))
	notFound := secNotFound(t, e)
	body := chatBody(uniquePrompt(t, "[tokens=3]"), true)

	e1 := testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "sec-static"), 401, "missing_api_key")
	e2 := testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-static"}, secBearer("pk-wrong"))...), 401, "invalid_api_key")
	e3 := testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "sec-static", "Authorization", "Basic cGstZ29vZC0xOg=="), 401, "missing_api_key")
	e4 := testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-static"}, secBearer(upstreamKey))...), 401, "invalid_api_key")
	for _, x := range []testutil.APIError{e1, e2, e3, e4} {
		if x.Type != "authentication_error" {
			t.Errorf("401 type %q", x.Type)
		}
	}
	if n := len(up.authorizations()); n != 0 {
		t.Fatalf("refused requests reached the upstream %d times", n)
	}

	resp := do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-static"}, secBearer("pk-good-1"))...)
	if resp.StatusCode != 200 {
		t.Fatalf("proxy key refused: %d %s", resp.StatusCode, readBody(t, resp))
	}
	loc := secLocation(t, resp)
	if !hasDone(readEvents(t, resp, -1)) {
		t.Fatal("no [DONE]")
	}
	// A non-streamed request and a key-less one too.
	readBody(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), false), secBearer("pk-good-2")...))
	auths := up.authorizations()
	if len(auths) != 2 {
		t.Fatalf("upstream saw %d requests, want 2", len(auths))
	}
	for _, a := range auths {
		if a != "Bearer "+upstreamKey {
			t.Errorf("upstream Authorization %q, want the configured upstream key", a)
		}
		if strings.Contains(a, "pk-") {
			t.Errorf("a proxy key reached the upstream: %q", a)
		}
	}
	// Reads: the token, or the same proxy key; another proxy key is another tenant.
	if !hasDone(readEvents(t, do(t, "GET", e.URL+loc, ""), -1)) {
		t.Error("capability read failed in static mode")
	}
	if !hasDone(readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-static", "", secBearer("pk-good-1")...), -1)) {
		t.Error("the creating proxy key cannot read")
	}
	// A GET is never a 401 oracle: a missing or wrong key reads as not found.
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-static", "", secBearer("pk-good-2")...), notFound, "other proxy key")
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-static", "", secBearer("pk-wrong")...), notFound, "wrong proxy key")
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-static", ""), notFound, "no key")
	// The upstream key never reaches a client: not in any header of an answer.
	resp = do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-static"}, secBearer("pk-good-1"))...)
	for name, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, upstreamKey) {
				t.Errorf("header %s carries the upstream key", name)
			}
		}
	}
	if b := readBody(t, resp); strings.Contains(b, upstreamKey) {
		t.Error("an answer carries the upstream key")
	}
}

// TestSecurityPassthroughForwardsBearer: in passthrough the caller's own
// bearer goes upstream (and nothing when the caller has none).
func TestSecurityPassthroughForwardsBearer(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) { c.Auth.UpstreamKey = "sk-never-used-in-passthrough" }))
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), secBearer("sk-caller-alice")...), -1)
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), secBearer("sk-caller-bob")...), -1)
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true)), -1)
	got := up.authorizations()
	want := []string{"Bearer sk-caller-alice", "Bearer sk-caller-bob", ""}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("upstream Authorization %q, want %q", got, want)
	}
}

// TestSecurityNoneModeSharesTenant: auth none is one anonymous tenant: two
// bearers read and replay each other's keys; the upstream gets the
// configured key, never a caller's bearer.
func TestSecurityNoneModeSharesTenant(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) { c.Auth.Mode, c.Auth.UpstreamKey = auth.None, "sk-up-none" }))
	prompt := uniquePrompt(t, "[tokens=3]")
	body := chatBody(prompt, true)
	readEvents(t, do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-none"}, secBearer("alice"))...), -1)
	testutil.WaitState(t, e.URL, "sec-none", "completed", secBearer("bob")...)
	if !hasDone(readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-none", "", secBearer("bob")...), -1)) {
		t.Error("bob cannot read alice's key in auth none")
	}
	resp := do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-none"}, secBearer("bob"))...)
	if resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("bob's identical request was not a replay in auth none")
	}
	readEvents(t, resp, -1)
	if g := testutil.Settled(t, up.llm.Ledger(), prompt, 1); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
	for _, a := range up.authorizations() {
		if a != "Bearer sk-up-none" {
			t.Errorf("upstream Authorization %q, want the configured key", a)
		}
	}
}

// TestSecurityTenantHeader: with TenantHeader the tenant is that header's
// value, whatever the bearer; the bearer still goes upstream (passthrough).
func TestSecurityTenantHeader(t *testing.T) {
	t.Parallel()
	const th = "X-Reprise-Tenant"
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) { c.Auth.TenantHeader = th }))
	notFound := secNotFound(t, e)
	prompt := uniquePrompt(t, "[tokens=2]")
	body := chatBody(prompt, true)
	readEvents(t, do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-th", th, "team-a"}, secBearer("shared-bearer"))...), -1)
	testutil.WaitState(t, e.URL, "sec-th", "completed", th, "team-a")
	// Same team, other bearer: same tenant.
	if !hasDone(readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-th", "", secHeaders([]string{th, " team-a "}, secBearer("other-bearer"))...), -1)) {
		t.Error("same tenant header, other bearer: cannot read")
	}
	// Other team, same bearer: another tenant.
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-th", "", secHeaders([]string{th, "team-b"}, secBearer("shared-bearer"))...), notFound, "other tenant header")
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-th", "", secBearer("shared-bearer")...), notFound, "bearer only")
	// team-b's identical request is its own generation.
	readEvents(t, do(t, "POST", e.URL+chatPath, body, secHeaders([]string{"Idempotency-Key", "sec-th", th, "team-b"}, secBearer("shared-bearer"))...), -1)
	if g := testutil.Settled(t, up.llm.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("ledger %+v, want 2 generations", g)
	}
	for _, a := range up.authorizations() {
		if a != "Bearer shared-bearer" {
			t.Errorf("upstream Authorization %q, want the caller's bearer", a)
		}
	}
}

// TestSecurityStreamLimits: past MaxStreamEvents or MaxStreamBytes a
// generation fails with stream_too_large; exactly at the limit it completes.
func TestSecurityStreamLimits(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !bytes.Contains(body, []byte("BIGEVENTS")) {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			_, _ = io.WriteString(w, "data: "+strings.Repeat("x", 1000)+"\n\n")
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		return true
	})
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) { c.Limits.MaxStreamEvents, c.Limits.MaxStreamBytes = 5, 2500 }))

	// Events: 10 tokens are 14 events.
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=10]"), true), "Idempotency-Key", "sec-events"), -1)
	secLastError(t, evs, "stream_too_large")
	if len(evs) != 5+1 {
		t.Errorf("%d events, want the 5 allowed and the error", len(evs))
	}
	if st := waitState(t, e, "sec-events", "failed"); st.Error != "stream_too_large" || st.Events != 6 {
		t.Errorf("status %+v, want failed stream_too_large with 6 events", st)
	}
	// Exactly 5 upstream events: 1 token is role, token, stop, usage, [DONE] (the client gets 4).
	ok := uniquePrompt(t, "[tokens=1]")
	checkComplete(t, readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(ok, true), "Idempotency-Key", "sec-five"), -1), ok, 1)

	// Bytes: three events of 1000 bytes against 2500.
	evs = readEvents(t, do(t, "POST", e.URL+chatPath, chatBody("BIGEVENTS "+uniquePrompt(t, ""), true), "Idempotency-Key", "sec-bytes"), -1)
	secLastError(t, evs, "stream_too_large")
	if len(evs) != 2+1 {
		t.Errorf("%d events, want the 2 that fit and the error", len(evs))
	}
	if st := waitState(t, e, "sec-bytes", "failed"); st.Error != "stream_too_large" {
		t.Errorf("status %+v", st)
	}
	// A failed generation is no result: a reader gets the same failure.
	again := readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-bytes", ""), -1)
	secLastError(t, again, "stream_too_large")
}

// TestSecurityTenantGenerationLimit: a tenant at MaxTenantGenerations gets
// 429 too_many_generations for another key, other tenants do not, and the
// place comes back when the generation ends.
func TestSecurityTenantGenerationLimit(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) { c.Limits.MaxTenantGenerations = 1 }))
	slow := uniquePrompt(t, "[tokens=50] [delay=30ms]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(slow, true), secHeaders([]string{"Idempotency-Key", "sec-gen-1"}, secBearer("alice"))...), 2)

	refused := uniquePrompt(t, "[tokens=2]")
	x := testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, chatBody(refused, true), secHeaders([]string{"Idempotency-Key", "sec-gen-2"}, secBearer("alice"))...), 429, "too_many_generations")
	if x.RetryAfter == "" || x.Type != "rate_limit_error" {
		t.Errorf("429 without Retry-After or with type %q", x.Type)
	}
	testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, chatBody(refused, false), secBearer("alice")...), 429, "too_many_generations")
	// A refused key never generated: it is failed with the reason (or absent).
	if st, code := testutil.GetStatus(t, e.URL, "sec-gen-2", secBearer("alice")...); code != 404 && (st.State != "failed" || st.Error != "too_many_generations") {
		t.Errorf("the refused key is %d %+v, want absent or failed too_many_generations", code, st)
	}
	if g := up.llm.Ledger().Get(refused); g.Requests != 0 {
		t.Errorf("a refused request reached the upstream: %+v", g)
	}
	// Attaching to (resuming) her running generation is not a new one.
	resp := do(t, "POST", e.URL+chatPath, chatBody(slow, true), secHeaders([]string{"Idempotency-Key", "sec-gen-1", "Last-Event-ID", "1-2-2"}, secBearer("alice"))...)
	if resp.StatusCode != 200 || resp.Header.Get("Reprise-Attempts") != "0" {
		t.Fatalf("resume at the limit: %d (Reprise-Attempts %q)", resp.StatusCode, resp.Header.Get("Reprise-Attempts"))
	}
	resp.Body.Close()
	// Another tenant is not limited by alice's generations.
	bob := uniquePrompt(t, "[tokens=2]")
	checkComplete(t, readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(bob, true), secBearer("bob")...), -1), bob, 2)

	// Once alice's generation ended, she may start another.
	testutil.WaitState(t, e.URL, "sec-gen-1", "completed", secBearer("alice")...)
	// The place is returned just after the record is finished.
	var resp2 *http.Response
	testutil.Eventually(t, 5*time.Second, "alice's generation place to come back (429 until then)", func() bool {
		resp2 = do(t, "POST", e.URL+chatPath, chatBody(refused, true), secHeaders([]string{"Idempotency-Key", "sec-gen-2"}, secBearer("alice"))...)
		if resp2.StatusCode == 429 {
			readBody(t, resp2)
			return false
		}
		return true
	})
	checkComplete(t, readEvents(t, resp2, -1), refused, 2)
}

// TestSecurityReaderLimit: past MaxReadersPerKey a reader gets 429
// too_many_readers (SSE and WebSocket); the place comes back when a reader leaves.
func TestSecurityReaderLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.HTTP.MaxReadersPerKey = 1 }))
	prompt := uniquePrompt(t, "[tokens=60] [delay=25ms]")
	first := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), secHeaders([]string{"Idempotency-Key", "sec-readers"}, secBearer("alice"))...)
	loc := secLocation(t, first)
	for _, err := range sse.Read(first.Body, nil) { // the first client is the key's one reader
		if err != nil {
			t.Fatal(err)
		}
		break
	}
	x := testutil.ExpectAPIError(t, do(t, "GET", e.URL+"/v1/streams/sec-readers", "", secBearer("alice")...), 429, "too_many_readers")
	if x.RetryAfter == "" || x.Type != "rate_limit_error" {
		t.Errorf("429 without Retry-After or with type %q", x.Type)
	}
	testutil.ExpectAPIError(t, do(t, "GET", e.URL+loc, ""), 429, "too_many_readers")
	conn, wresp, err := websocket.DefaultDialer.DialContext(waitCtx(t, 5*time.Second), secWSURL(e, loc), nil)
	if err == nil {
		conn.Close()
		t.Fatal("a second WebSocket reader was accepted")
	}
	if wresp == nil {
		t.Fatal(err)
	}
	testutil.ExpectAPIError(t, wresp, 429, "too_many_readers")
	// The JSON status is not a reader.
	if _, code := testutil.GetStatus(t, e.URL, "sec-readers", secBearer("alice")...); code != 200 {
		t.Errorf("JSON status %d during the limit", code)
	}
	// The first reader leaves; another may come.
	first.Body.Close()
	// The server notices the departure at its next write.
	var resp *http.Response
	testutil.Eventually(t, 5*time.Second, "the reader place to come back (429 until then)", func() bool {
		resp = do(t, "GET", e.URL+"/v1/streams/sec-readers", "", secBearer("alice")...)
		if resp.StatusCode == 429 {
			readBody(t, resp)
			return false
		}
		return true
	})
	checkComplete(t, readEvents(t, resp, -1), prompt, 60)
}

// TestSecurityMaxBody: a body over MaxBody is 413 request_too_large and
// never reaches the upstream.
func TestSecurityMaxBody(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(nil)
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) { c.HTTP.MaxBody = 4096 }))
	big := chatBody(strings.Repeat("a", 5000), true)
	testutil.ExpectAPIError(t, do(t, "POST", e.URL+chatPath, big, "Idempotency-Key", "sec-big"), 413, "request_too_large")
	testutil.ExpectAPIError(t, do(t, "POST", e.URL+"/v1/audio/speech", speechBody(strings.Repeat("a", 5000), false)), 413, "request_too_large")
	if n := len(up.authorizations()); n != 0 {
		t.Errorf("an oversized body reached the upstream (%d requests)", n)
	}
	if _, code := getStatus(t, e, "sec-big"); code != 404 {
		t.Errorf("an oversized request left a key (%d)", code)
	}
	small := uniquePrompt(t, "[tokens=2]")
	checkComplete(t, readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(small, true)), -1), small, 2)
}

// TestSecurityWebSocketMessageLimit: a client WebSocket message over
// MaxWSMessage closes the connection; the generation goes on.
func TestSecurityWebSocketMessageLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.HTTP.MaxWSMessage = 512 }))
	prompt := uniquePrompt(t, "[tokens=150] [delay=10ms]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "sec-ws")
	loc := secLocation(t, resp)
	readEvents(t, resp, 1)
	conn, wresp, err := websocket.DefaultDialer.DialContext(waitCtx(t, 5*time.Second), secWSURL(e, loc), nil)
	if err != nil {
		t.Fatal(err)
	}
	wresp.Body.Close()
	defer conn.Close()
	// A small message is fine (the server reads and ignores client messages).
	if err := conn.WriteMessage(websocket.TextMessage, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := conn.ReadMessage(); err != nil {
		t.Fatalf("the connection ended after a small message: %v", err)
	}
	start := time.Now()
	if err := conn.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte("x"), 2048)); err != nil {
		t.Fatal(err)
	}
	frames, err := secReadWS(conn, 5*time.Second)
	if err == nil || websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("the stream ended normally (%v) after an oversized message", err)
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection stayed open after an oversized message (%d frames)", len(frames))
	}
	for _, f := range frames {
		if f.Data == "[DONE]" {
			t.Fatal("the whole stream was delivered: the oversized message was not refused")
		}
	}
	t.Logf("closed %v after the oversized message: %v", time.Since(start).Round(time.Millisecond), err)
	// The generation is detached from readers and completes.
	waitState(t, e, "sec-ws", "completed")
	checkComplete(t, readEvents(t, do(t, "GET", e.URL+loc, ""), -1), prompt, 150)
}

// TestSecurityMaliciousUpstream: garbage, invalid UTF-8, oversized and
// never-ending events fail their generation cleanly (no terminal event, the
// key failed) while a normal stream alongside completes.
func TestSecurityMaliciousUpstream(t *testing.T) {
	t.Parallel()
	up := newSecUpstream(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		var mode string
		for _, m := range []string{"GARBAGE", "BADUTF8", "BADTYPE", "HUGEEVENT", "NEVERENDING", "ENDLESSLINES"} {
			if bytes.Contains(body, []byte(m)) {
				mode = m
			}
		}
		if mode == "" {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		rc := http.NewResponseController(w)
		write := func(s string) bool {
			_, err := io.WriteString(w, s)
			return err == nil && rc.Flush() == nil
		}
		switch mode {
		case "GARBAGE":
			write("this is not an event stream\n{\"choices\":[]}\n[DONE]\nretry: 1\n")
		case "BADUTF8":
			write("data: {\"ok\":1}\n\ndata: {\"bad\":\"\xff\xfe\"}\n\ndata: [DONE]\n\n")
		case "BADTYPE":
			write("event: \xc3\x28\ndata: {}\n\ndata: [DONE]\n\n")
		case "HUGEEVENT":
			write("data: {\"ok\":1}\n\ndata: " + strings.Repeat("y", 4096) + "\n\ndata: [DONE]\n\n")
		case "NEVERENDING", "ENDLESSLINES":
			piece := "a"
			if mode == "ENDLESSLINES" {
				piece = "data: a\n"
			}
			write("data: ")
			stop := time.After(10 * time.Second)
			for {
				select {
				case <-r.Context().Done():
					return true
				case <-stop:
					return true
				case <-time.After(50 * time.Millisecond):
				}
				if !write(piece) {
					return true
				}
			}
		}
		return true
	})
	// The idle timeout cuts the never-ending events; it is long enough that
	// the concurrent normal stream (an event every 5 ms) never meets it on a
	// busy box (500 ms did, beside a CPU burner under -race).
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) {
		c.Limits.MaxEventSize, c.Limits.IdleTimeout = 1024, 5*time.Second // the normal stream beside the cases must not hit it on a busy box (it did at 2 s)
	}))
	cases := []struct {
		mode   string
		codes  []string
		before int // events journaled before the failure
	}{
		{"GARBAGE", []string{"upstream_interrupted"}, 0},
		{"BADUTF8", []string{"upstream_invalid_event"}, 1},
		{"BADTYPE", []string{"upstream_invalid_event"}, 0},
		// An event over MaxEventSize, the parser's limit, fails the
		// generation as too large, after the event before it.
		{"HUGEEVENT", []string{"stream_too_large"}, 1},
		{"NEVERENDING", []string{"upstream_interrupted"}, 0},
		{"ENDLESSLINES", []string{"upstream_interrupted"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			wait := secNormalStream(t, e)
			key := "sec-up-" + strings.ToLower(tc.mode)
			start := time.Now()
			evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(tc.mode+" "+uniquePrompt(t, ""), true), "Idempotency-Key", key), -1)
			last := secLastError(t, evs, tc.codes...)
			if len(evs) != tc.before+1 {
				t.Errorf("%d events, want %d and the error", len(evs), tc.before)
			}
			st := waitState(t, e, key, "failed")
			if st.Events != tc.before+1 {
				t.Errorf("status %+v: want %d events stored", st, tc.before+1)
			}
			if strings.HasPrefix(tc.mode, "NEVER") || strings.HasPrefix(tc.mode, "ENDLESS") {
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("a never-ending event was cut after %v, want about the idle timeout", d)
				}
				if !strings.Contains(last.Data, "for 5s") {
					t.Errorf("error %s does not name the idle timeout", last.Data)
				}
			}
			wait()
		})
	}
}

// TestSecurityRangeOnStoredResult: a stored raw result (WAV) serves one byte
// range; malformed ranges are 400, unsatisfiable ones 416, both JSON.
func TestSecurityRangeOnStoredResult(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := do(t, "POST", e.URL+"/v1/audio/speech", speechBody(uniquePrompt(t, "[tokens=4]"), false), secHeaders([]string{"Idempotency-Key", "sec-wav"}, secBearer("alice"))...)
	loc := secLocation(t, resp)
	wav := []byte(readBody(t, resp))
	if len(wav) < 200 || string(wav[:4]) != "RIFF" {
		t.Fatalf("not a WAV (%d bytes)", len(wav))
	}
	n := len(wav)
	testutil.WaitState(t, e.URL, "sec-wav", "completed", secBearer("alice")...)
	get := func(rng string, header ...string) *http.Response {
		h := append([]string{}, header...)
		if rng != "" {
			h = append(h, "Range", rng)
		}
		return do(t, "GET", e.URL+loc, "", h...)
	}
	for _, tc := range []struct {
		rng        string
		start, end int // end exclusive
	}{
		{"bytes=0-99", 0, 100},
		{"bytes=-10", n - 10, n},
		{"bytes=5-", 5, n},
		{"bytes=100-100", 100, 101},
		{"bytes=10-99999999", 10, n},
		{"bytes=-99999999", 0, n},
		{"BYTES = 0-0", 0, 1},
	} {
		r := get(tc.rng)
		b := readBody(t, r)
		want := fmt.Sprintf("bytes %d-%d/%d", tc.start, tc.end-1, n)
		if r.StatusCode != 206 || b != string(wav[tc.start:tc.end]) || r.Header.Get("Content-Range") != want || r.Header.Get("Content-Type") != "audio/wav" {
			t.Errorf("%s: %d %q %d bytes, want 206 %q %d bytes", tc.rng, r.StatusCode, r.Header.Get("Content-Range"), len(b), want, tc.end-tc.start)
		}
	}
	// No Range, or several ranges: the whole result.
	for _, rng := range []string{"", "bytes=0-1,5-6"} {
		r := get(rng)
		if b := readBody(t, r); r.StatusCode != 200 || b != string(wav) || r.Header.Get("Accept-Ranges") != "bytes" {
			t.Errorf("%q: %d, %d bytes", rng, r.StatusCode, len(b))
		}
	}
	for _, rng := range []string{"bytes=abc", "items=0-1", "bytes=5-1", "bytes=", "bytes=--1", "bytes=1-2-3", "bytes=0x10-", "bytes=+1-2", "bytes=0-1,x"} {
		testutil.ExpectAPIError(t, get(rng), 400, "invalid_range")
	}
	for _, rng := range []string{"bytes=99999999-", fmt.Sprintf("bytes=%d-", n)} {
		r := get(rng)
		if cr := r.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes */%d", n) {
			t.Errorf("%s: Content-Range %q", rng, cr)
		}
		testutil.ExpectAPIError(t, r, 416, "range_not_satisfiable")
	}
	// Ranges do not open another tenant's key: a valid Range is still 404
	// without the token.
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-wav", "", "Range", "bytes=0-99"), secNotFound(t, e), "range without token")
}

// TestSecurityBadCursorAndUnknownPath: a malformed last_event_id query is
// 400; unknown paths are JSON 404s.
func TestSecurityBadCursorAndUnknownPath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), "Idempotency-Key", "sec-cursor")
	loc := secLocation(t, resp)
	readEvents(t, resp, -1)
	for _, q := range []string{"zzz", "1-x-3", "0-1-1", "1-1", "-1-1-1", "01-1-1", strings.Repeat("9", 70), "99-1-1"} {
		testutil.ExpectAPIError(t, do(t, "GET", e.URL+loc+"&last_event_id="+url.QueryEscape(q), ""), 400, "invalid_last_event_id")
		testutil.ExpectAPIError(t, do(t, "GET", e.URL+"/v1/streams/sec-cursor?last_event_id="+url.QueryEscape(q), ""), 400, "invalid_last_event_id")
	}
	for _, p := range []string{"/nothing", "/v1/nothing", "/v1/streams", "/v1/streams/", "/.env", "/v1/streams/a/b"} { // /v1/nothing: the upstream's 404, passed through
		testutil.ExpectAPIError(t, do(t, "GET", e.URL+p, ""), 404, "not_found")
	}
	testutil.ExpectAPIError(t, do(t, "POST", e.URL+"/nothing", "{}"), 404, "not_found")
	testutil.ExpectAPIError(t, do(t, "DELETE", e.URL+"/v1/streams/sec-cursor", ""), 405, "method_not_allowed")
}

// secLogBuffer is a log sink safe for concurrent handlers.
type secLogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *secLogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *secLogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSecurityLogsHoldNoSecrets: at debug level, across successes, upstream
// errors, broken streams, capability reads and forged tokens, the log never
// holds a credential, a capability token, the word Bearer or the upstream key.
func TestSecurityLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	const (
		bearer      = "sk-live-SECRET-1234"
		upstreamKey = "sk-upstream-SECRET-5678"
	)
	// The upstream echoes the credential it got into its error bodies, as
	// some do: even then it must not reach the log.
	echo := func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !bytes.Contains(body, []byte("ECHO401")) {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`, r.Header.Get("Authorization"))
		return true
	}
	for _, mode := range []auth.Mode{auth.Passthrough, auth.Static} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			var buf secLogBuffer
			up := newSecUpstream(echo)
			e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) {
				c.Auth.Mode = mode
				if mode == auth.Static {
					c.Auth.ProxyKeys, c.Auth.UpstreamKey = []string{bearer}, upstreamKey
				}
				c.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}))
			auth := secBearer(bearer)
			var tokens []string
			post := func(key, prompt string, stream bool) *http.Response {
				resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, stream), secHeaders([]string{"Idempotency-Key", key}, auth)...)
				if loc := resp.Header.Get("Location"); loc != "" {
					tokens = append(tokens, secToken(t, loc))
				}
				return resp
			}
			readEvents(t, post("log-ok", uniquePrompt(t, "[tokens=3]"), true), -1)
			readBody(t, post("log-400", uniquePrompt(t, "[status=400]"), true))
			readBody(t, post("log-echo", "ECHO401 "+uniquePrompt(t, ""), true))
			readEvents(t, post("log-abort", uniquePrompt(t, "[tokens=10] [abort_after=3]"), true), -1)
			readBody(t, post("log-json", uniquePrompt(t, "[tokens=2]"), false))
			// Readers: capability, credential, forged token, other credential, drop mid-stream.
			slow := post("log-slow", uniquePrompt(t, "[tokens=30] [delay=5ms]"), true)
			readEvents(t, slow, 2)
			loc := "/v1/streams/log-slow?token=" + tokens[len(tokens)-1]
			readEvents(t, do(t, "GET", e.URL+loc, "", "Last-Event-ID", "1-1-1"), 3)
			readBody(t, do(t, "GET", e.URL+"/v1/streams/log-ok?token="+tokens[0][:len(tokens[0])-2]+"xx", ""))
			readBody(t, do(t, "GET", e.URL+"/v1/streams/log-ok", "", secBearer("sk-live-SECRET-wrong")...))
			readBody(t, do(t, "POST", e.URL+chatPath, chatBody("x", true), secBearer("sk-live-SECRET-wrong")...))
			if conn, r, err := websocket.DefaultDialer.DialContext(waitCtx(t, 5*time.Second), secWSURL(e, loc), nil); err == nil {
				r.Body.Close()
				_, _ = secReadWS(conn, 5*time.Second)
				conn.Close()
			}
			testutil.WaitState(t, e.URL, "log-slow", "completed", auth...)
			testutil.WaitState(t, e.URL, "log-abort", "failed", auth...)

			log := buf.String()
			if !strings.Contains(log, "upstream call failed") || !strings.Contains(log, "generation ended") {
				t.Fatalf("the scenario did not log what it should (%d bytes):\n%s", len(log), log)
			}
			secrets := map[string]string{"the bearer": bearer, "the upstream key": upstreamKey, "SECRET": "SECRET", "Bearer": "Bearer", "bearer": "bearer"}
			for i, tok := range tokens {
				secrets[fmt.Sprintf("token %d", i)] = tok
				secrets[fmt.Sprintf("token %d MAC", i)] = tok[strings.LastIndexByte(tok, '.')+1:]
			}
			for what, s := range secrets {
				if i := strings.Index(log, s); i >= 0 {
					t.Errorf("the log holds %s: …%s…", what, log[max(0, i-120):min(len(log), i+len(s)+40)])
				}
			}
			t.Logf("%d log lines checked", strings.Count(log, "\n"))
			if os.Getenv("REPRISE_TEST_DEBUG") != "" {
				t.Log(log)
			}
		})
	}
}

// TestSecurityLowercaseBearerIsACredential: the auth scheme is
// case-insensitive (RFC 9110 §11.1). In passthrough "bearer sk-…" is the
// caller's credential, forwarded upstream, and its tenant's keys are its own:
// a reader without credentials is told the key does not exist.
func TestSecurityLowercaseBearerIsACredential(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), "Idempotency-Key", "sec-lower", "Authorization", "bearer sk-alice"), -1)
	secSameNotFound(t, do(t, "GET", e.URL+"/v1/streams/sec-lower", ""), secNotFound(t, e), "anonymous reads a lowercase-bearer key")
}

// TestSecurityUpstreamKeyEchoRedacted: an upstream's error body that echoes
// the credential it got (OpenAI masks all but 4 characters; others echo it
// whole) reaches neither the caller nor a reader with reprise's upstream key
// in it (static mode: the key is reprise's, never a caller's).
func TestSecurityUpstreamKeyEchoRedacted(t *testing.T) {
	t.Parallel()
	const upstreamKey = "sk-upstream-echo-9999"
	up := newSecUpstream(func(w http.ResponseWriter, r *http.Request, _ []byte) bool {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		_, _ = fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s","type":"invalid_request_error","code":"invalid_api_key"}}`, r.Header.Get("Authorization"))
		return true
	})
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys, c.Auth.UpstreamKey = auth.Static, []string{"pk-1"}, upstreamKey
	}))
	resp := do(t, "POST", e.URL+chatPath, chatBody("x", true), "Authorization", "Bearer pk-1", "Idempotency-Key", "sec-echo")
	if b := readBody(t, resp); strings.Contains(b, upstreamKey) {
		t.Errorf("the client got the upstream key: %s", b)
	}
	if evs := readEvents(t, do(t, "GET", e.URL+"/v1/streams/sec-echo", "", "Authorization", "Bearer pk-1"), -1); strings.Contains(lastEvent(t, evs).Data, upstreamKey) {
		t.Errorf("a reader got the upstream key: %s", lastEvent(t, evs).Data)
	}
}

// TestSecurityNonStreamedReadersTakeReaderPlaces: GETs of a non-streamed key
// (awaitResult, serveResult), each of which polls the record and buffers the
// whole result, count against MaxReadersPerKey like a stream's readers.
func TestSecurityNonStreamedReadersTakeReaderPlaces(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.HTTP.MaxReadersPerKey = 1 }))
	body := chatBody(uniquePrompt(t, "[tokens=30] [delay=20ms]"), false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = secRawGet(e, "POST", chatPath, body, "Idempotency-Key", "sec-json")
	}()
	defer func() { <-done }()
	testutil.WaitState(t, e.URL, "sec-json", "in_progress")
	codes := make(chan int, 3)
	for range 3 {
		go func() {
			r, err := secRawGet(e, "GET", "/v1/streams/sec-json", "")
			if err != nil {
				codes <- 0
				return
			}
			codes <- r
		}()
	}
	n429 := 0
	for range 3 {
		if <-codes == 429 {
			n429++
		}
	}
	if n429 < 2 {
		t.Errorf("3 concurrent readers of a non-streamed key with MaxReadersPerKey 1: %d got 429, want ≥ 2", n429)
	}
}

// secRawGet sends a request from any goroutine and returns its status once
// the body is read.
func secRawGet(e *env, method, path, body string, header ...string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := send(ctx, method, e.URL+path, body, header...)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}
