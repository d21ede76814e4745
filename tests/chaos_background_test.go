package tests

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/chaoscore"
)

// TestChaosOwnerKillsBackground: Responses runs go to a reprise binary A,
// which is SIGKILLed mid-way, round after round (a fresh A each round); the
// clients go on through the in-process instance B. Without background mode
// each generation A was running is lost and regenerated (an extra upstream
// generation per kill in flight); with --upstream-background, B reattaches
// to the upstream's background response and the kill costs none. Every run
// is checked as in every chaos scenario (nothing lost, duplicated, or
// generated past its allowance); the test reports the extra generations of
// each mode. REPRISE_CHAOS_ROUNDS and REPRISE_CHAOS_ROUND_RUNS scale it
// (default 3 rounds of 24 runs).
func TestChaosOwnerKillsBackground(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills reprise binaries")
	}
	rounds, perRound := envInt("REPRISE_CHAOS_ROUNDS", 3), envInt("REPRISE_CHAOS_ROUND_RUNS", 24)
	for _, background := range []bool{false, true} {
		name := map[bool]string{false: "regenerate", true: "background"}[background]
		t.Run(name, func(t *testing.T) {
			seed := chaosSeed(t)
			opts := []envOption{withNATSPort(), withLease(time.Second)}
			var flags []string
			if background {
				opts, flags = append(opts, withBackground()), []string{"--upstream-background"}
			}
			e := newEnv(t, opts...)
			started := time.Now()
			var inFlight, total int
			var sums []chaoscore.Summary
			for round := range rounds {
				n, sum := killRound(t, e, flags, seed+uint64(round), fmt.Sprintf("%s-r%d-", name, round), perRound)
				inFlight += n
				total += sum.Runs
				sums = append(sums, sum)
				summarize(t, name+" round "+strconv.Itoa(round), sum, perRound, started)
			}
			gens := e.LLM.Ledger().Total().Generations
			regenerated := 0
			for _, s := range sums {
				regenerated += s.Regenerated
			}
			t.Logf("%s: %d runs, %d kills with %d generations in flight: %d upstream generations, %d extra; %d regenerated; in %s",
				name, total, rounds, inFlight, gens, gens-total, regenerated, time.Since(started).Round(time.Millisecond))
			if background && gens-total >= inFlight {
				t.Errorf("background: %d extra generations for %d in flight at the kills, want fewer", gens-total, inFlight)
			}
		})
	}
}

// killRound plays runs keys through a fresh reprise binary (with flags)
// and SIGKILLs it once a quarter of them completed; the rest go on through
// e's instance. It returns how many generations were in flight on the
// binary when it died.
func killRound(t *testing.T, e *env, flags []string, seed uint64, prefix string, runs int) (int, chaoscore.Summary) {
	t.Helper()
	a := startProcess(t, e, flags...)
	var target atomic.Value
	target.Store(hostOf(t, a.URL))
	shape := chaosShape(20, 150, 6)
	shape.Format = chaoscore.Responses
	s := &chaosSuite{
		world: &chaosWorld{
			toxi:   newToxi(),
			target: func(*chaoscore.Run) string { return target.Load().(string) },
			direct: func() string { return e.URL },
		},
		ledger: e.LLM.Ledger(), shape: shape,
		idle: 2 * time.Second, timeout: 90 * time.Second,
		breakCodes: []string{"owner_lost"},
		keyPrefix:  prefix,
	}
	rn := s.runner(t, seed)
	before := e.LLM.Ledger().Total().Completed
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer rcancel()
	var wg sync.WaitGroup
	wg.Go(func() { rn.Play(rctx, seed, runs, runs) })
	pollUntil(t, 60*time.Second, "a quarter of the runs to complete on A", func() bool {
		return e.LLM.Ledger().Total().Completed-before >= runs/4
	})
	sigkill(t, a)
	inFlight := 0
	rn.Each(func(r *chaoscore.Run) bool {
		// In flight at the kill: still in progress (or adopted by B), or
		// already found lost (or regenerated) by B while this loop ran.
		st, code, err := r.Status(rctx, e.URL)
		if err == nil && code == http.StatusOK && (st.State == "in_progress" || st.State == "failed" && st.Error == "owner_lost" || st.Generation > 1) {
			inFlight++
			r.Broke() // allowed one more generation; with background mode it should not need it
		}
		return true
	})
	target.Store(e.addr)
	wg.Wait()
	return inFlight, rn.Summary()
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
