package tests

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/web"
)

// Per-call billing, the price model of an API sold by the call (a fixed
// price per successful call, retries billed too): a script's N calls, of
// which some time out before their answer and are sent again.

// perCallPrice is the price of a call, as the seeds' deepseek one.
const perCallPrice = 0.05

// perCallCounts is the number of logical calls and of those retried:
// REPRISE_PERCALL_CALLS (e.g. 10000: the seeds' example, by hand, without
// -race) with 15% retried, else 200 with 30 retried.
func perCallCounts(tb testing.TB) (calls, retried int) {
	tb.Helper()
	if v := os.Getenv("REPRISE_PERCALL_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			tb.Fatalf("REPRISE_PERCALL_CALLS=%q: want a positive number", v)
		}
		return n, n * 15 / 100
	}
	return 200, 30
}

// perCallRun is what a run of calls measured.
type perCallRun struct {
	calls, retried int // logical calls, and those retried once
	sent           int // requests sent: calls + retried
	generations    int // the fake upstream's ledger: generations it ran
	billed, saved  float64
	cost           float64 // reprise_cost_total
	statusBilled   int     // billed.calls summed over the answered keys' statuses
	statusSaved    int     // saved.calls summed likewise
	keys           map[string]bool
}

func (r perCallRun) String() string {
	return fmt.Sprintf("%d calls, %d retried (%d sent): upstream generations %d, calls billed %.0f (status %d), calls saved %.0f (status %d), cost %.2f",
		r.calls, r.retried, r.sent, r.generations, r.billed, r.statusBilled, r.saved, r.statusSaved, r.cost)
}

// TestCostPerCall: the seeds' example worked through reprise. N keyless,
// non-streamed chat calls priced per call; 15% of them time out before
// their answer — the client leaves once the upstream began the generation,
// which takes 400 ms — and are sent again, identical, as a retry loop
// does. With keyless retry recognition the upstream runs one generation
// per logical call: calls billed == logical calls, calls saved == the
// retries, and the cost is N × the call price; every retried key shows one
// call billed and one saved. Without it (--keyless-retry-window 0) every
// request sent is a generation the upstream ran and billed: calls billed
// == calls sent. The figures are logged (go test -v).
func TestCostPerCall(t *testing.T) {
	t.Parallel()
	calls, retried := perCallCounts(t)
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"recognised", 0}, {"window0", -1}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			run := runPerCall(t, calls, retried, c.window)
			t.Logf("%s: %s", c.name, run)
			price := func(n float64) float64 { return n * perCallPrice }
			if c.window == 0 {
				if run.generations != calls || run.billed != float64(calls) || run.saved != float64(retried) {
					t.Errorf("with recognition: %s; want %d generations and calls billed, %d saved", run, calls, retried)
				}
				if run.statusBilled != calls || run.statusSaved != retried || len(run.keys) != calls {
					t.Errorf("with recognition, the statuses of %d keys: %d calls billed, %d saved; want %d keys, %d, %d",
						len(run.keys), run.statusBilled, run.statusSaved, calls, calls, retried)
				}
			} else {
				if run.generations != run.sent || run.billed != float64(run.sent) || run.saved != 0 {
					t.Errorf("without recognition: %s; want %d generations and calls billed, none saved", run, run.sent)
				}
			}
			if math.Abs(run.cost-price(run.billed)) > 1e-6 {
				t.Errorf("cost %v, want %v calls at %v", run.cost, run.billed, perCallPrice)
			}
		})
	}
}

// TestCostPerCallRule: which generations of a model priced per call are a
// call billed: a completed one, and a stream the upstream began and that
// broke; not one the upstream refused (a 400). A replay of the completed
// one is a call saved. The status and the metrics agree.
func TestCostPerCallRule(t *testing.T) {
	t.Parallel()
	tab, err := cost.New(map[string]cost.Price{"mock-*": {PerCall: perCallPrice}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.Prices = tab }))
	for _, c := range []struct {
		key, directives string
		state           string
		calls           int // billed
	}{
		{"k-call-done", "[tokens=4]", "completed", 1},
		{"k-call-broken", "[tokens=10] [abort_after=4]", "failed", 1},
		{"k-call-refused", "[status=400]", "failed", 0},
	} {
		readBody(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, c.directives), true), "Idempotency-Key", c.key))
		st := waitState(t, e, c.key, c.state)
		switch {
		case c.calls == 0 && (st.Billed != nil || st.Cost != nil):
			t.Errorf("%s: billed %+v cost %v, want nothing billed", c.key, st.Billed, st.Cost)
		case c.calls > 0 && (st.Billed == nil || st.Billed.Calls != c.calls || st.Cost == nil || *st.Cost != perCallPrice):
			t.Errorf("%s: billed %+v cost %v, want %d call at %v", c.key, st.Billed, st.Cost, c.calls, perCallPrice)
		}
	}
	pollUntil(t, 10*time.Second, "the three generations to end on the proxy", func() bool {
		return metric(t, e, "reprise_generations_total", "completed")+metric(t, e, "reprise_generations_total", "failed")+
			metric(t, e, "reprise_generations_total", "interrupted") >= 3
	})
	if got := metric(t, e, "reprise_calls_billed_total", "mock-*"); got != 2 {
		t.Errorf("reprise_calls_billed_total = %v, want 2: the completed and the broken stream", got)
	}
	// The completed key replayed: a call saved.
	body := chatBody(uniquePrompt(t, "[tokens=4]"), true)
	readBody(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-call-replayed"))
	waitState(t, e, "k-call-replayed", "completed")
	replay := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-call-replayed")
	readBody(t, replay)
	if replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the duplicate of a completed key was not replayed")
	}
	if st, _ := getStatus(t, e, "k-call-replayed"); st.Billed == nil || st.Billed.Calls != 1 || st.Saved == nil || st.Saved.Calls != 1 {
		t.Errorf("replayed: billed %+v saved %+v, want one call billed, one saved", st.Billed, st.Saved)
	}
	if got := metric(t, e, "reprise_calls_saved_total", "mock-*"); got != 1 {
		t.Errorf("reprise_calls_saved_total = %v, want 1", got)
	}
}

// runPerCall sends calls logical calls through a reprise priced per call
// (keyless retry window: 0 the default, -1 off), retried of them cut
// before their answer and sent again, and measures what was billed.
func runPerCall(t *testing.T, calls, retried int, window time.Duration) perCallRun {
	t.Helper()
	tab, err := cost.New(map[string]cost.Price{"mock-*": {PerCall: perCallPrice}})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.Prices = tab
		if window != 0 {
			c.HTTP.KeylessRetryWindow = window
		}
	}))
	const workers = 16
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	base := uniquePrompt(t, "")
	// Every (100/15)th call is retried: its answer takes 20 tokens 20 ms
	// apart, time for its client to leave; the others answer at once.
	prompts := make([]string, calls)
	var cut []int
	for i := range prompts {
		if len(cut) < retried && i*retried/calls >= len(cut) {
			cut = append(cut, i)
			prompts[i] = fmt.Sprintf("%s call %d [tokens=20] [delay=20ms]", base, i)
			continue
		}
		prompts[i] = fmt.Sprintf("%s call %d [tokens=4]", base, i)
	}
	isCut := make(map[int]bool, len(cut))
	for _, i := range cut {
		isCut[i] = true
	}

	var mu sync.Mutex
	keys := map[string]bool{}
	var failed atomic.Bool
	// post sends prompt i's call and reads its answer; cut leaves as soon
	// as the upstream began the generation, before its answer.
	post := func(i int, leave bool) error {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.RequestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "POST", e.URL+chatPath, strings.NewReader(chatBody(prompts[i], false)))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if leave {
			started := e.LLM.Ledger().Generations(prompts[i])
			go func() {
				if e.LLM.Ledger().WaitStarted(ctx, prompts[i], len(started)+1) == nil {
					cancel() // the client's timeout, before the answer
				}
			}()
			resp, err := client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				return fmt.Errorf("call %d: answered %d before its client left: make the answer slower", i, resp.StatusCode)
			}
			if !errors.Is(err, context.Canceled) {
				return fmt.Errorf("call %d: %w", i, err)
			}
			return nil
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("call %d: %w", i, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return fmt.Errorf("call %d: reading the answer: %w", i, err)
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"choices"`) {
			return fmt.Errorf("call %d: status %d %.200s, want the answer", i, resp.StatusCode, body)
		}
		mu.Lock()
		keys[resp.Header.Get("Idempotency-Key")] = true
		mu.Unlock()
		return nil
	}
	// each runs f on every index of idx, workers at a time.
	each := func(idx []int, f func(int) error) {
		next := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range next {
					if err := f(i); err != nil {
						failed.Store(true)
						t.Error(err)
					}
				}
			})
		}
		for _, i := range idx {
			if failed.Load() {
				break
			}
			next <- i
		}
		close(next)
		wg.Wait()
	}
	all := make([]int, calls)
	for i := range all {
		all[i] = i
	}
	// Every call once; the cut ones leave before their answer.
	each(all, func(i int) error { return post(i, isCut[i]) })
	if failed.Load() {
		t.FailNow()
	}
	if window == 0 {
		// A retry sent before the proxy saw its client leave would be new.
		waitLeft(t, e.URL, float64(len(cut)))
	}
	// The retries: the same requests again, waiting for their answers.
	each(cut, func(i int) error { return post(i, false) })
	if failed.Load() {
		t.FailNow()
	}

	run := perCallRun{calls: calls, retried: len(cut), sent: calls + len(cut), keys: keys}
	for _, p := range prompts {
		run.generations += testutil.Settled(t, e.LLM.Ledger(), p, 1).Generations
	}
	// Each generation is billed before it counts as ended.
	pollUntil(t, 30*time.Second, "every upstream generation to end on the proxy", func() bool {
		ended := 0.0
		for _, o := range []string{"completed", "failed", "interrupted", "cancelled"} {
			ended += metric(t, e, "reprise_generations_total", o)
		}
		return ended >= float64(run.generations)
	})
	run.billed = metric(t, e, "reprise_calls_billed_total", "mock-*")
	run.saved = metric(t, e, "reprise_calls_saved_total", "mock-*")
	run.cost = metric(t, e, "reprise_cost_total", "mock-*")
	for key := range keys {
		st, code := getStatus(t, e, key)
		if code != http.StatusOK {
			t.Fatalf("status of %s: %d", key, code)
		}
		if st.Billed != nil {
			run.statusBilled += st.Billed.Calls
		}
		if st.Saved != nil {
			run.statusSaved += st.Saved.Calls
			if window == 0 && st.Saved.Calls != st.Saved.By.Retry {
				t.Errorf("key %s: saved %+v, want its calls saved to be its retries", key, st.Saved)
			}
		}
	}
	return run
}

// TestBrowserCalls: the demo page, served by a reprise priced per call,
// shows the key's calls beside its cost: one billed once the generation
// ends, one saved once the page replayed it.
func TestBrowserCalls(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	tab, err := cost.New(map[string]cost.Price{"demo": {PerCall: perCallPrice}}) // the page's model
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.Prices = tab }))
	web.Mount(e.p)
	p := newDemoPage(t, chromium, e.URL)
	defer func() { _ = p.run(5*time.Second, chromedp.Navigate("about:blank")) }()

	p.open(t)
	p.typePrompt(t, uniquePrompt(t, "[tokens=5]"))
	p.click(t, "generate")
	p.waitText(t, "conn", "done", 10*time.Second)
	p.waitText(t, "calls", "calls billed 1, calls saved 0", 5*time.Second)
	p.click(t, "replay")
	p.waitText(t, "conn", "done", 10*time.Second)
	p.expectText(t, "replayed", "true")
	p.waitText(t, "calls", "calls billed 1, calls saved 1", 5*time.Second)
}
