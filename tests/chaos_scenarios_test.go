package tests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/chaoscore"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
)

// Scenario tests of the chaos suite: fewer runs, one big fault each, the
// same client protocol and per-run invariants as TestChaos.

// summarize logs a scenario's fault mix and counts, and fails on any loss,
// duplicate or extra generation.
func summarize(t *testing.T, name string, sum chaoscore.Summary, runs int, started time.Time) {
	t.Helper()
	t.Logf("%s: drops:%s; resumes:%s; error events:%s; refused:%s; throttled:%s; upstream:%s",
		name, sum.Mix("drop:"), sum.Mix("resume:"), sum.Mix("error_event:"), sum.Mix("refused:"), sum.Mix("throttled:"), sum.Mix("upstream:"))
	t.Logf("%s: %s in %s", name, sum.Line(), time.Since(started).Round(time.Millisecond))
	if sum.Runs < runs {
		t.Errorf("%s: only %d of %d runs played", name, sum.Runs, runs)
	}
	if sum.Lost+sum.Duplicated+sum.Extra > 0 {
		t.Errorf("%s: lost=%d duplicated=%d extra_generations=%d", name, sum.Lost, sum.Duplicated, sum.Extra)
	}
}

func hostOf(tb testing.TB, rawURL string) string {
	tb.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		tb.Fatal(err)
	}
	return u.Host
}

// TestChaosNATSNodeKilled: randomized runs (client and upstream faults as
// in TestChaos) against two reprise instances on a 3-node JetStream cluster
// (R3), each attempt through either instance; mid-way one nats-server is
// shut down, chosen by the seed: the journal stream's leader, the records
// bucket's leader, or a follower — always the node instance A is connected
// to, so A fails over as well. No run may lose, duplicate or regenerate
// anything because of it.
func TestChaosNATSNodeKilled(t *testing.T) {
	cw := newClusterWorld(t)
	seed := chaosSeed(t)
	started := time.Now()
	rt := newRouter()
	upClient := &http.Client{Transport: rt}
	t.Cleanup(upClient.CloseIdleConnections)
	conf := func(cfg *proxy.Config) {
		cfg.Client = upClient
		cfg.Policy = chaosPolicy
		cfg.Limits.IdleTimeout = 2 * time.Second
	}
	probe := startInstance(t, "probe", cw.c.urlsFrom(0), cw.llmURL, instanceOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	evLeader, recLeader, err := cw.c.leaders(ctx, probe.nc)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	role := []string{"journal leader", "records leader", "follower"}[seed%3]
	victim := cw.c.index(evLeader)
	switch role {
	case "records leader":
		victim = cw.c.index(recLeader)
	case "follower":
		for i, name := range cw.c.names {
			if name != evLeader && name != recLeader {
				victim = i // with 3 nodes and 2 leaders, at least one node leads neither
			}
		}
	}
	// Production-like reader timing (idle check every 2s).
	conf2 := func(cfg *proxy.Config) { conf(cfg); cfg.HTTP.Heartbeat = 2 * time.Second }
	a := startInstance(t, "A", cw.c.urlsFrom(victim), cw.llmURL, instanceOptions{lease: 4 * time.Second, configure: conf2})
	b := startInstance(t, "B", cw.c.urlsFrom((victim+1)%3), cw.llmURL, instanceOptions{lease: 4 * time.Second, configure: conf2})
	probe.stop(t)
	instances := []*instance{a, b}
	s := &chaosSuite{
		world: &chaosWorld{
			toxi:     newToxi(),
			target:   func(r *chaoscore.Run) string { return instances[r.Rand().IntN(2)].addr },
			direct:   func() string { return b.URL },
			upstream: &upstreamFaults{router: rt, addr: hostOf(t, cw.llmURL), ledger: cw.llm.Ledger()},
		},
		ledger:     cw.llm.Ledger(),
		shape:      chaosShape(40, 120, 5),
		idle:       3 * time.Second,
		timeout:    90 * time.Second,
		breakCodes: upstreamBreakCodes,
	}
	const runs = 48
	rn := s.runner(t, seed)
	var wg sync.WaitGroup
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer rcancel()
	wg.Go(func() { rn.Play(rctx, seed, runs, 12) })
	pollUntil(t, 60*time.Second, "a third of the runs to generate", func() bool {
		return cw.llm.Ledger().Total().Generations >= runs/3
	})
	kill := time.Now()
	cw.c.kill(victim)
	t.Logf("killed %s, the %s (journal leader %s, records leader %s, A on %s, B on %s) %s into the runs, in %s",
		cw.c.names[victim], role, evLeader, recLeader, cw.c.names[victim], cw.c.names[(victim+1)%3],
		kill.Sub(started).Round(time.Millisecond), time.Since(kill).Round(time.Millisecond))
	wg.Wait()
	summarize(t, "nats node killed", rn.Summary(), runs, started)
}

// TestChaosRepriseKilled: runs (client faults only) go to a reprise binary
// A; while they are in flight A is SIGKILLed and the clients go on through
// the in-process instance B on the same JetStream. A generation A was
// running must end for its readers with event: error owner_lost once A's
// lease expired, and the key regenerates exactly once; a key A completed
// replays in full.
func TestChaosRepriseKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	seed := chaosSeed(t)
	e := newEnv(t, withNATSPort(), withLease(time.Second))
	a := startProcess(t, e)
	started := time.Now()
	var target atomic.Value
	target.Store(hostOf(t, a.URL))
	s := &chaosSuite{
		world: &chaosWorld{
			toxi:   newToxi(),
			target: func(*chaoscore.Run) string { return target.Load().(string) },
			direct: func() string { return e.URL },
		},
		ledger:     e.LLM.Ledger(),
		shape:      chaosShape(5, 200, 6),
		idle:       2 * time.Second,
		timeout:    90 * time.Second,
		breakCodes: []string{"owner_lost"},
		keyPrefix:  "kill-",
	}
	const runs = 36
	rn := s.runner(t, seed)
	var wg sync.WaitGroup
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer rcancel()
	wg.Go(func() { rn.Play(rctx, seed, runs, runs) })
	pollUntil(t, 60*time.Second, "a quarter of the runs to complete on A", func() bool {
		return e.LLM.Ledger().Total().Completed >= runs/4
	})
	sigkill(t, a)
	killed := time.Now()
	// Generations A was running when it died: each may be regenerated once.
	var inFlight, completed, notStarted int
	var broken []*chaoscore.Run
	rn.Each(func(r *chaoscore.Run) bool {
		st, code, err := r.Status(rctx, e.URL)
		switch {
		case err != nil:
			t.Errorf("%s: %v", r.Plan.Key, err)
		case code == http.StatusNotFound:
			notStarted++
		case st.State == "in_progress", st.State == "failed" && st.Error == "owner_lost":
			// Running on A when it died; on a loaded machine its lease
			// may have run out (owner_lost) before this look at it.
			inFlight++
			r.Broke()
			broken = append(broken, r)
		case st.State == "completed":
			completed++
		default:
			t.Errorf("%s: %+v at the kill", r.Plan.Key, st)
		}
		return true
	})
	target.Store(e.addr)
	t.Logf("SIGKILL %s into the runs: %d generations in flight on A, %d completed, %d keys not created yet",
		killed.Sub(started).Round(time.Millisecond), inFlight, completed, notStarted)
	wg.Wait()
	if inFlight == 0 {
		t.Errorf("no generation was in flight when A was killed")
	}
	// A generation A had stored whole (its [DONE]) but not recorded is
	// salvaged: it stays the key's result. The others regenerate once.
	salvaged := 0
	for _, r := range broken {
		switch r.Gen() {
		case 1:
			salvaged++
		case 2:
		default:
			t.Errorf("%s: ends in generation %d, want 2 (the one A ran, then one regeneration) or 1 (salvaged)", r.Plan.Key, r.Gen())
		}
	}
	t.Logf("%d of the %d generations in flight on A were salvaged (stored whole, not recorded)", salvaged, len(broken))
	if completed == 0 {
		t.Errorf("no generation had completed when A was killed")
	}
	sum := rn.Summary()
	summarize(t, "reprise killed", sum, runs, started)
}

// snapshotRuns returns each run's assembled, completed generation.
func snapshotRuns(rn *chaoscore.Runner) map[*chaoscore.Run][]chaoscore.Event {
	out := map[*chaoscore.Run][]chaoscore.Event{}
	rn.Each(func(r *chaoscore.Run) bool {
		out[r] = r.Result()
		return true
	})
	return out
}

// checkReplays replays every snapshotted key through base (GET and POST):
// byte-identical, Idempotent-Replayed, and no upstream generation.
func checkReplays(t *testing.T, ledger *mockllm.Ledger, base string, snap map[*chaoscore.Run][]chaoscore.Event) {
	t.Helper()
	before := ledger.Total().Generations
	ctx := waitCtx(t, 60*time.Second)
	for r, want := range snap {
		for _, mode := range []chaoscore.Mode{chaoscore.Get, chaoscore.Retry} {
			got, header, err := r.Replay(ctx, base, mode)
			switch {
			case err != nil:
				t.Errorf("%s replay of %s: %v", mode, r.Plan.Key, err)
			case mode == chaoscore.Retry && header.Get("Idempotent-Replayed") != "true":
				t.Errorf("POST %s: not marked Idempotent-Replayed", r.Plan.Key)
			case !slices.Equal(got, want):
				t.Errorf("%s replay of %s after the restart: %d events, %d before (first difference %s)", mode, r.Plan.Key, len(got), len(want), chaoscore.FirstDiff(got, want))
			}
		}
	}
	if n := ledger.Total().Generations - before; n != 0 {
		t.Errorf("replays after the restart made %d upstream generations", n)
	}
}

// TestChaosRepriseRestarted: reprise restarted on the same data: keys
// completed (under client faults) replay identically afterwards, and
// streams whose clients dropped just before the restart resume after it.
func TestChaosRepriseRestarted(t *testing.T) {
	t.Run("graceful, in process", func(t *testing.T) {
		seed := chaosSeed(t)
		started := time.Now()
		e := newEnv(t)
		s := &chaosSuite{
			world: &chaosWorld{
				toxi:   newToxi(),
				target: func(*chaoscore.Run) string { return e.addr },
				direct: func() string { return e.URL },
			},
			ledger: e.LLM.Ledger(), shape: chaosShape(8, 60, 3),
			idle: 2 * time.Second, timeout: 60 * time.Second,
			keyPrefix: "restart-",
		}
		const runs = 24
		rn := s.runner(t, seed)
		sum := rn.Play(waitCtx(t, 2*time.Minute), seed, runs, 12)
		snap := snapshotRuns(rn)
		// Streams in flight at the restart, their clients gone.
		type flight struct{ prompt, body, key, last string }
		var flights []flight
		for i := range 4 {
			f := flight{prompt: uniquePrompt(t, "[tokens=120] [delay=5ms]"), key: "k-restart-flight-" + itoa(i)}
			f.body = chatBody(f.prompt, true)
			f.last = lastID(readEvents(t, do(t, "POST", e.URL+chatPath, f.body, "Idempotency-Key", f.key), 3+i))
			flights = append(flights, f)
		}
		restart := time.Now()
		e.restart() // graceful: running generations finish journaling first
		t.Logf("timing: restart took %s", time.Since(restart).Round(time.Millisecond))
		checkReplays(t, e.LLM.Ledger(), e.URL, snap)
		for _, f := range flights {
			rest := readAll(t, do(t, "GET", e.URL+"/v1/streams/"+f.key, "", "Last-Event-ID", f.last))
			if len(rest) == 0 || rest[0].Type == "reset" {
				t.Fatalf("%s: resumed with %d events, first %+v", f.key, len(rest), rest)
			}
			full := readAll(t, do(t, "GET", e.URL+"/v1/streams/"+f.key, ""))
			i := slices.IndexFunc(full, func(ev event) bool { return ev.ID == f.last })
			if i < 0 || !slices.Equal(full[i+1:], rest) {
				t.Fatalf("%s: the resumed part is not the journal's continuation after %s", f.key, f.last)
			}
			checkStream(t, e.LLM, f.prompt, full, 1)
		}
		summarize(t, "reprise restarted (graceful)", sum, runs, started)
	})

	t.Run("SIGKILL, embedded JetStream", func(t *testing.T) {
		if testing.Short() {
			t.Skip("builds and kills a reprise binary")
		}
		seed := chaosSeed(t)
		started := time.Now()
		llm := mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond})
		llmSrv := httptest.NewServer(llm)
		t.Cleanup(llmSrv.Close)
		data := t.TempDir()
		args := []string{"--data", data, "--upstream", llmSrv.URL, "--lease", "1s"}
		p := startReprise(t, args...)
		var base atomic.Value
		base.Store(p.URL)
		s := &chaosSuite{
			world: &chaosWorld{
				toxi:   newToxi(),
				target: func(*chaoscore.Run) string { return hostOf(t, base.Load().(string)) },
				direct: func() string { return base.Load().(string) },
			},
			ledger: llm.Ledger(), shape: chaosShape(8, 60, 3),
			idle: 2 * time.Second, timeout: 60 * time.Second,
			keyPrefix: "sigkill-",
		}
		const runs = 16
		rn := s.runner(t, seed)
		sum := rn.Play(waitCtx(t, 2*time.Minute), seed, runs, 8)
		snap := snapshotRuns(rn)
		type flight struct{ prompt, body, key string }
		var flights []flight
		for i := range 3 {
			f := flight{prompt: uniquePrompt(t, "[tokens=300] [delay=5ms]"), key: "k-sigkill-flight-" + itoa(i)}
			f.body = chatBody(f.prompt, true)
			readEvents(t, do(t, "POST", p.URL+chatPath, f.body, "Idempotency-Key", f.key), 4)
			flights = append(flights, f)
		}
		sigkill(t, p)
		restart := time.Now()
		p2 := startReprise(t, args...)
		base.Store(p2.URL)
		t.Logf("timing: restarted on the same data in %s", time.Since(restart).Round(time.Millisecond))
		checkReplays(t, llm.Ledger(), p2.URL, snap)
		// The generations the killed process ran fail (owner_lost, once the
		// lease is over) and regenerate once.
		for _, f := range flights {
			evs := readAll(t, do(t, "GET", p2.URL+"/v1/streams/"+f.key, ""))
			if last := evs[len(evs)-1]; last.Type != "error" || !strings.Contains(last.Data, "owner_lost") {
				t.Fatalf("%s: the killed generation ended with %+v, want event: error owner_lost", f.key, last)
			}
			regen := readAll(t, do(t, "POST", p2.URL+chatPath, f.body, "Idempotency-Key", f.key, "Last-Event-ID", lastID(evs)))
			if regen[0].Type != "reset" {
				t.Fatalf("%s: regeneration starts with %+v, want reset", f.key, regen[0])
			}
			checkStream(t, llm, f.prompt, regen, 2)
		}
		summarize(t, "reprise restarted (SIGKILL)", sum, runs, started)
	})
}
