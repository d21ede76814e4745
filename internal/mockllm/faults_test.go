package mockllm_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

func TestAbortAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		prompt     string
		stream     bool
		wantEvents int
		wantTokens int
	}{
		{name: "mid stream", prompt: "a [tokens=10] [abort_after=3]", stream: true, wantEvents: 3, wantTokens: 2},
		{name: "before first event", prompt: "b [tokens=10] [abort_after=0]", stream: true, wantEvents: 0, wantTokens: 0},
		{name: "after done", prompt: "c [tokens=2] [abort_after=6]", stream: true, wantEvents: 6, wantTokens: 2},
		{name: "non stream", prompt: "d [tokens=4] [abort_after=2]", stream: false, wantEvents: 0, wantTokens: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			fake, srv := newFake(t, mockllm.Config{})
			resp := mustPost(t, ctx, srv.URL+mockllm.ChatPath, chatBody(tt.prompt, tt.stream))
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d", resp.StatusCode)
			}
			var err error
			if tt.stream {
				var events []string
				events, err = readEvents(resp.Body)
				if len(events) != tt.wantEvents {
					t.Errorf("client saw %d events, want %d", len(events), tt.wantEvents)
				}
			} else {
				_, err = io.ReadAll(resp.Body)
			}
			if err == nil || !isAbrupt(err) {
				t.Fatalf("read error = %v, want an abrupt end (not a clean EOF)", err)
			}
			if err := fake.Ledger().Wait(ctx, tt.prompt, 1); err != nil {
				t.Fatal(err)
			}
			g := fake.Ledger().Generations(tt.prompt)[0]
			if !g.Aborted || g.Completed || g.Events != tt.wantEvents || g.Tokens != tt.wantTokens {
				t.Errorf("generation = %+v", g)
			}
			if e := fake.Ledger().Get(tt.prompt); e != (mockllm.Entry{Requests: 1, Generations: 1, Tokens: tt.wantTokens}) {
				t.Errorf("entry = %+v", e)
			}
		})
	}
}

func TestStatusSequence(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{})
	const prompt = "flaky [status=503,429,500,200,502] [retry_after=2] [retry_after_ms=300] [tokens=2]"
	steps := []struct {
		status                int
		retryAfter, retryMS   string
		wantType, wantMessage string
	}{
		{status: 503, retryAfter: "2", retryMS: "300", wantMessage: "mock status 503"},
		{status: 429, retryAfter: "2", retryMS: "300", wantMessage: "mock status 429"},
		{status: 500, wantMessage: "mock status 500"},
		{status: 200},
		{status: 502, wantMessage: "mock status 502"},
		{status: 200},
	}
	for i, step := range steps {
		resp := mustPost(t, ctx, srv.URL+mockllm.ChatPath, chatBody(prompt, true))
		if resp.StatusCode != step.status {
			t.Fatalf("request %d: status = %d, want %d", i+1, resp.StatusCode, step.status)
		}
		if got := resp.Header.Get("Retry-After"); got != step.retryAfter {
			t.Errorf("request %d: Retry-After = %q, want %q", i+1, got, step.retryAfter)
		}
		if got := resp.Header.Get("retry-after-ms"); got != step.retryMS {
			t.Errorf("request %d: retry-after-ms = %q, want %q", i+1, got, step.retryMS)
		}
		if step.status != http.StatusOK {
			if msg := checkErrorBody(t, resp.Body); msg != step.wantMessage {
				t.Errorf("request %d: message = %q, want %q", i+1, msg, step.wantMessage)
			}
			continue
		}
		events, err := readEvents(resp.Body)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		checkChatStream(t, events, "test-model", mockllm.Content(prompt, 2, false))
	}
	if err := fake.Ledger().Wait(ctx, prompt, 2); err != nil {
		t.Fatal(err)
	}
	if got := fake.Ledger().Get(prompt); got != (mockllm.Entry{Requests: 6, Generations: 2, Completed: 2, Tokens: 4}) {
		t.Errorf("entry = %+v", got)
	}
}

func TestHang(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{true, false} {
		name := map[bool]string{true: "stream", false: "non stream"}[stream]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			fake, srv := newFake(t, mockllm.Config{})
			prompt := "stuck [hang] " + name
			reqCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() {
				// Cancel once the fake has accepted the request and is hanging.
				if fake.Ledger().WaitStarted(reqCtx, prompt, 1) == nil {
					cancel()
				}
			}()
			resp, err := post(t, reqCtx, srv.URL+mockllm.ChatPath, chatBody(prompt, stream))
			if err == nil {
				resp.Body.Close()
				t.Fatalf("got response %d from a hung upstream", resp.StatusCode)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("error = %v, want context.Canceled", err)
			}
			if err := fake.Ledger().Wait(ctx, prompt, 1); err != nil {
				t.Fatalf("generation never ended after client left: %v", err)
			}
			if g := fake.Ledger().Generations(prompt)[0]; !g.Aborted || g.Events != 0 || g.Tokens != 0 {
				t.Errorf("generation = %+v", g)
			}
		})
	}
}

func TestHangAfter(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{})
	const prompt = "stall [tokens=10] [hang_after=3]"
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp := mustPost(t, reqCtx, srv.URL+mockllm.ChatPath, chatBody(prompt, true))
	var (
		events []string
		err    error
	)
	for ev, readErr := range sse.Read(resp.Body, nil) {
		if readErr != nil {
			err = readErr
			break
		}
		if events = append(events, ev.Data); len(events) == 3 {
			cancel() // the fake now stalls; give up waiting like a client with a timeout
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("read error = %v, want context.Canceled", err)
	}
	if len(events) != 3 {
		t.Errorf("got %d events, want 3", len(events))
	}
	if err := fake.Ledger().Wait(ctx, prompt, 1); err != nil {
		t.Fatal(err)
	}
	if g := fake.Ledger().Generations(prompt)[0]; !g.Aborted || g.Events != 3 || g.Tokens != 2 {
		t.Errorf("generation = %+v", g)
	}
}

func TestClientGoneStopsGeneration(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{})
	const prompt = "long [tokens=100000] [delay=1ms]"
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp := mustPost(t, reqCtx, srv.URL+mockllm.ChatPath, chatBody(prompt, true))
	_ = resp // the client never reads; it just leaves below
	if err := fake.Ledger().WaitEvents(ctx, prompt, 5); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := fake.Ledger().Wait(ctx, prompt, 1); err != nil {
		t.Fatalf("generation kept running after client left: %v", err)
	}
	g := fake.Ledger().Generations(prompt)[0]
	if !g.Aborted || g.Completed || g.Tokens >= 100000 {
		t.Errorf("generation = %+v", g)
	}
}
