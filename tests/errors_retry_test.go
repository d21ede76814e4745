package tests

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestNoUpstreamIsConfiguration: a request no --upstreams route serves
// (by path or by model) is a configuration error, not an upstream's: 404
// no_upstream in the caller's API shape, X-Should-Retry: false (the SDKs
// would otherwise retry it), no Reprise-Upstream (no upstream was called)
// and nothing sent anywhere — for pass-throughs and journaled formats,
// keyed or not, streamed or not. A keyed one leaves its key failed with
// that code and status, and the same key asked again answers the same.
func TestNoUpstreamIsConfiguration(t *testing.T) {
	t.Parallel()
	chat := &recorder{}
	cs := serveUpstream(t, chat)
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.Auth.Mode, c.Auth.ProxyKeys = auth.Static, []string{"pk-1"}
		c.Routes = []proxy.Route{{Name: "openai", URL: cs, Key: "sk-chat", Paths: []string{"/v1/chat/"}, Models: []string{"gpt-*"}}}
	}))
	type request struct {
		name, method, path, body string
		anthropic                bool // the caller's shape is Anthropic's
	}
	var requests []request
	for _, m := range []string{"GET", "POST"} {
		requests = append(requests, request{name: m + " pass-through", method: m, path: "/v1/models"})
	}
	for _, stream := range []string{"false", "true"} {
		requests = append(requests,
			request{name: "responses stream=" + stream, method: "POST", path: "/v1/responses", body: `{"model":"gpt-4o","input":"hi","stream":` + stream + `}`},
			request{name: "messages stream=" + stream, method: "POST", path: "/v1/messages", body: `{"model":"claude","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream":` + stream + `}`, anthropic: true},
			// A served path, a model no route serves.
			request{name: "chat model stream=" + stream, method: "POST", path: "/v1/chat/completions", body: `{"model":"llama","messages":[{"role":"user","content":"hi"}],"stream":` + stream + `}`},
		)
	}
	requests = append(requests, request{name: "embeddings pass-through", method: "POST", path: "/v1/embeddings", body: `{"model":"e","input":"hi"}`})
	n := 0
	for _, rq := range requests {
		keys := []string{""}
		if rq.method == "POST" {
			n++
			keys = append(keys, "k-noup-"+strconv.Itoa(n))
		}
		for _, key := range keys {
			for attempt := 1; attempt <= 2; attempt++ { // a key that failed generates afresh: the same answer
				h := []string{"Authorization", "Bearer pk-1", "Content-Type", "application/json"}
				if key != "" {
					h = append(h, "Idempotency-Key", key)
				}
				resp := do(t, rq.method, e.URL+rq.path, rq.body, h...)
				what := rq.name + " key " + strconv.Quote(key) + " attempt " + strconv.Itoa(attempt)
				body := readBody(t, resp)
				if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Should-Retry") != "false" || resp.Header.Get("Reprise-Upstream") != "" {
					t.Errorf("%s: %d, X-Should-Retry %q, Reprise-Upstream %q; want 404, false and none (%s)", what, resp.StatusCode,
						resp.Header.Get("X-Should-Retry"), resp.Header.Get("Reprise-Upstream"), body)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("%s: Content-Type %q", what, ct)
				}
				var shaped struct {
					Type  string
					Error struct{ Type, Code string }
				}
				if err := json.Unmarshal([]byte(body), &shaped); err != nil || shaped.Error.Code != "no_upstream" {
					t.Errorf("%s: body %s, want the code no_upstream", what, body)
				}
				switch {
				case rq.anthropic && (shaped.Type != "error" || shaped.Error.Type != "not_found_error"):
					t.Errorf("%s: %s, want Anthropic's shape with not_found_error", what, body)
				case !rq.anthropic && shaped.Error.Type != "invalid_request_error":
					t.Errorf("%s: %s, want OpenAI's shape with invalid_request_error", what, body)
				}
				if key == "" {
					continue
				}
				// Refused before anything was decided: the key has no
				// record (once it had one, failed, written a moment after
				// the answer: a duplicate in between attached to the
				// generation and got a 200 stream ending in its error).
				st := do(t, "GET", e.URL+"/v1/streams/"+url.PathEscape(key), "", "Accept", "application/json", "Authorization", "Bearer pk-1")
				testutil.ExpectAPIError(t, st, http.StatusNotFound, "key_not_found")
			}
		}
	}
	if got := chat.take(); len(got) != 0 {
		t.Errorf("requests no route serves reached the route as %+v", got)
	}
	if got := metric(t, e, "reprise_requests_total", "start"); got != 0 {
		t.Errorf("%v generations started for requests no route serves, want none", got)
	}
	// The route still serves what it serves.
	resp := do(t, "GET", e.URL+"/v1/chat/completions/none", "", "Authorization", "Bearer pk-1")
	readBody(t, resp)
	if got := chat.take(); len(got) != 1 || resp.Header.Get("X-Should-Retry") != "" {
		t.Errorf("a path the route serves: %+v, X-Should-Retry %q", got, resp.Header.Get("X-Should-Retry"))
	}
}

// TestCancelAnswersLiveStatus: the 202 of POST …/cancel is the key's
// status as it is when the cancel is sent — the events the running
// generation journaled so far — not the record as of the lease's last
// heartbeat (events: 0 for a generation that started less than a beat
// before).
func TestCancelAnswersLiveStatus(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLease(10*time.Second)) // heartbeats every few seconds: none during the test's first second
	prompt := uniquePrompt(t, "[tokens=2000] [delay=10ms]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-cancel-live")
	readEvents(t, resp, 10)
	var journaled int
	testutil.Eventually(t, 5*time.Second, "the status to count 10 events", func() bool {
		st, _ := getStatus(t, e, "k-cancel-live")
		journaled = st.Events
		return st.State == "in_progress" && st.Events >= 10
	})
	cancel := do(t, "POST", e.URL+"/v1/streams/k-cancel-live/cancel", "")
	body := readBody(t, cancel)
	var st keyStatus
	if cancel.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("cancel: %d %s, want 202 and the status JSON", cancel.StatusCode, body)
	}
	if st.Key != "k-cancel-live" || st.State != "in_progress" && st.State != "cancelled" || st.Events < journaled {
		t.Errorf("cancel answered %s; want the key in_progress (being cancelled) or cancelled, with at least the %d events its status showed before", body, journaled)
	}
	if st := waitState(t, e, "k-cancel-live", "cancelled"); st.Events < journaled {
		t.Errorf("cancelled with %d events, want at least %d", st.Events, journaled)
	}
}
