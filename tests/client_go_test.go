package tests

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/resume/roundtrip"
)

// The Go client helper (resume/roundtrip) under the official SDKs, through
// a link that cuts each stream three times: the SDK reads the exact text,
// the upstream is asked once, and no POST is sent twice.

const (
	clientTokens   = 60
	clientCutBytes = 1500 // each cut connection carries this much of the answer
	clientDrops    = 3
)

// newClientEnv is a proxy whose streams tell clients to come back after
// 50 ms (retry:), so three drops cost little.
func newClientEnv(t *testing.T) *env {
	t.Helper()
	return newEnv(t, withTokenDelay(5*time.Millisecond), withConfig(func(c *proxy.Config) { c.HTTP.SSERetry = 50 * time.Millisecond }))
}

// checkOnce checks the upstream ledger of prompt: one request, one
// generation, so no POST reached the upstream twice.
func checkOnce(t *testing.T, e *env, prompt string, link *dropLink) {
	t.Helper()
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 || g.Requests != 1 {
		t.Errorf("upstream ledger %+v, want 1 request and 1 generation", g)
	}
	if n := link.cuts(); n != clientDrops {
		t.Errorf("the link cut %d connections, want %d", n, clientDrops)
	}
}

// openaiThroughDrops is reprise behind a link that cuts each stream
// clientDrops times, and an openai-go client reaching it through the link
// with the round tripper (no SDK retries).
func openaiThroughDrops(t *testing.T) (*env, *dropLink, openai.Client) {
	t.Helper()
	e := newClientEnv(t)
	link := newDropLink(t, e.addr, clientCutBytes, clientDrops)
	client := openai.NewClient(option.WithBaseURL(link.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: &roundtrip.Transport{}}))
	return e, link, client
}

func TestRoundTripperOpenAIChat(t *testing.T) {
	t.Parallel()
	e, link, client := openaiThroughDrops(t)
	prompt := uniquePrompt(t, "[tokens=60]")
	s := client.Chat.Completions.NewStreaming(waitCtx(t, 30*time.Second), openai.ChatCompletionNewParams{
		Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for s.Next() {
		if !acc.AddChunk(s.Current()) {
			t.Fatalf("chunk %d does not follow the ones before (duplicate or gap?)", chunks)
		}
		chunks++
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := acc.Choices[0].Message.Content, strings.Join(mockllm.Content(prompt, clientTokens, false), ""); got != want {
		t.Errorf("content %q, want %q", got, want)
	}
	if chunks != clientTokens+2 { // role, tokens, stop
		t.Errorf("%d chunks, want %d", chunks, clientTokens+2)
	}
	checkOnce(t, e, prompt, link)
}

func TestRoundTripperOpenAIResponses(t *testing.T) {
	t.Parallel()
	e, link, client := openaiThroughDrops(t)
	prompt := uniquePrompt(t, "[tokens=60]")
	s := client.Responses.NewStreaming(waitCtx(t, 30*time.Second), responses.ResponseNewParams{
		Model: "mock-1", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)},
	})
	var text strings.Builder
	var last string
	seq := int64(-1)
	for s.Next() {
		ev := s.Current()
		if ev.SequenceNumber <= seq {
			t.Fatalf("sequence_number %d after %d: an event came twice", ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		if ev.Type == "response.output_text.delta" {
			text.WriteString(ev.Delta)
		}
		last = ev.Type
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(mockllm.Content(prompt, clientTokens, false), ""); text.String() != want {
		t.Errorf("text %q, want %q", text.String(), want)
	}
	if last != "response.completed" {
		t.Errorf("last event %q", last)
	}
	checkOnce(t, e, prompt, link)
}

func TestRoundTripperAnthropicMessages(t *testing.T) {
	t.Parallel()
	e := newClientEnv(t)
	link := newDropLink(t, e.addr, clientCutBytes, clientDrops)
	client := anthropic.NewClient(aoption.WithBaseURL(link.URL), aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0),
		aoption.WithHTTPClient(&http.Client{Transport: &roundtrip.Transport{}}))
	prompt := uniquePrompt(t, "[tokens=60]")
	s := client.Messages.NewStreaming(waitCtx(t, 30*time.Second), anthropic.MessageNewParams{
		Model: "mock-1", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))},
	})
	var msg anthropic.Message
	for s.Next() {
		if err := msg.Accumulate(s.Current()); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(mockllm.Content(prompt, clientTokens, false), "")
	if len(msg.Content) != 1 || msg.Content[0].Text != want || msg.StopReason != "end_turn" {
		t.Errorf("%+v (stop %q), want %q ending end_turn", msg.Content, msg.StopReason, want)
	}
	checkOnce(t, e, prompt, link)
}

// TestRoundTripperSDKRetryAttaches: the POST's answer is cut before its
// head arrived, so the SDK retries the POST itself; the transport gives
// the retry the key it gave the first try, and the retry attaches.
func TestRoundTripperSDKRetryAttaches(t *testing.T) {
	t.Parallel()
	e := newClientEnv(t)
	link := newDropLink(t, e.addr, 1, 1)
	client := openai.NewClient(option.WithBaseURL(link.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(2),
		option.WithHTTPClient(&http.Client{Transport: &roundtrip.Transport{}}))
	prompt := uniquePrompt(t, "[tokens=20]")
	s := client.Chat.Completions.NewStreaming(waitCtx(t, 30*time.Second), openai.ChatCompletionNewParams{
		Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	var acc openai.ChatCompletionAccumulator
	for s.Next() {
		acc.AddChunk(s.Current())
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := acc.Choices[0].Message.Content, strings.Join(mockllm.Content(prompt, 20, false), ""); got != want {
		t.Errorf("content %q, want %q", got, want)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 || g.Requests != 1 {
		t.Errorf("upstream ledger %+v, want 1 request and 1 generation: the retry did not attach", g)
	}
	if link.cuts() != 1 {
		t.Errorf("the link cut %d connections, want 1", link.cuts())
	}
}

// TestRoundTripperSpeech: a speech event stream (events of 3 KiB: every
// cut comes before the first event is whole, so the stream is read from its
// start again each time, before any retry: reached the client, hence the
// transport's own short RetryDelay) through the transport under a plain
// http.Client: the PCM is byte-exact, each event once.
func TestRoundTripperSpeech(t *testing.T) {
	t.Parallel()
	e := newClientEnv(t)
	link := newDropLink(t, e.addr, clientCutBytes, clientDrops)
	input := uniquePrompt(t, "[tokens=12]")
	req, err := http.NewRequestWithContext(waitCtx(t, 30*time.Second), http.MethodPost, link.URL+"/v1/audio/speech", strings.NewReader(speechBody(input, true)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := (&http.Client{Transport: &roundtrip.Transport{RetryDelay: 50 * time.Millisecond}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	evs := readEvents(t, resp, -1)
	checkUnique(t, evs)
	pcm, done := speechPCM(t, evs)
	if !done || !bytes.Equal(pcm, mockllm.Audio(input, 12)) {
		t.Errorf("done %v, %d bytes of PCM, want %d exact", done, len(pcm), len(mockllm.Audio(input, 12)))
	}
	checkOnce(t, e, input, link)
}

// TestRoundTripperStop: Stop is not a drop, under openai-go with the
// round tripper. A caller that cancels its context mid-stream, or closes
// the stream (the SDK stops reading), has the transport cancel the
// generation: the key becomes cancelled, the upstream's generation ends
// early, and the identical request again (Regenerate) is a second
// generation. A stream the link cuts is resumed: one generation,
// completed. A non-streamed request whose context ends before the answer
// cancels its key too.
func TestRoundTripperStop(t *testing.T) {
	t.Parallel()
	e := newClientEnv(t)
	const tokens = 200 // 2 s at [delay=10ms]: the caller stops long before the end
	auth := []string{"Authorization", "Bearer sk-test"}
	newClient := func(base string) openai.Client {
		return openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
			option.WithHTTPClient(&http.Client{Transport: &roundtrip.Transport{}}))
	}
	params := func(prompt string) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
	}
	// stopAndRegenerate streams prompt, stops after three chunks with
	// stop, checks the key is cancelled, and sends the identical request
	// again to its end.
	stopAndRegenerate := func(t *testing.T, stop func(cancel context.CancelFunc, s interface{ Close() error })) {
		t.Helper()
		client := newClient(e.URL)
		prompt := uniquePrompt(t, "[tokens="+itoa(tokens)+"] [delay=10ms]")
		ctx, cancel := context.WithCancel(waitCtx(t, 30*time.Second))
		defer cancel()
		var resp *http.Response
		s := client.Chat.Completions.NewStreaming(ctx, params(prompt), option.WithResponseInto(&resp))
		for n := 0; s.Next(); n++ {
			if n == 2 {
				stop(cancel, s)
			}
		}
		_ = s.Close()
		key := resp.Header.Get("Idempotency-Key")
		if st := testutil.WaitState(t, e.URL, key, "cancelled", auth...); st.Generation != 1 {
			t.Errorf("status %+v, want generation 1 cancelled", st)
		}

		again := client.Chat.Completions.NewStreaming(waitCtx(t, 30*time.Second), params(prompt), option.WithResponseInto(&resp))
		var acc openai.ChatCompletionAccumulator
		for again.Next() {
			acc.AddChunk(again.Current())
		}
		if err := again.Err(); err != nil {
			t.Fatal(err)
		}
		if got, want := acc.Choices[0].Message.Content, strings.Join(mockllm.Content(prompt, tokens, false), ""); got != want {
			t.Errorf("regenerated %q, want %q", got, want)
		}
		if k := resp.Header.Get("Idempotency-Key"); k == key || k == "" {
			t.Errorf("the regenerate's key %q, want a new one (the first: %q)", k, key)
		}
		testutil.Settled(t, e.LLM.Ledger(), prompt, 2)
		gens := e.LLM.Ledger().Generations(prompt)
		if len(gens) != 2 || !gens[0].Aborted || gens[0].Completed || gens[0].Tokens >= tokens || !gens[1].Completed {
			t.Errorf("upstream generations %+v, want the stopped one aborted early and the regenerated one completed", gens)
		}
	}

	t.Run("the caller's context cancelled mid-stream, then regenerate", func(t *testing.T) {
		t.Parallel()
		stopAndRegenerate(t, func(cancel context.CancelFunc, _ interface{ Close() error }) { cancel() })
	})
	t.Run("the stream closed mid-stream, then regenerate", func(t *testing.T) {
		t.Parallel()
		stopAndRegenerate(t, func(_ context.CancelFunc, s interface{ Close() error }) { _ = s.Close() })
	})

	t.Run("a drop resumes the same generation", func(t *testing.T) {
		t.Parallel()
		link := newDropLink(t, e.addr, clientCutBytes, 1)
		client := newClient(link.URL)
		prompt := uniquePrompt(t, "[tokens=60]")
		var resp *http.Response
		s := client.Chat.Completions.NewStreaming(waitCtx(t, 30*time.Second), params(prompt), option.WithResponseInto(&resp))
		var acc openai.ChatCompletionAccumulator
		for s.Next() {
			acc.AddChunk(s.Current())
		}
		if err := s.Err(); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if got, want := acc.Choices[0].Message.Content, strings.Join(mockllm.Content(prompt, 60, false), ""); got != want {
			t.Errorf("content %q, want %q", got, want)
		}
		testutil.WaitState(t, e.URL, resp.Header.Get("Idempotency-Key"), "completed", auth...)
		g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
		if gens := e.LLM.Ledger().Generations(prompt); g.Generations != 1 || len(gens) != 1 || !gens[0].Completed {
			t.Errorf("upstream ledger %+v %+v, want 1 completed generation", g, gens)
		}
		if link.cuts() != 1 {
			t.Errorf("the link cut %d connections, want 1", link.cuts())
		}
	})

	t.Run("not streamed: the caller's context cancelled before the answer", func(t *testing.T) {
		t.Parallel()
		client := newClient(e.URL)
		prompt := uniquePrompt(t, "[tokens="+itoa(tokens)+"] [delay=10ms]")
		ctx, cancel := context.WithCancel(waitCtx(t, 30*time.Second))
		go func() {
			defer cancel()
			wctx, stop := context.WithTimeout(context.Background(), testutil.WaitTimeout)
			defer stop()
			_ = e.LLM.Ledger().WaitStarted(wctx, prompt, 1) // it generates: the answer comes at its end
		}()
		if _, err := client.Chat.Completions.New(ctx, params(prompt)); !errors.Is(err, context.Canceled) {
			t.Fatalf("New: %v, want context.Canceled", err)
		}
		testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
		if gens := e.LLM.Ledger().Generations(prompt); len(gens) != 1 || !gens[0].Aborted || gens[0].Tokens >= tokens {
			t.Errorf("upstream generations %+v, want one aborted early: the transport cancelled its key", gens)
		}
	})
}

// TestRoundTripperOwnerKilled: the OpenAI SDK, with the Go client helper,
// streams a chat answer through a balancer from instance A (a reprise
// binary), which is SIGKILLed mid-answer; the balancer sends what comes
// next to B. The helper resumes on B, B finds A's connection gone, and the
// SDK's stream ends with the SDK's error for an error event, owner_lost's,
// within about a second — the lease is 30 s.
func TestRoundTripperOwnerKilled(t *testing.T) {
	// Not parallel: it SIGKILLs a reprise process and times how long the client waits.
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	const lease = 30 * time.Second
	e := newEnv(t, withNATSPort(), withLease(lease))
	a := startProcess(t, e)
	var target atomic.Pointer[url.URL]
	aURL, _ := url.Parse(a.URL)
	bURL, _ := url.Parse(e.URL)
	target.Store(aURL)
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target.Load()) },
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	})
	t.Cleanup(front.Close)
	client := openai.NewClient(option.WithBaseURL(front.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: &roundtrip.Transport{RetryDelay: 50 * time.Millisecond}}))
	prompt := uniquePrompt(t, "[tokens=2000] [delay=20ms]") // 40 s: it runs past the kill
	s := client.Chat.Completions.NewStreaming(waitCtx(t, lease), openai.ChatCompletionNewParams{
		Model: "mock-1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	}, option.WithHeader("Idempotency-Key", "k-sdk-owner-killed"))
	var killed time.Time
	for n := 0; s.Next(); n++ {
		if n == 5 {
			target.Store(bURL)
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed = time.Now()
		}
	}
	took := time.Since(killed)
	// openai-go reports an error event as "received error while
	// streaming" with the event's body.
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), `"code":"owner_lost"`) {
		t.Fatalf("the SDK's stream ended with %v, want the error event's, owner_lost", err)
	}
	t.Logf("the SDK got owner_lost %s after the kill (lease %s)", took, lease)
	if killed.IsZero() || took > 5*time.Second {
		t.Errorf("the SDK waited %s for a dead owner, want about a second (lease %s)", took, lease)
	}
}
