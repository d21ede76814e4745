package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// awaitAborted waits until the fake upstream's first generation of prompt
// has ended without completing, and returns when it saw that.
func awaitAborted(tb testing.TB, e *env, prompt string, within time.Duration) time.Time {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		if g := e.LLM.Ledger().Generations(prompt); len(g) > 0 && g[0].Aborted {
			return time.Now()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the upstream's generation of %q still ran %s after the cancel", prompt, within)
		}
		time.Sleep(2 * time.Millisecond) // polling the fake's ledger; bounded above
	}
}

// TestCancel: POST …/cancel stops the running generation at once — the
// upstream's request ends within 100 ms — the key is cancelled, its
// reader gets event: error cancelled, and the key generates afresh; a
// client that only disconnects never cancels; a key that runs nothing
// answers 409.
func TestCancel(t *testing.T) { // not parallel: it times the cancel to 100 ms
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=2000] [delay=10ms]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-cancel")
	loc := resp.Header.Get("Location")
	first := readEvents(t, resp, 3) // and leave: that is no cancel
	reader := do(t, "GET", e.URL+loc, "", "Last-Event-ID", lastID(first))
	time.Sleep(100 * time.Millisecond) // let the client's disconnect be noticed; it must change nothing
	if g := e.LLM.Ledger().Generations(prompt); len(g) != 1 || g[0].Aborted || g[0].Completed {
		t.Fatalf("after the client left: %+v, want one generation still running", g)
	}

	start := time.Now()
	cancelURL, _ := url.Parse(e.URL + loc) // the Location's capability grants the cancel too
	cancelURL.Path += "/cancel"
	cancelResp := do(t, "POST", cancelURL.String(), "")
	body := readBody(t, cancelResp)
	var st keyStatus
	if cancelResp.StatusCode != http.StatusAccepted || json.Unmarshal([]byte(body), &st) != nil || st.Key != "k-cancel" {
		t.Fatalf("cancel: %d %s, want 202 with the status JSON", cancelResp.StatusCode, body)
	}
	if took := awaitAborted(t, e, prompt, 2*time.Second).Sub(start); took > 100*time.Millisecond {
		t.Errorf("the upstream's generation ended %s after the cancel, want ≤ 100 ms", took)
	}
	evs := readEvents(t, reader, -1)
	last := lastEvent(t, evs)
	if code := testutil.ParseAPIError(t, last.Data).Code; last.Type != "error" || code != "cancelled" {
		t.Errorf("the reader ended with %+v, want event: error cancelled", last)
	}
	if st := waitState(t, e, "k-cancel", "cancelled"); st.Error != "cancelled" {
		t.Errorf("status %+v", st)
	}
	again := do(t, "POST", e.URL+"/v1/streams/k-cancel/cancel", "")
	if body := readBody(t, again); again.StatusCode != http.StatusConflict {
		t.Errorf("cancel of a cancelled key: %d %s, want 409", again.StatusCode, body)
	}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-cancel"), 2)
	if g := e.LLM.Ledger().Generations(prompt); len(g) != 2 {
		t.Errorf("after the cancel the same key made %d generations, want a second one", len(g))
	}
	t.Cleanup(func() { readBody(t, do(t, "POST", e.URL+"/v1/streams/k-cancel/cancel", "")) }) // the second one too, before the proxy stops
	if resp := do(t, "POST", e.URL+"/v1/streams/k-cancel/cancel", "", "Authorization", "Bearer someone-else"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's cancel: %d, want 404", resp.StatusCode)
	}
}

// TestCancelElsewhere: a cancel sent to an instance that does not run the
// generation reaches the one that does.
func TestCancelElsewhere(t *testing.T) { // not parallel: it times the cancel to 100 ms
	e := newEnv(t, withNATSPort())
	nc, err := nats.Connect(e.natsURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	upstream, _ := url.Parse(e.llmSrv.URL)
	// Another instance on the same NATS: the same journal and records.
	b, _, bURL := serveProxy(t, proxy.Config{NATS: nc, Upstream: upstream, Auth: auth.Config{Secret: testSecret}, Logger: testLogger()})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.Shutdown(ctx)
	})
	prompt := uniquePrompt(t, "[tokens=2000] [delay=10ms]")
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-cancel-b"), 2)
	start := time.Now()
	resp := do(t, "POST", bURL+"/v1/streams/k-cancel-b/cancel", "")
	if body := readBody(t, resp); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel on B: %d %s", resp.StatusCode, body)
	}
	if took := awaitAborted(t, e, prompt, 2*time.Second).Sub(start); took > 100*time.Millisecond {
		t.Errorf("A's generation ended %s after the cancel on B, want ≤ 100 ms", took)
	}
	waitState(t, e, "k-cancel-b", "cancelled")
}

// TestCancelUnread: with Limits.CancelUnread (--cancel-unread), a streamed
// generation that nobody reads, on any instance, for that long is
// cancelled by its owner — the upstream's request ends, the key is
// cancelled and generates afresh — while one whose only reader follows it
// on another instance runs to its end: every instance tells the owners
// which keys it has readers of. Off (the default) nothing is cancelled
// (TestCancel: a client that leaves changes nothing).
func TestCancelUnread(t *testing.T) {
	t.Parallel()
	// Long enough that a reader on B keeps the generation on A alive on a
	// busy box: B's reader must connect and be heard within it (800 ms
	// was not, under -race in CI).
	const unread = 2 * time.Second
	ns := startNATSServer(t)
	urls := []string{ns.Server.ClientURL()}
	llm := mockllm.New(mockllm.Config{})
	hs := httptest.NewServer(llm)
	t.Cleanup(hs.Close)
	opts := instanceOptions{lease: 10 * time.Second, replicas: 1, grace: time.Second, lenient: true, configure: func(cfg *proxy.Config) {
		cfg.Limits.CancelUnread = unread
	}}
	a := startInstance(t, "A", urls, hs.URL, opts)
	b := startInstance(t, "B", urls, hs.URL, opts)

	// Nobody reads: the client leaves after 3 events.
	left := uniquePrompt(t, "[tokens=1000] [delay=10ms]") // 10 s
	readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(left, true), "Idempotency-Key", "k-unread"), 3)
	start := time.Now()
	testutil.Eventually(t, 10*time.Second, "the unread generation to be cancelled", func() bool {
		g := llm.Ledger().Generations(left)
		return len(g) == 1 && g[0].Aborted
	})
	took := time.Since(start)
	t.Logf("the unread generation was cancelled %s after its client left (--cancel-unread %s)", took.Round(time.Millisecond), unread)
	if took < unread/2 {
		t.Errorf("cancelled %s after the client left, before %s of nobody reading", took, unread)
	}
	testutil.Eventually(t, 5*time.Second, "k-unread to be cancelled", func() bool {
		st, _ := clusterStatus(t, b.URL, "k-unread")
		return st.State == "cancelled"
	})
	again := readEvents(t, do(t, "POST", b.URL+chatPath, chatBody(left, true), "Idempotency-Key", "k-unread"), -1)
	checkComplete(t, again, left, 1000) // the key generates afresh, read to its end this time

	// Read only on B: the owner A hears B's reader and lets it run.
	read := uniquePrompt(t, "[tokens=800] [delay=10ms]") // 8 s, several times the limit
	first := readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(read, true), "Idempotency-Key", "k-read-elsewhere"), 2)
	rest := readEvents(t, do(t, "GET", b.URL+"/v1/streams/k-read-elsewhere", "", "Last-Event-ID", lastID(first)), -1)
	checkComplete(t, append(first, rest...), read, 800)
	if g := testutil.Settled(t, llm.Ledger(), read, 1); g.Generations != 1 || g.Completed != 1 {
		t.Errorf("the generation read on another instance: %+v, want one, completed", g)
	}
}

// TestCancelUnreadCountsFromTheAnswer: --cancel-unread counts from the
// upstream's answer, not from the generation's start. An upstream that
// takes several times the limit to answer (a long queue, a slow first
// byte) has the generation's client waiting all that while, with nothing
// to read: the generation is not cancelled, and the client gets it whole.
// A generation is never cancelled before its first event, even when that
// event takes long to store (under load).
func TestCancelUnreadCountsFromTheAnswer(t *testing.T) {
	t.Parallel()
	const unread = 300 * time.Millisecond
	ns := startNATSServer(t)
	llm := mockllm.New(mockllm.Config{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // the upstream's answer comes after three times the limit
		case <-time.After(3 * unread):
		case <-r.Context().Done():
			return
		}
		llm.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	a := startInstance(t, "A", []string{ns.Server.ClientURL()}, slow.URL, instanceOptions{replicas: 1, lenient: true, configure: func(cfg *proxy.Config) {
		cfg.Limits.CancelUnread = unread
	}})
	prompt := uniquePrompt(t, "[tokens=20]")
	got := readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-slow-answer"), -1)
	checkComplete(t, got, prompt, 20)
	if g := testutil.Settled(t, llm.Ledger(), prompt, 1); g.Generations != 1 || g.Completed != 1 {
		t.Errorf("the generation behind a slow answer: %+v, want one, completed", g)
	}
}

// TestCancelNonStreamed: the Location of a non-streamed key whose
// generation was cancelled answers the catalogue's cancelled error (409)
// in the key's API shape, with a body, as does the POST that waited for it.
func TestCancelNonStreamed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, f := range streamFormats {
		if f.name == "responses" {
			continue // a non-streamed Responses key is read at /v1/responses/{id}
		}
		t.Run(f.name, func(t *testing.T) {
			key := "k-cancel-json-" + f.name
			prompt := uniquePrompt(t, "[tokens=2000] [delay=10ms]")
			body := strings.Replace(f.body(prompt), `"stream":true`, `"stream":false`, 1)
			if !strings.Contains(body, `"stream":false`) {
				t.Fatalf("no stream field to turn off in %s", body)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testutil.RequestTimeout)
			defer cancel()
			waited := make(chan *http.Response, 1)
			go func() {
				resp, err := send(ctx, "POST", e.URL+f.path, body, "Idempotency-Key", key)
				if err != nil {
					t.Errorf("POST: %v", err)
				}
				waited <- resp
			}()
			waitState(t, e, key, "in_progress")
			if resp := do(t, "POST", e.URL+"/v1/streams/"+key+"/cancel", ""); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("cancel: %d %s", resp.StatusCode, readBody(t, resp))
			}
			waitState(t, e, key, "cancelled")
			check := func(who string, resp *http.Response) {
				t.Helper()
				got := readBody(t, resp)
				if resp.StatusCode != http.StatusConflict || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Errorf("%s: %d %s %q, want 409 application/json", who, resp.StatusCode, resp.Header.Get("Content-Type"), got)
				}
				if got == "" {
					t.Fatalf("%s: 409 with an empty body, want the cancelled error", who)
				}
				if _, code, _ := f.parseError(t, got); code != "cancelled" {
					t.Errorf("%s: %s, want the code cancelled", who, got)
				}
			}
			check("the Location", do(t, "GET", e.URL+"/v1/streams/"+key, ""))
			if resp := <-waited; resp != nil {
				check("the POST that waited", resp)
			}
		})
	}
}
