package tests

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// End-to-end tests of the timeouts agreeing with each other: the retry
// deadline, the upstream header timeout, the SSE write timeout and the
// keep-alive. Each configures its timeouts small instead of waiting out the
// defaults.

// recordingSDK is an openai-go client of e with its retries on, whose HTTP
// attempts rec records.
func recordingSDK(e *env, rec *sdkAttempts) openai.Client {
	return openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(2),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			rec.add(req, resp)
			return resp, err
		}))
}

// TestRetryDeadlineSparesSlowAnswer: a non-streamed answer takes longer
// than the retry deadline (its head comes once the whole answer is made)
// and less than the header timeout. The deadline bounds retries, not the
// attempt in flight: the client gets the answer, one generation. (It got
// 504 at the deadline while the upstream generated anyway; openai-go
// retried into a second and third generation.)
func TestRetryDeadlineSparesSlowAnswer(t *testing.T) {
	t.Parallel()
	pc := fastRetries()
	// Wide margins: under -race on a loaded machine the request itself may
	// take a while to be sent, and a request not yet sent is cut.
	pc.Deadline = 500 * time.Millisecond
	e := newEnv(t, withPolicy(t, pc)) // header timeout 10 s
	var rec sdkAttempts
	client := recordingSDK(e, &rec)
	prompt := uniquePrompt(t, "[tokens=10] [delay=150ms]") // ~1.5 s to the head
	cc, err := client.Chat.Completions.New(waitCtx(t, 20*time.Second), openai.ChatCompletionNewParams{
		Model:    "mock-1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	rec.mu.Lock()
	attempts := len(rec.keys)
	rec.mu.Unlock()
	if err != nil {
		t.Fatalf("after %d SDK attempts: %v; want the answer (the 500 ms retry deadline must not cut an attempt already sent)", attempts, err)
	}
	if got, want := cc.Choices[0].Message.Content, strings.Join(mockllm.Content(prompt, 10, false), ""); got != want {
		t.Fatalf("content %q, want %q", got, want)
	}
	g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	if attempts != 1 || g.Requests != 1 || g.Generations != 1 {
		t.Errorf("%d SDK attempts, ledger %+v; want 1 attempt, 1 request, 1 generation", attempts, g)
	}
}

// TestProxy504NoSDKRetry: an upstream that does not answer within the
// header timeout after the request was sent may be generating; reprise
// answers 504 upstream_timeout and says X-Should-Retry: false, so the
// SDK does not retry it into another generation of the (failed) key.
func TestProxy504NoSDKRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPolicy(t, fastRetries(), func(cfg *proxy.Config) {
		cfg.Client = engine.DefaultClient(2*time.Second, 300*time.Millisecond)
	}))
	prompt := uniquePrompt(t, "[tokens=20] [delay=50ms]") // ~1 s to the head

	t.Run("raw", func(t *testing.T) {
		resp := do(t, "POST", e.URL+chatPath, chatBody(prompt+" raw", false), "Idempotency-Key", "k-504")
		testutil.ExpectAPIError(t, resp, http.StatusGatewayTimeout, classify.CodeTimeout)
		if v := resp.Header.Get("X-Should-Retry"); v != "false" {
			t.Errorf("X-Should-Retry %q on reprise's 504, want false", v)
		}
	})
	t.Run("openai-go", func(t *testing.T) {
		var rec sdkAttempts
		client := recordingSDK(e, &rec)
		_, err := client.Chat.Completions.New(waitCtx(t, 20*time.Second), openai.ChatCompletionNewParams{
			Model:    "mock-1",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("err %v, want reprise's 504", err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.keys) != 1 {
			t.Errorf("%d SDK attempts, want 1 (X-Should-Retry: false on a 504 after the request was sent)", len(rec.keys))
		}
		if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Requests != 1 {
			t.Errorf("ledger %+v: want 1 upstream request", g)
		}
	})
}

// TestWriteTimeoutPerWrite: the SSE write timeout bounds each write, not
// the time between events. With a write timeout under the gaps between
// events (and under the keep-alive), healthy readers — the POST's answer
// and a detached GET of the Location — get the whole stream. (The deadline
// was set after each flush and ran on while the reader idled: the next
// write failed, the POST's answer broke and the GET ended cleanly without
// [DONE].)
func TestWriteTimeoutPerWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.HTTP.WriteTimeout = 150 * time.Millisecond
		c.HTTP.Heartbeat = 2 * time.Second
	}))
	prompt := uniquePrompt(t, "[tokens=3] [delay=400ms]")
	ctx := waitCtx(t, 20*time.Second)
	type result struct {
		evs []event
		err error
	}
	post, get := make(chan result, 1), make(chan result, 1)
	started := make(chan struct{})
	go func() {
		evs, err := fetchEvents(ctx, "POST", e.URL+chatPath, chatBody(prompt, true), 1, func() { close(started) }, "Idempotency-Key", "k-write-timeout")
		post <- result{evs, err}
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the stream did not start")
	}
	go func() {
		evs, err := fetchEvents(ctx, "GET", e.URL+"/v1/streams/k-write-timeout", "", 0, nil)
		get <- result{evs, err}
	}()
	for who, ch := range map[string]chan result{"the POST's answer": post, "a GET of the Location": get} {
		r := <-ch
		if r.err != nil {
			t.Errorf("%s: %v", who, r.err)
			continue
		}
		if !hasDone(r.evs) {
			t.Errorf("%s ended after %d events without [DONE]", who, len(r.evs))
		}
	}
}

// rawEvents splits an SSE body into its events' raw blocks.
func rawEvents(body string) []string {
	var out []string
	for b := range strings.SplitSeq(strings.ReplaceAll(body, "\r\n", "\n"), "\n\n") {
		if b = strings.TrimSpace(b); b != "" && !strings.HasPrefix(b, ":") {
			out = append(out, b)
		}
	}
	return out
}

// TestClosingCutsReaderVisibly: a detached reader (a GET of the Location,
// whose response a closed connection delimits) of a generation running on
// another instance is cut when its instance shuts down. It must not take
// the cut for the end: it gets event: error shutting_down without an id,
// and resumes elsewhere from its last event to [DONE]. (It saw a clean
// close: a complete response without [DONE].) A duplicate POST attached
// there gets the same event, then its answer is aborted.
func TestClosingCutsReaderVisibly(t *testing.T) {
	t.Parallel()
	// The generation writes 3 events, then waits for the test to have cut
	// B's readers before it ends: the cut comes while it runs, however
	// slow the machine.
	release := make(chan struct{})
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(i int) {
			_, _ = fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d \"}}]}\n\n", i)
			_ = http.NewResponseController(w).Flush()
		}
		for i := range 3 {
			chunk(i)
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		for i := 3; i < 6; i++ {
			chunk(i)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	e := newEnv(t, withNATSPort(), withUpstream(upstream))
	b := startInstance(t, "B", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{replicas: 1})
	prompt := uniquePrompt(t, "")
	key := "k-cut-visibly"
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key), 1) // and leave: it runs on
	attached := do(t, "POST", b.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key)       // served by net/http
	defer attached.Body.Close()
	conn, br, head := rawRequest(t, b.URL, "GET /v1/streams/"+key+" HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
	defer conn.Close()
	if head.StatusCode != http.StatusOK || !head.Close {
		t.Fatalf("GET on B: %d, close %v; want a detached event stream", head.StatusCode, head.Close)
	}
	var lastID string
	for lastID == "" { // B follows the generation
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := strings.CutPrefix(l, "id:"); ok {
			lastID = strings.TrimSpace(v)
		}
	}
	b.stop(t)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading the cut stream: %v", err)
	}
	evs := rawEvents(string(rest))
	if len(evs) == 0 {
		t.Fatal("the reader's stream ended cleanly with nothing after the cut")
	}
	last := evs[len(evs)-1]
	if !strings.Contains(last, "event: error") || !strings.Contains(last, `"shutting_down"`) || strings.Contains(last, "id:") {
		t.Fatalf("the cut stream ends with %q; want event: error shutting_down without an id", last)
	}
	for _, ev := range evs {
		for l := range strings.Lines(ev) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "id:"); ok {
				lastID = strings.TrimSpace(v)
			}
		}
	}
	// The duplicate POST's answer is told too, then aborted.
	got, err := io.ReadAll(attached.Body)
	if err == nil {
		t.Error("the attached POST's answer ended cleanly after the cut")
	}
	if evs := rawEvents(string(got)); len(evs) == 0 || !strings.Contains(evs[len(evs)-1], `"shutting_down"`) || strings.Contains(evs[len(evs)-1], "id:") {
		t.Errorf("the attached POST's answer ends with %q; want event: error shutting_down without an id", evs[len(evs)-1:])
	}
	close(release)
	resumed := readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", lastID), -1)
	if !hasDone(resumed) {
		t.Fatalf("the resume elsewhere got %d events without [DONE]", len(resumed))
	}
}

// TestWriteTimeoutCutIsBroken: a detached reader that does not take what
// is written within the write timeout is cut, and its connection is reset,
// never closed cleanly: a close delimits a detached response, so the
// client would take the part it got for the whole. The reader here asks
// for a 10 MB replay through a 4 KiB receive buffer and reads nothing
// until the proxy gave up on it.
func TestWriteTimeoutCutIsBroken(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 256<<10)
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for range 40 {
			_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"`+big+`"}}]}`+"\n\n")
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	e := newEnv(t, withUpstream(upstream), withConfig(func(c *proxy.Config) { c.HTTP.WriteTimeout = 300 * time.Millisecond }))
	key := "k-slow-reader"
	// The generation runs on without its client (who would be cut itself
	// by the write timeout on a loaded machine): it completes when its
	// [DONE] is stored.
	_ = do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, ""), true), "Idempotency-Key", key).Body.Close()
	pollUntil(t, time.Minute, "the 10 MB generation to be stored", func() bool { // slow under -race on a loaded box
		st, code := getStatus(t, e, key)
		return code == http.StatusOK && st.State == "completed"
	})

	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return errors.Join(err, serr)
	}}
	conn, err := d.DialContext(waitCtx(t, 5*time.Second), "tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, "GET /v1/streams/"+key+" HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 512)
	head, err := http.ReadResponse(br, nil)
	if err != nil || head.StatusCode != http.StatusOK || !head.Close {
		t.Fatalf("GET: %v, %v; want a detached event stream", head, err)
	}
	readers := func() float64 { return metric(t, e, "reprise_stream_readers", "journal") }
	testutil.Eventually(t, 10*time.Second, "the replay to start", func() bool { return readers() == 1 })
	testutil.Eventually(t, 10*time.Second, "the proxy to give up on the reader", func() bool { return readers() == 0 })
	n, err := io.Copy(io.Discard, br)
	if err == nil {
		t.Fatalf("the cut replay ended cleanly after %d bytes of 10 MB: a client takes it for the whole response", n)
	}
	t.Logf("after %d bytes: %v", n, err)
}

// TestPassThroughHeaderTimeout: a request passed through without a key
// (embeddings here) that the upstream got and did not answer within the
// header timeout is 504 upstream_timeout with X-Should-Retry: false, as a
// generation's is — the upstream may have done (and billed) the work. (It
// was 502 upstream_unreachable, which says nothing was sent and invites a
// retry.)
func TestPassThroughHeaderTimeout(t *testing.T) {
	t.Parallel()
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done() // working, and never answering in time
	})
	e := newEnv(t, withUpstream(upstream), withConfig(func(c *proxy.Config) {
		c.Client = engine.DefaultClient(2*time.Second, 200*time.Millisecond)
	}))
	resp := do(t, "POST", e.URL+"/v1/embeddings", `{"model":"m","input":"x"}`)
	testutil.ExpectAPIError(t, resp, http.StatusGatewayTimeout, classify.CodeTimeout)
	if v := resp.Header.Get("X-Should-Retry"); v != "false" {
		t.Errorf("X-Should-Retry %q, want false", v)
	}
}
