package tests

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// Prices of whole binary fractions, so that costs compare exactly: 0.5 a
// prompt token, 2 a completion token.
const (
	costPrompt     = 0.5
	costCompletion = 2
)

// testPrices is the price table of costPrompt and costCompletion for every
// mock model.
func testPrices(tb testing.TB) *cost.Table {
	tb.Helper()
	tab, err := cost.New(map[string]cost.Price{"mock-*": {InputPer1M: costPrompt * 1e6, OutputPer1M: costCompletion * 1e6}})
	if err != nil {
		tb.Fatal(err)
	}
	return tab
}

func withPrices(tb testing.TB, guard ...cost.GuardConfig) envOption {
	tb.Helper()
	tab := testPrices(tb)
	return withConfig(func(c *proxy.Config) {
		c.Prices = tab
		c.Policy.BaseDelay, c.Policy.MaxDelay = time.Millisecond, time.Millisecond
		if len(guard) > 0 {
			c.CostGuard = guard[0]
		}
	})
}

// TestCostOnce: a stream dropped, attached to, resumed (GET and a POST with
// Last-Event-ID) and replayed three times is billed once: its status shows
// the fake model's ledger tokens (usage and billed) and their price, and
// the six requests served without a generation (an attach, two resumes,
// three replays) saved six times that; the tokens and cost metrics count
// the one generation, the saved metrics the six. The clients, which did
// not ask for the usage, never see the usage chunk reprise asked for.
func TestCostOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	prompt := uniquePrompt(t, "[tokens=20] [delay=20ms]")
	body := chatBody(prompt, true)
	const key = "k-cost-once"
	first := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key), 3) // dropped
	attached := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
	if attached.Header.Get("Idempotent-Replayed") != "" {
		t.Fatal("the generation completed before the attach: slow the fake down")
	}
	clients := [][]event{append(first, readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", lastID(first)), -1)...)}
	clients = append(clients, readEvents(t, attached, -1))
	waitState(t, e, key, "completed")
	for range 3 {
		resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
		if resp.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("a duplicate of a completed key was not replayed")
		}
		clients = append(clients, readEvents(t, resp, -1))
	}
	// The same client resuming with a cursor (a POST with Last-Event-ID):
	// a resume.
	clients = append(clients, append(clients[0][:5:5], readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key, "Last-Event-ID", clients[0][4].ID), -1)...))
	for i, evs := range clients {
		if len(evs) != 20+3 || lastEvent(t, evs).Data != "[DONE]" {
			t.Errorf("client %d: %d events, want role, 20 tokens, stop, [DONE]", i, len(evs))
		}
		for _, ev := range evs {
			if strings.Contains(ev.Data, `"usage":{`) {
				t.Errorf("client %d got the usage chunk it did not ask for: %s", i, ev.Data)
			}
		}
	}

	led := testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	gens := e.LLM.Ledger().Generations(prompt)
	if led.Generations != 1 || len(gens) != 1 || gens[0].Tokens != 20 {
		t.Fatalf("ledger %+v %+v, want one generation of 20 tokens", led, gens)
	}
	checkBilledOnce(t, e, key, gens[0], "")
	checkSaved(t, e, key, gens[0], testutil.SavedBy{Attach: 1, Replay: 3, Resume: 2})
}

// checkBilledOnce checks that key's status and e's metrics bill gen, the
// fake model's one generation of the key, once at the test prices: its
// usage, cost and what was billed over one generation; the tokens and cost
// counters. when prefixes the errors. It returns gen's price.
func checkBilledOnce(t *testing.T, e *env, key string, gen mockllm.Generation, when string) (price float64) {
	t.Helper()
	if when != "" {
		when += ": "
	}
	in, out := int64(gen.PromptTokens), int64(gen.Tokens)
	want := testutil.Usage{PromptTokens: in, CompletionTokens: out, TotalTokens: in + out}
	price = float64(in)*costPrompt + float64(out)*costCompletion
	st, _ := getStatus(t, e, key)
	if st.Usage == nil || *st.Usage != want {
		t.Errorf("%susage %+v, want the ledger's %+v", when, st.Usage, want)
	}
	if st.Cost == nil || *st.Cost != price {
		t.Errorf("%scost %v, want %v", when, st.Cost, price)
	}
	if b := st.Billed; b == nil || b.Usage != want || b.Cost == nil || *b.Cost != price || b.Generations != 1 {
		t.Errorf("%sbilled %+v, want %+v costing %v over 1 generation", when, b, want, price)
	}
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"reprise_tokens_total", "prompt", float64(in)},
		{"reprise_tokens_total", "completion", float64(out)},
		{"reprise_cost_total", "mock-*", price},
	} {
		if got := metric(t, e, c.name, c.label); got != c.want {
			t.Errorf("%s%s{%s} = %v, want %v", when, c.name, c.label, got, c.want)
		}
	}
	return price
}

// TestCostUsageAsked: a client that asks for the usage gets the usage
// chunk, on replay too, and the key is billed the same way.
func TestCostUsageAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	prompt := uniquePrompt(t, "[tokens=4]")
	body := strings.Replace(chatBody(prompt, true), `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
	for i := range 2 {
		evs := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-cost-asked"), -1)
		if len(evs) != 4+4 || !strings.Contains(evs[len(evs)-2].Data, `"usage":{`) {
			t.Errorf("call %d: %d events, want role, 4 tokens, stop, usage, [DONE]", i, len(evs))
		}
		waitState(t, e, "k-cost-asked", "completed")
	}
	gens := e.LLM.Ledger().Generations(prompt)
	st, _ := getStatus(t, e, "k-cost-asked")
	if len(gens) != 1 || st.Usage == nil || st.Usage.CompletionTokens != 4 || st.Usage.PromptTokens != int64(gens[0].PromptTokens) ||
		st.UsageBasis != "reported" || st.Saved == nil || st.Saved.Duplicates != 1 || st.Saved.By.Replay != 1 {
		t.Errorf("ledger %+v, status usage %+v (%s) saved %+v, want 4 reported tokens and 1 replay", gens, st.Usage, st.UsageBasis, st.Saved)
	}
}

// TestCostGuard: once spend passes the daily budget the guard narrows
// retries to connect failures (logged, exported): a 503 that would have
// been retried goes to the client after one upstream request.
func TestCostGuard(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t, cost.GuardConfig{DailyBudget: 1}))
	if got := metric(t, e, "reprise_cost_guard_narrowed", ""); got != 0 {
		t.Fatalf("narrowed before any spend: %v", got)
	}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=4]"), true), "Idempotency-Key", "k-guard-spend"), -1)
	waitState(t, e, "k-guard-spend", "completed") // 4 completion tokens: 8, over the budget of 1
	// The spend is counted once the generation is billed, a moment after
	// its record says completed (CI once sent the 503 in between).
	pollUntil(t, 10*time.Second, "the guard to count the spend", func() bool {
		return metric(t, e, "reprise_cost_guard_narrowed", "") == 1
	})
	checkNarrowed(t, e, e.URL, "k-guard-503")
	if got := metric(t, e, "reprise_cost_guard_narrowed", ""); got != 1 {
		t.Errorf("reprise_cost_guard_narrowed = %v, want 1", got)
	}
	if got := metric(t, e, "reprise_cost_guard_switches_total", "narrowed"); got != 1 {
		t.Errorf("reprise_cost_guard_switches_total{narrowed} = %v, want 1", got)
	}
}

// TestCostSDKRetry: a keyless request whose client left, retried by an SDK
// and replayed from the journal, saves the generation's cost, counted as a
// retry.
func TestCostSDKRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withPrices(t))
	prompt := uniquePrompt(t, "[tokens=20] [delay=40ms]")
	body := chatBody(prompt, true)
	key, _ := dropAfter(t, e.URL, body, 1)
	waitLeft(t, e.URL, 1)
	waitState(t, e, key, "completed")
	retry := do(t, "POST", e.URL+chatPath, body, "X-Stainless-Retry-Count", "1")
	readEvents(t, retry, -1)
	if retry.Header.Get("Idempotency-Key") != key {
		t.Fatalf("the SDK retry got key %q, want %q", retry.Header.Get("Idempotency-Key"), key)
	}
	gens := e.LLM.Ledger().Generations(prompt)
	if len(gens) != 1 {
		t.Fatalf("%d generations, want 1", len(gens))
	}
	checkSaved(t, e, key, gens[0], testutil.SavedBy{Retry: 1})
	if got := metric(t, e, "reprise_duplicates_suppressed_total", "retry"); got != 1 {
		t.Errorf("reprise_duplicates_suppressed_total{retry} = %v, want 1", got)
	}
}

// TestCostGuardFleet: the cost guard counts the fleet's spend. Two
// instances on one JetStream: once spend on the first passes the daily
// budget, the second, which spent nothing, narrows its retries too — a
// 503 through it goes to the client after one upstream request — and both
// export it.
func TestCostGuardFleet(t *testing.T) {
	t.Parallel()
	guard := cost.GuardConfig{DailyBudget: 1, ShareEvery: 50 * time.Millisecond}
	e := newEnv(t, withNATSPort(), withPrices(t, guard))
	b := startInstance(t, "fleet-b", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{replicas: 1, configure: func(c *proxy.Config) {
		c.Prices, c.CostGuard = testPrices(t), guard
		c.Policy.BaseDelay, c.Policy.MaxDelay = time.Millisecond, time.Millisecond
	}})
	if got := scraped(t, b.URL, "reprise_cost_guard_narrowed"); got != 0 {
		t.Fatalf("the second instance narrowed before any spend: %v", got)
	}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=4]"), true), "Idempotency-Key", "k-fleet-spend"), -1)
	waitState(t, e, "k-fleet-spend", "completed") // 4 completion tokens on the first instance: 8, over the budget of 1
	pollUntil(t, 10*time.Second, "the second instance's guard to count the first's spend", func() bool {
		return scraped(t, b.URL, "reprise_cost_guard_narrowed") == 1
	})
	checkNarrowed(t, e, b.URL, "k-fleet-503")
	if got := metric(t, e, "reprise_cost_guard_narrowed", ""); got != 1 {
		t.Errorf("the first instance: reprise_cost_guard_narrowed = %v, want 1", got)
	}
}

// checkNarrowed checks that the instance at url, its retries narrowed to
// connect failures, passes an upstream 503 on to its client after one
// request (a 503 is retried otherwise).
func checkNarrowed(t *testing.T, e *env, url, key string) {
	t.Helper()
	prompt := uniquePrompt(t, "[status=503] [tokens=2]")
	resp := do(t, "POST", url+chatPath, chatBody(prompt, false), "Idempotency-Key", key)
	readBody(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("narrowed: status %d, want the upstream's 503 unretried", resp.StatusCode)
	}
	if led := testutil.Settled(t, e.LLM.Ledger(), prompt, 0); led.Requests != 1 {
		t.Errorf("narrowed: %d upstream requests, want 1", led.Requests)
	}
}

// scraped is the value of the unlabelled series name on url's /metrics.
func scraped(tb testing.TB, url, name string) float64 {
	tb.Helper()
	for line := range strings.Lines(readBody(tb, do(tb, "GET", url+"/metrics", ""))) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("%s: %q: %v", name, line, err)
			}
			return f
		}
	}
	tb.Fatalf("%s is not on %s/metrics", name, url)
	return 0
}
