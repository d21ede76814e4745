package mockllm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-dev/reprise/web/mockllm"
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
