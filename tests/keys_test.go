package tests

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// The proxy keys of these tests: team-a has a budget one generation of the
// fake model spends (20 completion tokens at costCompletion each are 40)
// and may use the mock models only; team-b has none.
const (
	keyA      = "pk-team-a-3f9c1a7e5b2d"
	keyB      = "pk-team-b-9d8c7b6a5f4e"
	keyC      = "pk-team-c-7a1b2c3d4e5f"
	keysFile  = "team-a " + keyA + " budget=30/day models=mock-*\nteam-b " + keyB + "\n"
	keysFile2 = keysFile + "team-c " + keyC + "\n"
)

func parseKeys(tb testing.TB, text string) []auth.Key {
	tb.Helper()
	keys, err := auth.ParseKeys("proxy-keys", text)
	if err != nil {
		tb.Fatal(err)
	}
	return keys
}

// withKeys runs static auth with the named keys of text, and prices.
func withKeys(tb testing.TB, text string) envOption {
	tb.Helper()
	tab := testPrices(tb)
	keys := parseKeys(tb, text)
	return withConfig(func(c *proxy.Config) {
		c.Prices = tab
		c.Auth.Mode, c.Auth.Keys, c.Auth.UpstreamKey = auth.Static, keys, "sk-operator"
	})
}

type usageView struct {
	KeyName string `json:"key_name"`
	Budget  *struct {
		Limit    float64 `json:"limit"`
		Spent    float64 `json:"spent"`
		Exceeded bool    `json:"exceeded"`
	} `json:"budget"`
	Spent map[string]float64 `json:"spent"`
}

func usageOf(tb testing.TB, base, key string) usageView {
	tb.Helper()
	resp := do(tb, "GET", base+"/usage", "", "Authorization", "Bearer "+key)
	body := readBody(tb, resp)
	var u usageView
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &u) != nil {
		tb.Fatalf("GET /usage: %d %s", resp.StatusCode, body)
	}
	return u
}

// TestProxyKeysBudgetFleet: a named key's spend shows under its name in
// the status, GET /usage and the metrics; once it passes its budget on one
// instance its new generations are refused 429 budget_exceeded, with
// Retry-After at the day's end, on that instance and on another on the
// same NATS — while a replay of what it paid for is still served, and
// another key is not held to it. A model outside the key's models= is
// refused 403 model_not_allowed.
func TestProxyKeysBudgetFleet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withNATSPort(), withKeys(t, keysFile))
	nc, err := nats.Connect(e.natsURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	upstream, _ := url.Parse(e.llmSrv.URL)
	regB := prometheus.NewRegistry()
	b, _, bURL := serveProxy(t, proxy.Config{NATS: nc, Upstream: upstream, Logger: testLogger(), Prices: testPrices(t), Registerer: regB,
		Auth: auth.Config{Secret: testSecret, Mode: auth.Static, Keys: parseKeys(t, keysFile), UpstreamKey: "sk-operator"}})
	t.Cleanup(func() { stopProxy(t, b, 10*time.Second, false) })

	bearerA := []string{"Authorization", "Bearer " + keyA}
	if resp := do(t, "POST", e.URL+chatPath, strings.Replace(chatBody("x", true), "mock-1", "gpt-4o", 1), bearerA...); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(readBody(t, resp), "model_not_allowed") {
		t.Errorf("team-a asking for gpt-4o: %d, want 403 model_not_allowed", resp.StatusCode)
	}

	prompt := uniquePrompt(t, "[tokens=20]")
	body := chatBody(prompt, true)
	readEvents(t, do(t, "POST", e.URL+chatPath, body, append([]string{"Idempotency-Key", "k-budget-1"}, bearerA...)...), -1)
	testutil.WaitState(t, e.URL, "k-budget-1", "completed", bearerA...)
	status := readBody(t, do(t, "GET", e.URL+"/v1/streams/k-budget-1", "", append([]string{"Accept", "application/json"}, bearerA...)...))
	if !strings.Contains(status, `"key_name":"team-a"`) || strings.Contains(status, keyA) {
		t.Errorf("status: %s; want key_name team-a and never the key", status)
	}
	testutil.Eventually(t, 10*time.Second, "A's usage of team-a over its budget", func() bool {
		u := usageOf(t, e.URL, keyA)
		return u.Budget != nil && u.Budget.Exceeded
	})
	if u := usageOf(t, e.URL, keyA); u.KeyName != "team-a" || u.Spent["day"] < 30 || u.Budget.Limit != 30 {
		t.Errorf("A's usage of team-a: %+v", u)
	}

	// A new generation of team-a: refused on A, with Retry-After at the
	// day's end.
	resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), append([]string{"Idempotency-Key", "k-budget-2"}, bearerA...)...)
	got := readBody(t, resp)
	_, end := dayWindow(time.Now())
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(got, "budget_exceeded") || ra <= 0 || ra > int(time.Until(end).Seconds())+2 {
		t.Errorf("team-a over budget on A: %d Retry-After %q %s; want 429 budget_exceeded until the day's end", resp.StatusCode, resp.Header.Get("Retry-After"), got)
	}
	// What it paid for is still served.
	replay := do(t, "POST", e.URL+chatPath, body, append([]string{"Idempotency-Key", "k-budget-1"}, bearerA...)...)
	if replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("a replay over budget: %d, want it served", replay.StatusCode)
	}
	readEvents(t, replay, -1)

	// B learns the spend through JetStream and refuses too.
	testutil.Eventually(t, 10*time.Second, "B's usage of team-a over its budget", func() bool {
		u := usageOf(t, bURL, keyA)
		return u.Budget != nil && u.Budget.Exceeded
	})
	resp = do(t, "POST", bURL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), append([]string{"Idempotency-Key", "k-budget-3"}, bearerA...)...)
	if got := readBody(t, resp); resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(got, "budget_exceeded") {
		t.Errorf("team-a over budget on B: %d %s; want 429 budget_exceeded", resp.StatusCode, got)
	}
	if spent := gathered(t, regB, "reprise_key_budget_spent", "team-a"); spent < 30 {
		t.Errorf("B's reprise_key_budget_spent{key=team-a} = %g, want A's spend", spent)
	}
	if n := gathered(t, regB, "reprise_key_budget_refused_total", "team-a"); n != 1 {
		t.Errorf("B's reprise_key_budget_refused_total{key=team-a} = %g, want 1", n)
	}
	if c := metric(t, e, "reprise_key_cost_total", "team-a"); c < 30 {
		t.Errorf("A's reprise_key_cost_total{key=team-a} = %g, want the generation's cost", c)
	}
	// Another key is not held to team-a's budget.
	bearerB := []string{"Authorization", "Bearer " + keyB}
	readEvents(t, do(t, "POST", bURL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), append([]string{"Idempotency-Key", "k-budget-4"}, bearerB...)...), -1)
}

func dayWindow(t time.Time) (start, end time.Time) {
	t = t.UTC()
	start = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	return start, start.AddDate(0, 0, 1)
}

// TestProxyKeysReload: a reload adds a key while a stream runs; the stream
// completes, the new key is accepted; a configuration with a duplicate name
// is refused and the keys in force stay.
func TestProxyKeysReload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withKeys(t, keysFile))
	bearerB := []string{"Authorization", "Bearer " + keyB}
	bearerC := []string{"Authorization", "Bearer " + keyC}
	if resp := do(t, "POST", e.URL+chatPath, chatBody("x", false), bearerC...); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("team-c before the reload: %d, want 401", resp.StatusCode)
	}
	prompt := uniquePrompt(t, "[tokens=40] [delay=10ms]")
	running := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), append([]string{"Idempotency-Key", "k-reload"}, bearerB...)...)
	// The stream is read in one go; the reload comes once its first events did.
	began, read := make(chan struct{}), make(chan []event, 1)
	go func() {
		defer running.Body.Close()
		var out []event
		for ev, err := range sse.Read(running.Body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
			if err != nil {
				break
			}
			if out = append(out, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data}); len(out) == 3 {
				close(began)
			}
		}
		read <- out
	}()
	select {
	case <-began:
	case <-waitCtx(t, 10*time.Second).Done():
		t.Fatal("the stream's first events did not come")
	}

	changed, err := e.p.Reload(context.Background(), proxy.Reload{Keys: parseKeys(t, keysFile2)})
	if err != nil || len(changed) != 1 || changed[0] != "proxy keys added: team-c" {
		t.Fatalf("reload: %q, %v; want team-c added", changed, err)
	}
	if evs := <-read; len(evs) != 40+3 || lastEvent(t, evs).Data != "[DONE]" {
		t.Errorf("the stream running through the reload: %d events, want all 43", len(evs))
	}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), bearerC...), -1)

	bad := parseKeys(t, keysFile2)
	bad[2].Name = "team-a"
	if _, err := e.p.Reload(context.Background(), proxy.Reload{Keys: bad}); err == nil || !strings.Contains(err.Error(), `the name "team-a" again`) {
		t.Errorf("a duplicate name: %v, want it refused", err)
	}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), bearerC...), -1)

	// Routes: one that serves embeddings only leaves chat unrouted; a
	// route without a URL is refused and the routes in force stay.
	up, _ := url.Parse(e.llmSrv.URL)
	changed, err = e.p.Reload(context.Background(), proxy.Reload{Routes: []proxy.Route{{Name: "embed", URL: up, Paths: []string{"/v1/embeddings"}}}})
	if err != nil || len(changed) != 1 || !strings.HasPrefix(changed[0], "routes: embed=") {
		t.Fatalf("routes reload: %q, %v", changed, err)
	}
	if resp := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), bearerC...); resp.StatusCode != http.StatusNotFound ||
		!strings.Contains(readBody(t, resp), "no_upstream") {
		t.Errorf("chat with embeddings routed only: %d, want 404 no_upstream", resp.StatusCode)
	}
	if _, err := e.p.Reload(context.Background(), proxy.Reload{Routes: []proxy.Route{{Name: "broken"}}}); err == nil {
		t.Error("a route without a URL was taken")
	}
	if _, err := e.p.Reload(context.Background(), proxy.Reload{Routes: []proxy.Route{{Name: "all", URL: up}}}); err != nil {
		t.Fatal(err)
	}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=2]"), true), bearerC...), -1)
}

// TestProxyKeysNamesInLogs: the access line of a generation a named key
// started has the key's name and the model, its billed line the name, the
// tokens and the cost — never the key; its attempt log has the name; a path outside the key's paths= is
// 403 path_not_allowed and a forwarded POST for a model outside its
// models= is 403 model_not_allowed, sent nowhere.
func TestProxyKeysNamesInLogs(t *testing.T) {
	t.Parallel()
	var logs logLines
	var keys envOptions
	withKeys(t, keysFile+"embed pk-embed-5c4b3a2f1e0d paths=/v1/embeddings\n")(&keys)
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		keys.configure(c)
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}))
	bearerA := []string{"Authorization", "Bearer " + keyA}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=5]"), true), append([]string{"Idempotency-Key", "k-names"}, bearerA...)...), -1)
	testutil.WaitState(t, e.URL, "k-names", "completed", bearerA...)
	lines := logs.find(t, "request", func(m map[string]any) bool { return m["key"] == "k-names" && m["decision"] == "start" })
	if len(lines) != 1 {
		t.Fatalf("access lines of k-names' start: %v", lines)
	}
	if l := lines[0]; l["key_name"] != "team-a" || l["model"] != "mock-1" {
		t.Errorf("access line %v; want key_name team-a, model mock-1", l)
	}
	var billed []map[string]any
	testutil.Eventually(t, 10*time.Second, "the generation billed line", func() bool {
		billed = logs.find(t, "generation billed", func(m map[string]any) bool { return m["key"] == "k-names" })
		return len(billed) > 0
	})
	if l := billed[0]; l["key_name"] != "team-a" || l["model"] != "mock-1" || l["completion_tokens"] != float64(5) || l["cost"] == nil {
		t.Errorf("billed line %v; want key_name team-a, model mock-1, 5 completion tokens and a cost", l)
	}
	if recs := attemptLog(t, e.URL, "k-names", bearerA...); len(recs) == 0 || recs[0].KeyName != "team-a" {
		t.Errorf("attempt log %+v; want key_name team-a", recs)
	}
	logs.mu.Lock()
	leaked := strings.Contains(logs.buf.String(), keyA)
	logs.mu.Unlock()
	if leaked {
		t.Error("the key itself is in the log")
	}

	embed := []string{"Authorization", "Bearer pk-embed-5c4b3a2f1e0d"}
	if resp := do(t, "POST", e.URL+chatPath, chatBody("x", true), embed...); resp.StatusCode != http.StatusForbidden || !strings.Contains(readBody(t, resp), "path_not_allowed") {
		t.Errorf("embed on chat: %d, want 403 path_not_allowed", resp.StatusCode)
	}
	// Answered by reprise: the upstream's answer would not be this code.
	if resp := do(t, "POST", e.URL+"/v1/embeddings", `{"model":"text-embedding-3-small","input":"x"}`, bearerA...); resp.StatusCode != http.StatusForbidden ||
		!strings.Contains(readBody(t, resp), "model_not_allowed") {
		t.Errorf("team-a embeddings of a model outside mock-*: %d, want 403 model_not_allowed", resp.StatusCode)
	}
}
