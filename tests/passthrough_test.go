package tests

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestPassThrough: what reprise does not journal still works through its
// base URL: the SDK's models.list() and an embeddings call; a keyed
// embeddings POST is executed once and replayed, 422 with another body;
// reprise's own namespace is never forwarded.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	client := openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
	ctx := waitCtx(t, 20*time.Second)
	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) != 1 || models.Data[0].ID != mockllm.DefaultModel {
		t.Fatalf("models.list() = %+v, %v", models, err)
	}
	input := uniquePrompt(t, "embed me")
	params := openai.EmbeddingNewParams{Model: "mock-embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String(input)}}
	plain, err := client.Embeddings.New(ctx, params)
	if err != nil || len(plain.Data) != 1 || len(plain.Data[0].Embedding) != 8 {
		t.Fatalf("embeddings: %+v, %v", plain, err)
	}
	if g := e.LLM.Ledger().Get(input); g.Generations != 1 {
		t.Fatalf("a keyless pass-through: ledger %+v, want 1 generation", g)
	}
	for i := range 2 {
		res, err := client.Embeddings.New(ctx, params, option.WithHeader("Idempotency-Key", "k-embed"))
		if err != nil || res.Data[0].Embedding[0] != plain.Data[0].Embedding[0] {
			t.Fatalf("keyed call %d: %+v, %v", i, res, err)
		}
	}
	if g := e.LLM.Ledger().Get(input); g.Generations != 2 {
		t.Errorf("two keyed calls: ledger %+v, want 2 generations in all (one keyless, one keyed)", g)
	}
	st := testutil.WaitState(t, e.URL, "k-embed", "completed", "Authorization", "Bearer sk-test")
	if st.Usage == nil || st.Usage.PromptTokens == 0 {
		t.Errorf("embeddings usage %+v", st.Usage)
	}
	other := openai.EmbeddingNewParams{Model: "mock-embed", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("other")}}
	if _, err := client.Embeddings.New(ctx, other, option.WithHeader("Idempotency-Key", "k-embed")); err == nil || !strings.Contains(err.Error(), "422") {
		t.Errorf("the same key with another body: %v, want 422", err)
	}
	// The upstream's own answers pass unchanged, errors included.
	resp := do(t, "POST", e.URL+"/v1/fine_tuning/jobs", `{}`, "Authorization", "Bearer sk-test")
	if body := readBody(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "unknown path") {
		t.Errorf("an unknown upstream path: %d %s, want the upstream's 404", resp.StatusCode, body)
	}
	resp = do(t, "GET", e.URL+"/v1/streams/a/b", "")
	if body := readBody(t, resp); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "unknown path") {
		t.Errorf("reprise's namespace: %d %s, want reprise's own 404", resp.StatusCode, body)
	}
}

// TestPassThroughStatic: in static auth the caller's proxy key never
// reaches the upstream, which gets the configured key; a caller without a
// valid proxy key is refused before anything is forwarded.
func TestPassThroughStatic(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []http.Header
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"list","data":[]}`))
	})
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys, c.Auth.UpstreamKey = auth.Static, []string{"pk-1"}, "sk-upstream"
	}))
	if resp := do(t, "GET", e.URL+"/v1/models", "", "Authorization", "Bearer pk-wrong"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a wrong proxy key: %d", resp.StatusCode)
	}
	// The caller does not pick the organization or project the proxy's key
	// bills; an Anthropic call (a path under /v1/messages, plain or keyed)
	// gets the key as x-api-key.
	picks := []string{"Authorization", "Bearer pk-1", "OpenAI-Organization", "org-caller", "OpenAI-Project", "proj-caller"}
	for _, req := range []struct{ method, path, body, key, want string }{
		{"GET", "/v1/models", "", "", "bearer"},
		{"POST", "/v1/embeddings", `{"model":"e","input":"x"}`, "k-static-emb", "bearer"},
		{"POST", "/v1/messages/count_tokens", `{"model":"m","messages":[]}`, "", "x-api-key"},
		{"POST", "/v1/messages/count_tokens", `{"model":"m","messages":[]}`, "k-static-count", "x-api-key"},
	} {
		mu.Lock()
		seen = nil
		mu.Unlock()
		header := picks
		if req.key != "" {
			header = append(header[:len(header):len(header)], "Idempotency-Key", req.key)
		}
		resp := do(t, req.method, e.URL+req.path, req.body, header...)
		readBody(t, resp)
		mu.Lock()
		got := seen
		mu.Unlock()
		if resp.StatusCode != 200 || len(got) != 1 {
			t.Errorf("%s %s (key %q): %d, %d upstream requests", req.method, req.path, req.key, resp.StatusCode, len(got))
			continue
		}
		h := got[0]
		cred := h.Get("Authorization") == "Bearer sk-upstream" && h.Get("X-Api-Key") == ""
		if req.want == "x-api-key" {
			cred = h.Get("X-Api-Key") == "sk-upstream" && h.Get("Authorization") == ""
		}
		if !cred || h.Get("OpenAI-Organization") != "" || h.Get("OpenAI-Project") != "" {
			t.Errorf("%s %s (key %q): the upstream saw Authorization %q, X-Api-Key %q, organization %q, project %q; want the proxy's key as %s and no caller's organization or project",
				req.method, req.path, req.key, h.Get("Authorization"), h.Get("X-Api-Key"), h.Get("OpenAI-Organization"), h.Get("OpenAI-Project"), req.want)
		}
	}
}

// TestShouldRetrySteering: an answer a retry cannot change (reprise's own
// 400/413/415/422, the upstream's 4xx) carries X-Should-Retry: false; a 409
// in progress carries Retry-After instead, so the SDK's retry attaches.
func TestShouldRetrySteering(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAttachWait(50*time.Millisecond))
	for _, tc := range []struct {
		name, body, key string
		header          []string
		status          int
	}{
		{"malformed JSON", `{`, "k-steer-1", nil, 400},
		{"upstream 404", chatBody(uniquePrompt(t, "[status=404]"), true), "k-steer-2", nil, 404},
		{"wrong media type", chatBody("x", true), "k-steer-3", []string{"Content-Type", "text/plain"}, 415},
	} {
		resp := do(t, "POST", e.URL+chatPath, tc.body, append([]string{"Idempotency-Key", tc.key}, tc.header...)...)
		readBody(t, resp)
		if resp.StatusCode != tc.status || resp.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("%s: %d, X-Should-Retry %q; want %d, false", tc.name, resp.StatusCode, resp.Header.Get("X-Should-Retry"), tc.status)
		}
	}
	prompt := uniquePrompt(t, "[tokens=50] [delay=20ms]")
	slow := chatBody(prompt, false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := send(waitCtx(t, 20*time.Second), "POST", e.URL+chatPath, slow, "Idempotency-Key", "k-steer-busy")
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	t.Cleanup(func() { <-done })
	if err := e.LLM.Ledger().WaitStarted(waitCtx(t, 10*time.Second), prompt, 1); err != nil {
		t.Fatal(err)
	}
	resp := do(t, "POST", e.URL+chatPath, slow, "Idempotency-Key", "k-steer-busy")
	readBody(t, resp)
	if resp.StatusCode != http.StatusConflict || resp.Header.Get("Retry-After") == "" || resp.Header.Get("X-Should-Retry") == "false" {
		t.Errorf("in progress: %d, Retry-After %q, X-Should-Retry %q; want 409 with a Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"))
	}
}

// TestRespondAsync: a non-streamed request with Prefer: respond-async is
// answered 202 at once with its Location; the client polls the status and
// fetches the result there; the same request again is still one
// generation.
func TestRespondAsync(t *testing.T) { // not parallel: it times the 202 against the generation
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=30] [delay=10ms]")
	start := time.Now()
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, false), "Idempotency-Key", "k-async", "Prefer", "respond-async, wait=0")
	body := readBody(t, resp)
	if resp.StatusCode != http.StatusAccepted || resp.Header.Get("Location") == "" || !strings.Contains(body, `"state":"in_progress"`) {
		t.Fatalf("%d %s, want 202 with the status JSON and a Location", resp.StatusCode, body)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("answered after %s: it waited for the generation (~300 ms)", took)
	}
	waitState(t, e, "k-async", "completed")
	result := do(t, "GET", e.URL+resp.Header.Get("Location"), "")
	if got := readBody(t, result); result.StatusCode != 200 || !strings.Contains(got, `"chat.completion"`) {
		t.Errorf("the result at the Location: %d %s", result.StatusCode, got)
	}
	again := do(t, "POST", e.URL+chatPath, chatBody(prompt, false), "Idempotency-Key", "k-async", "Prefer", "respond-async")
	if readBody(t, again); again.StatusCode != 200 || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("again once completed: %d, replayed %q; want the stored result", again.StatusCode, again.Header.Get("Idempotent-Replayed"))
	}
	if g := e.LLM.Ledger().Get(prompt); g.Generations != 1 {
		t.Errorf("ledger %+v, want 1 generation", g)
	}
}
