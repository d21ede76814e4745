package tests

import (
	"context"
	"flag"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/chaoscore"
	"github.com/reprise-dev/reprise/internal/proxy"
)

// The chaos suite: reprise, JetStream, the fake upstream and toxiproxy all
// in this process; the faults are chosen by a seed, fixed unless asked
// otherwise.
//
//	go test -race ./tests/ -run 'Chaos|Cluster'                     # default size, seed 1
//	go test ./tests/ -run 'TestChaos$' -chaos.runs=10000 -timeout 30m   # by hand (~4 min)
//	go test ./tests/ -run 'TestChaos$' -chaos.seed=42               # replay a seed's fault plans
//	go test ./tests/ -run 'TestChaos$' -chaos.seed=0                # a random seed (printed)
//
// A seed fixes every run's plan (tokens, delays, statuses, which toxics,
// where, and how the client resumes); the timing of a run is the machine's.
var (
	chaosSeedFlag     = flag.Uint64("chaos.seed", defaultChaosSeed, "chaos suite seed (0: a random one; printed either way)")
	chaosRunsFlag     = flag.Int("chaos.runs", 320, "chaos suite: number of randomized runs (keys)")
	chaosParallelFlag = flag.Int("chaos.parallel", 12, "chaos suite: runs in flight at once")
)

// defaultChaosSeed is the seed of a plain go test: the same fault plans on
// every run, so a failure replays with the same command.
const defaultChaosSeed = 1

func chaosSeed(tb testing.TB) uint64 {
	tb.Helper()
	seed := *chaosSeedFlag
	if seed == 0 {
		seed = rand.Uint64N(1_000_000_000) + 1
	}
	tb.Logf("seed %d (reproduce the fault plans with -chaos.seed=%d)", seed, seed)
	return seed
}

// chaosPolicy is a fast call policy: backoff in milliseconds, a budget and
// a breaker that never stand in the way, so a 429/5xx burst is retried.
var chaosPolicy = classify.Config{
	MaxAttempts: 5, BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
	BudgetRatio: 1, BudgetMin: 1 << 20, BreakerFailures: 1 << 20,
}

// upstreamBreakCodes are how a generation broken on the upstream link ends.
var upstreamBreakCodes = []string{"upstream_interrupted", "upstream_no_response", "upstream_bad_response", "upstream_timeout"}

// verifyNoLeaks waits (bounded) for goroutines to wind down, then reports
// the ones still running.
func verifyNoLeaks(t *testing.T, opts ...goleak.Option) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for goleak.Find(opts...) != nil && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // connections and timers closing; bounded above
	}
	goleak.VerifyNone(t, opts...)
}

// TestChaos: randomized runs against one reprise instance. Each run is a
// key whose client link is broken 1–5 times (limit_data, limit_data +
// slow_close, reset_peer on the request, on the answer or mid-stream,
// timeout mid-stream, or the client hanging up; latency on some), resumed
// by GET + Last-Event-ID, POST + Last-Event-ID or a plain retry; whose
// upstream may first answer a 429/5xx burst; and whose upstream link may
// break once (limit_data, limit_data + slow_close, reset_peer, timeout, a
// stall cut by reprise's idle timeout; latency never breaks). Checked per
// run: the reassembled content is byte-equal to what the upstream generated,
// event ids are contiguous with no duplicate and no gap, one upstream
// generation per key plus one per generation an injected fault broke, and
// the completed key replays identically (GET and POST).
func TestChaos(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { verifyNoLeaks(t, ignore) }) // registered first: runs after every other cleanup
	seed := chaosSeed(t)
	runs, parallel := *chaosRunsFlag, *chaosParallelFlag
	if testing.Short() {
		runs = min(runs, 60)
	}
	started := time.Now()

	rt := newRouter()
	upClient := &http.Client{Transport: rt}
	t.Cleanup(upClient.CloseIdleConnections)
	e := newEnv(t, withConfig(func(cfg *proxy.Config) {
		cfg.Client = upClient
		cfg.Policy = chaosPolicy
		cfg.Limits.IdleTimeout = 2 * time.Second
	}))
	s := &chaosSuite{
		world: &chaosWorld{
			toxi:     newToxi(),
			target:   func(*chaoscore.Run) string { return e.addr },
			direct:   func() string { return e.URL },
			upstream: &upstreamFaults{router: rt, addr: e.llmSrv.Listener.Addr().String(), ledger: e.LLM.Ledger()},
		},
		ledger:     e.LLM.Ledger(),
		shape:      chaosShape(8, 60, 3),
		idle:       2 * time.Second,
		timeout:    90 * time.Second,
		breakCodes: upstreamBreakCodes,
	}
	// Bounded: ~25ms a run without -race, ~70ms with it, at 12 at a time.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute+time.Duration(runs)*100*time.Millisecond)
	defer cancel()
	sum := s.runner(t, seed).Play(ctx, seed, runs, parallel)
	t.Logf("client link faults that dropped a connection:%s", sum.Mix("drop:"))
	t.Logf("resumes by mode:%s; streams ended early: %d", sum.Mix("resume:"), sum.Counts["ended_early"])
	t.Logf("upstream faults:%s; refused before the first event:%s; throttled:%s", sum.Mix("upstream:"), sum.Mix("refused:"), sum.Mix("throttled:"))
	t.Logf("error events seen:%s; resets seen: %d; failed generations seen by clients: %d; regenerations followed: %d",
		sum.Mix("error_event:"), sum.Counts["reset_seen"], sum.Counts["generation_failed_seen"], sum.Counts["regenerations_followed"])
	t.Logf("timing: %d runs (%d at a time) in %s; upstream: %+v", sum.Runs, parallel, time.Since(started).Round(time.Millisecond), e.LLM.Ledger().Total())
	t.Log(sum.Line())
	if sum.Runs < runs {
		t.Errorf("only %d of %d runs played", sum.Runs, runs)
	}
	if sum.Lost+sum.Duplicated+sum.Extra > 0 {
		t.Errorf("chaos found lost=%d duplicated=%d extra_generations=%d", sum.Lost, sum.Duplicated, sum.Extra)
	}
}
