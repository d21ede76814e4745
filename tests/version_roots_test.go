package tests

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// Providers whose API is not under /v1: an upstream URL names the API's
// version root. Each row of the README's provider table is an
// upstreams-file line; TestVersionRoots serves the fake model at that
// line's root (and nowhere else) and runs the proxy's promises through it.

// rootedFake serves the fake model at one version root, as a provider
// does: a request under root, with the fixed query and the key in the
// header the provider reads, is the fake's /v1 request; anything else is
// counted as a stray and answered 404.
type rootedFake struct {
	llm    *mockllm.Server
	root   string     // the version root's path, e.g. /api/paas/v4
	query  url.Values // fixed parameters every request must carry
	header string     // the header holding the key: Authorization, X-Api-Key or Api-Key
	key    string     // its value

	mu     sync.Mutex
	strays []string // what reached the provider outside its root, or without its key
}

func (f *rootedFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, under := strings.CutPrefix(r.URL.Path, f.root+"/")
	ok := under && r.Header.Get(f.header) == f.key
	for k, v := range f.query {
		ok = ok && r.URL.Query().Get(k) == v[0]
	}
	if !ok {
		f.mu.Lock()
		f.strays = append(f.strays, r.Method+" "+r.URL.RequestURI()+" "+f.header+"="+r.Header.Get(f.header))
		f.mu.Unlock()
		http.Error(w, `{"error":{"message":"not here","type":"invalid_request_error","code":"not_found"}}`, http.StatusNotFound)
		return
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path, r2.URL.RawPath = "/v1/"+rest, ""
	f.llm.ServeHTTP(w, r2)
}

func (f *rootedFake) stray() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.strays...)
}

// providerLines reads the README's provider table: each row's upstreams-file line.
func providerLines(t *testing.T) []proxy.RouteLine {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(composeRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := regexp.MustCompile(`(?s)### Any OpenAI-compatible provider.*?\n\| provider \| upstreams-file line \|\n\|---\|---\|\n(.*?)\n\n`).FindSubmatch(readme)
	if sec == nil {
		t.Fatal("README.md: no provider table under \"### Any OpenAI-compatible provider\"")
	}
	var text strings.Builder
	for _, row := range regexp.MustCompile("(?m)^\\|[^|]*\\| `([^`]+)` \\|$").FindAllSubmatch(sec[1], -1) {
		text.Write(row[1])
		text.WriteByte('\n')
	}
	lines, err := proxy.ParseRoutes(text.String())
	if err != nil {
		t.Fatalf("README.md's provider table: %v", err)
	}
	if len(lines) < 10 {
		t.Fatalf("README.md's provider table has %d rows, want the 10 providers", len(lines))
	}
	return lines
}

// TestVersionRoots: for each provider of the README's table, the fake
// model mounted at the line's version root, with its key header and fixed
// query: a keyed stream resumes after a drop and replays whole, a keyless
// retry attaches, a pass-through GET reaches the root, and nothing — a
// path that climbs included — reaches the provider outside its root or
// without its key.
func TestVersionRoots(t *testing.T) {
	t.Parallel()
	for _, line := range providerLines(t) {
		t.Run(line.Name, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(line.URL)
			if err != nil {
				t.Fatal(err)
			}
			root := strings.TrimSuffix(u.Path, "/") // the provider's own root, as its docs give it
			if root == "" {
				root = "/v1"
			}
			messages := len(line.Paths) == 1 && line.Paths[0] == messagesPath
			fake := &rootedFake{llm: mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond}), root: root, query: u.Query(), key: "sk-" + line.Name}
			switch {
			case line.Auth == auth.HeaderAPIKey:
				fake.header = "Api-Key"
			case line.Auth == auth.HeaderXAPIKey || line.Auth == "" && messages:
				fake.header = "X-Api-Key"
			default:
				fake.header, fake.key = "Authorization", "Bearer "+fake.key
			}
			e := newEnv(t, withUpstream(fake), withConfig(func(c *proxy.Config) {
				c.Auth.Mode, c.Auth.ProxyKeys = auth.Static, []string{"pk-roots-1"}
				at := &url.URL{Scheme: c.Upstream.Scheme, Host: c.Upstream.Host, Path: u.Path, RawQuery: u.RawQuery}
				c.Routes = []proxy.Route{{Name: line.Name, URL: at, Key: "sk-" + line.Name, KeyHeader: line.Auth, Paths: line.Paths, Models: line.Models}}
			}))
			e.LLM = fake.llm
			cred := []string{"Authorization", "Bearer pk-roots-1", "Content-Type", "application/json"}
			path, body := chatPath, chatBody
			if messages {
				path, body = messagesPath, func(prompt string, stream bool) string {
					return `{"model":"mock-1","max_tokens":256,"stream":` + map[bool]string{true: "true", false: "false"}[stream] +
						`,"messages":[{"role":"user","content":` + quote(prompt) + `}]}`
				}
			}

			// Keyed: a drop after 3 events, the resume from the last id, a replay.
			prompt := uniquePrompt(t, "[tokens=30] [delay=3ms]")
			key := "k-roots-" + line.Name
			first := readEvents(t, do(t, "POST", e.URL+path, body(prompt, true), append(cred, "Idempotency-Key", key)...), 3)
			rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Authorization", "Bearer pk-roots-1", "Last-Event-ID", lastID(first)), -1)
			resumed := append(first, rest...)
			checkUnique(t, resumed)
			testutil.WaitState(t, e.URL, key, "completed", "Authorization", "Bearer pk-roots-1")
			replay := do(t, "POST", e.URL+path, body(prompt, true), append(cred, "Idempotency-Key", key)...)
			if replay.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("the same key again: Idempotent-Replayed %q, want true", replay.Header.Get("Idempotent-Replayed"))
			}
			replayed := readEvents(t, replay, -1)
			if len(replayed) != len(resumed) || len(replayed) < 30 {
				t.Fatalf("resumed %d events, replayed %d: want the same whole stream", len(resumed), len(replayed))
			}
			for i := range replayed {
				if replayed[i] != resumed[i] {
					t.Fatalf("event %d: resumed %+v, replayed %+v", i, resumed[i], replayed[i])
				}
			}
			if last := replayed[len(replayed)-1]; last.Data != "[DONE]" && last.Type != "message_stop" {
				t.Errorf("the stream ends with %+v, want the format's terminal event", last)
			}
			if g := testutil.Settled(t, fake.llm.Ledger(), prompt, 1); g.Generations != 1 {
				t.Errorf("keyed: ledger %+v, want 1 generation", g)
			}

			// Keyless: the client leaves, the same request again attaches or replays.
			prompt = uniquePrompt(t, "[tokens=40] [delay=20ms]")
			resp := do(t, "POST", e.URL+path, body(prompt, true), cred...)
			readEvents(t, resp, 2)
			waitLeft(t, e.URL, 1)
			retry := do(t, "POST", e.URL+path, body(prompt, true), cred...)
			if retry.Header.Get("Idempotency-Key") != resp.Header.Get("Idempotency-Key") {
				t.Errorf("keyless retry: key %q, want the first request's %q", retry.Header.Get("Idempotency-Key"), resp.Header.Get("Idempotency-Key"))
			}
			if evs := readEvents(t, retry, -1); len(evs) < 40 {
				t.Errorf("keyless retry: %d events, want the whole stream", len(evs))
			}
			if g := testutil.Settled(t, fake.llm.Ledger(), prompt, 1); g.Generations != 1 {
				t.Errorf("keyless: ledger %+v, want 1 generation", g)
			}

			// Pass-through, inside the root; climbing out of it is refused.
			if !messages {
				models := do(t, "GET", e.URL+"/v1/models", "", cred...)
				if b := readBody(t, models); models.StatusCode != http.StatusOK || !strings.Contains(b, `"object":"list"`) {
					t.Errorf("GET /v1/models: %d %s", models.StatusCode, b)
				}
			}
			for _, p := range []string{"/v1/../admin", "/v1/%2e%2e/%2e%2e/admin", "/v1/..;/admin", "/v1/models%3B/..%3B/admin"} {
				resp := do(t, "GET", e.URL+p, "", cred...)
				if b := readBody(t, resp); resp.StatusCode == http.StatusOK {
					t.Errorf("GET %s: %d %s, want a refusal", p, resp.StatusCode, b)
				}
			}
			if s := fake.stray(); len(s) != 0 {
				t.Errorf("requests reached the provider outside its root %s or without its key: %q", root, s)
			}
		})
	}
}
