package mockllm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

func TestLedgerConcurrent(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{Tokens: 5})
	const (
		prompts   = 4
		perPrompt = 6
	)
	var wg sync.WaitGroup
	errs := make(chan error, prompts*perPrompt)
	for p := range prompts {
		prompt := fmt.Sprintf("concurrent %d [status=503]", p)
		for i := range perPrompt {
			wg.Go(func() {
				resp, err := post(t, ctx, srv.URL+mockllm.ChatPath, chatBody(prompt, i%2 == 0))
				if err != nil {
					errs <- err
					return
				}
				defer resp.Body.Close()
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					errs <- err
				}
			})
		}
	}
	// Read the ledger concurrently with the writers (exercised under -race).
	wg.Go(func() {
		for range 50 {
			_ = fake.Ledger().Total()
			_ = fake.Ledger().Generations("concurrent 0 [status=503]")
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for p := range prompts {
		prompt := fmt.Sprintf("concurrent %d [status=503]", p)
		if err := fake.Ledger().Wait(ctx, prompt, perPrompt-1); err != nil {
			t.Fatal(err)
		}
		want := mockllm.Entry{Requests: perPrompt, Generations: perPrompt - 1, Completed: perPrompt - 1, Tokens: 5 * (perPrompt - 1)}
		if got := fake.Ledger().Get(prompt); got != want {
			t.Errorf("%s: %+v, want %+v", prompt, got, want)
		}
	}
	wantTotal := mockllm.Entry{Requests: prompts * perPrompt, Generations: prompts * (perPrompt - 1), Completed: prompts * (perPrompt - 1), Tokens: prompts * 5 * (perPrompt - 1)}
	if got := fake.Ledger().Total(); got != wantTotal {
		t.Errorf("total = %+v, want %+v", got, wantTotal)
	}

	fake.Ledger().Reset()
	if got := fake.Ledger().Total(); got != (mockllm.Entry{}) {
		t.Errorf("total after reset = %+v", got)
	}
	if gens := fake.Ledger().Generations("concurrent 0 [status=503]"); len(gens) != 0 {
		t.Errorf("generations after reset = %d", len(gens))
	}
}

func TestLedgerHandler(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{})
	const prompt = "counted [tokens=3]"
	resp := mustPost(t, ctx, srv.URL+mockllm.ChatPath, chatBody(prompt, false))
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if err := fake.Ledger().Wait(ctx, prompt, 1); err != nil {
		t.Fatal(err)
	}

	rec := newRecorder(t, fake.LedgerHandler(), http.MethodGet)
	if rec.Code != http.StatusOK {
		t.Fatalf("status = %d", rec.Code)
	}
	var report mockllm.LedgerReport
	if err := json.Unmarshal(rec.Body.Bytes(), &report); err != nil {
		t.Fatal(err)
	}
	want := mockllm.Entry{Requests: 1, Generations: 1, Completed: 1, Tokens: 3}
	if report.Total != want || report.Prompts[prompt] != want || len(report.Prompts) != 1 {
		t.Errorf("report = %+v", report)
	}
	if rec := newRecorder(t, fake.LedgerHandler(), http.MethodPost); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /ledger status = %d", rec.Code)
	}

	// ?prompt= gives one prompt's generations with their content.
	for _, tc := range []struct {
		prompt string
		want   mockllm.Entry
		gens   int
	}{{prompt, want, 1}, {"never asked", mockllm.Entry{}, 0}} {
		rec := httptest.NewRecorder()
		fake.LedgerHandler().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "/ledger?prompt="+url.QueryEscape(tc.prompt), nil))
		var pr mockllm.PromptReport
		if err := json.Unmarshal(rec.Body.Bytes(), &pr); err != nil {
			t.Fatal(err)
		}
		if pr.Prompt != tc.prompt || pr.Entry != tc.want || len(pr.Generations) != tc.gens || pr.Generations == nil {
			t.Errorf("?prompt=%q: %+v", tc.prompt, pr)
		}
		if tc.gens == 1 {
			g := pr.Generations[0]
			if !g.Completed || g.Content != strings.Join(mockllm.Content(tc.prompt, 3, false), "") {
				t.Errorf("?prompt=%q generation = %+v", tc.prompt, g)
			}
		}
	}
}

// TestLedgerWaitSettled: WaitSettled returns once every generation of the
// prompt has ended, with the entry as it then was; a running one keeps it
// waiting, and the error of a wait that ran out says what it waited for.
func TestLedgerWaitSettled(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{})
	l := fake.Ledger()

	if got, err := l.WaitSettled(ctx, "never asked", 0); err != nil || got != (mockllm.Entry{}) {
		t.Errorf("WaitSettled(never asked, 0) = %+v, %v; want the zero entry at once", got, err)
	}

	// A stream read to its end: its entry is final, completion included,
	// whenever the handler gets to book it.
	const done = "settled [tokens=4]"
	resp := mustPost(t, ctx, srv.URL+mockllm.ChatPath, chatBody(done, true))
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	if got, err := l.WaitSettled(ctx, done, 1); err != nil || got != (mockllm.Entry{Requests: 1, Generations: 1, Completed: 1, Tokens: 4}) {
		t.Errorf("after the stream: %+v, %v; want 1 request, 1 completed generation of 4 tokens", got, err)
	}

	// An aborted generation is settled too, and an injected status makes none.
	const broken = "settled broken [tokens=10] [abort_after=3]"
	resp = mustPost(t, ctx, srv.URL+mockllm.ChatPath, chatBody(broken, true))
	_, _ = io.Copy(io.Discard, resp.Body) // ends with a cut connection
	if got, err := l.WaitSettled(ctx, broken, 1); err != nil || got.Generations != 1 || got.Completed != 0 {
		t.Errorf("after an aborted stream: %+v, %v; want 1 generation, not completed", got, err)
	}
	const refused = "settled refused [status=503]"
	resp = mustPost(t, ctx, srv.URL+mockllm.ChatPath, chatBody(refused, true))
	_, _ = io.Copy(io.Discard, resp.Body)
	if got, err := l.WaitSettled(ctx, refused, 0); err != nil || got != (mockllm.Entry{Requests: 1}) {
		t.Errorf("after a 503: %+v, %v; want 1 request, no generation", got, err)
	}

	// A running generation: the wait runs out and says so.
	const running = "settled running [tokens=10] [hang_after=2]"
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp = mustPost(t, reqCtx, srv.URL+mockllm.ChatPath, chatBody(running, true))
	if err := l.WaitEvents(ctx, running, 2); err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	_, err := l.WaitSettled(short, running, 1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitSettled on a running generation: %v, want a deadline error", err)
	}
	for _, want := range []string{running, "none running", "generations: 1 started, 0 finished"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	cancel() // the client leaves: the generation aborts, the prompt settles
	if got, err := l.WaitSettled(ctx, running, 1); err != nil || got.Generations != 1 || got.Completed != 0 {
		t.Errorf("after the client left: %+v, %v", got, err)
	}
	resp.Body.Close()
}

// TestLedgerWaitErrors: a wait that runs out names the prompt, the
// condition and what the ledger held, and wraps the context's error.
func TestLedgerWaitErrors(t *testing.T) {
	t.Parallel()
	fake, _ := newFake(t, mockllm.Config{})
	expired, cancel := context.WithCancel(t.Context())
	cancel()
	l := fake.Ledger()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"Wait", l.Wait(expired, "p", 2), `waiting for 2 finished generations of prompt "p"`},
		{"WaitStarted", l.WaitStarted(expired, "p", 1), `waiting for 1 started generations of prompt "p"`},
		{"WaitEvents", l.WaitEvents(expired, "p", 3), `waiting for 3 events written by the latest generation of prompt "p"`},
	} {
		if !errors.Is(tc.err, context.Canceled) || !strings.Contains(tc.err.Error(), tc.want) || !strings.Contains(tc.err.Error(), "seen: 0 requests") {
			t.Errorf("%s: %v, want it to wrap context.Canceled and say %q and what it saw", tc.name, tc.err, tc.want)
		}
	}
}

// TestLedgerForgetsOldestPrompts: past Config.MaxPrompts the ledger
// forgets its oldest prompt (a fake that runs for hours stays bounded);
// the totals keep counting everything.
func TestLedgerForgetsOldestPrompts(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{MaxPrompts: 3})
	for i := range 5 {
		resp, err := post(t, ctx, srv.URL+mockllm.ChatPath, chatBody(fmt.Sprintf("prompt %d [tokens=2]", i), false))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	l := fake.Ledger()
	entries := l.Entries()
	if len(entries) != 3 {
		t.Fatalf("%d prompts kept, want 3: %v", len(entries), entries)
	}
	for i := range 5 {
		_, kept := entries[fmt.Sprintf("prompt %d [tokens=2]", i)]
		if kept != (i >= 2) {
			t.Errorf("prompt %d kept %v, want the 3 newest kept", i, kept)
		}
	}
	if got := l.Total(); got.Requests != 5 || got.Tokens != 10 {
		t.Errorf("total %+v, want 5 requests and 10 tokens", got)
	}
}
