package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/resume"
)

// Two reprise instances on one 3-node JetStream cluster (journal and
// records at R3), in front of one fake upstream.

type clusterWorld struct {
	c      *natsCluster
	llm    *mockllm.Server
	llmURL string
}

func newClusterWorld(t *testing.T) *clusterWorld {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3-node JetStream cluster")
	}
	start := time.Now()
	c := startNATSCluster(t, 3)
	llm := mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond})
	hs := httptest.NewServer(llm)
	t.Cleanup(hs.Close)
	t.Logf("timing: 3-node cluster formed in %s", time.Since(start).Round(time.Millisecond))
	return &clusterWorld{c: c, llm: llm, llmURL: hs.URL}
}

// checkStream verifies a client's reassembled view of a key: ids unique
// and contiguous from 1 within the last generation, [DONE] last, content
// equal to the upstream's last generation, which completed.
func checkStream(t *testing.T, llm *mockllm.Server, prompt string, evs []event, wantGens int) {
	t.Helper()
	checkUnique(t, evs)
	var gen uint64
	var last []event
	for _, ev := range evs {
		p, err := resume.ParsePosition(ev.ID)
		if err != nil {
			t.Fatalf("event id %q: %v", ev.ID, err)
		}
		if p.Gen != gen {
			gen, last = p.Gen, nil
		}
		if ev.Type == "reset" {
			continue
		}
		if want := uint64(len(last) + 1); p.Offset != want {
			t.Fatalf("event %s: offset %d, want %d (lost or duplicated events)", ev.ID, p.Offset, want)
		}
		last = append(last, ev)
	}
	if len(last) == 0 || last[len(last)-1].Data != "[DONE]" {
		t.Fatalf("the stream did not end with [DONE]: last %+v", evs[len(evs)-1])
	}
	testutil.Settled(t, llm.Ledger(), prompt, wantGens)
	gens := llm.Ledger().Generations(prompt)
	if len(gens) != wantGens {
		t.Fatalf("%d upstream generations, want %d", len(gens), wantGens)
	}
	final := gens[len(gens)-1]
	if got := content(t, last); !final.Completed || got != final.Content {
		t.Fatalf("reassembled %q, the upstream's generation %d (completed=%v) is %q", got, len(gens), final.Completed, final.Content)
	}
}

// readAll reads a whole event stream.
func readAll(t *testing.T, resp *http.Response) []event { t.Helper(); return readEvents(t, resp, -1) }

// TestClusterResumeAcrossInstances: a stream started through A is resumed
// through B (GET + Last-Event-ID, POST + Last-Event-ID, a plain retry),
// while it runs and after it completed: byte-exact, no duplicates, one
// upstream generation.
func TestClusterResumeAcrossInstances(t *testing.T) {
	t.Parallel()
	w := newClusterWorld(t)
	// No owner dies here: a lease long enough that renewals starved on a
	// loaded machine (a second under -race beside a CPU burner) are not
	// taken for a death.
	opts := instanceOptions{lease: 10 * time.Second}
	a := startInstance(t, "A", w.c.urlsFrom(0), w.llmURL, opts)
	b := startInstance(t, "B", w.c.urlsFrom(1), w.llmURL, opts)
	modes := []struct {
		name   string
		resume func(key, body, last string) *http.Response
	}{
		{"GET with Last-Event-ID", func(key, _, last string) *http.Response {
			return do(t, "GET", b.URL+"/v1/streams/"+key, "", "Last-Event-ID", last)
		}},
		{"POST with Last-Event-ID", func(key, body, last string) *http.Response {
			return do(t, "POST", b.URL+chatPath, body, "Idempotency-Key", key, "Last-Event-ID", last)
		}},
		{"plain retry", func(key, body, _ string) *http.Response {
			return do(t, "POST", b.URL+chatPath, body, "Idempotency-Key", key)
		}},
	}
	for _, m := range modes {
		for _, running := range []bool{true, false} {
			name := m.name + map[bool]string{true: " while running", false: " after completion"}[running]
			t.Run(name, func(t *testing.T) {
				prompt := uniquePrompt(t, "[tokens=80] [delay=4ms]")
				body := chatBody(prompt, true)
				key := "k-" + strings.NewReplacer(" ", "-", "/", "-").Replace(t.Name())
				first := readEvents(t, do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key), 7)
				if !running {
					testutil.Settled(t, w.llm.Ledger(), prompt, 1)
					testutil.WaitState(t, b.URL, key, "completed")
				}
				rest := readAll(t, m.resume(key, body, lastID(first)))
				all := rest
				if m.name == "plain retry" { // the full stream again: its start is what the client had
					if len(rest) < len(first) || !slices.Equal(rest[:len(first)], first) {
						t.Fatalf("plain retry does not replay the first %d events", len(first))
					}
				} else {
					all = append(slices.Clone(first), rest...)
				}
				checkStream(t, w.llm, prompt, all, 1)
				// Both instances replay the completed key identically.
				for _, in := range []*instance{a, b} {
					rep := readAll(t, do(t, "GET", in.URL+"/v1/streams/"+key, ""))
					if !slices.Equal(rep, all) {
						t.Fatalf("%s replays %d events differing from the %d the client assembled", in.name, len(rep), len(all))
					}
				}
			})
		}
	}
}

// clusterStatus reads key's JSON status from the instance at base
// (testutil.GetStatus); the chaos tests call it.
func clusterStatus(t *testing.T, base, key string) (keyStatus, int) {
	t.Helper()
	return testutil.GetStatus(t, base, key)
}

// TestClusterInstanceKilled: instance A (the reprise binary, on the
// cluster through --nats with --replicas 3) is SIGKILLed mid-stream. A
// reader attached through B and the client that was on A (resuming
// through B) get event: error owner_lost once A's lease expired; the same
// key then regenerates once through B. A key A completed before it died
// replays through B unchanged.
func TestClusterInstanceKilled(t *testing.T) {
	// Not parallel: it SIGKILLs a reprise process and times owner_lost against a 1 s lease on an R3 cluster.
	w := newClusterWorld(t)
	const lease = time.Second
	a := startReprise(t, "--nats", strings.Join(w.c.urlsFrom(0), ","), "--replicas", "3",
		"--upstream", w.llmURL, "--lease", lease.String(), "--data", t.TempDir())
	b := startInstance(t, "B", w.c.urlsFrom(1), w.llmURL, instanceOptions{lease: lease})

	donePrompt := uniquePrompt(t, "[tokens=20]")
	doneBody := chatBody(donePrompt, true)
	done := readAll(t, do(t, "POST", a.URL+chatPath, doneBody, "Idempotency-Key", "k-done"))

	prompt := uniquePrompt(t, "[tokens=400] [delay=10ms]")
	body := chatBody(prompt, true)
	first := readEvents(t, do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", "k-killed"), 6)
	// A reader following through B (from the journal, A owns the generation).
	var onB []event
	var onBErr error
	var wg sync.WaitGroup
	attached := make(chan struct{})
	wg.Go(func() {
		onB, onBErr = fetchEvents(waitCtx(t, 60*time.Second), "GET", b.URL+"/v1/streams/k-killed", "", 1, func() { close(attached) },
			"Last-Event-ID", lastID(first))
	})
	select {
	case <-attached: // B serves the generation A runs
	case <-time.After(20 * time.Second):
		t.Fatal("the reader on B got nothing within 20s")
	}
	sigkill(t, a)
	killed := time.Now()
	wg.Wait()
	waited := time.Since(killed)
	if onBErr != nil {
		t.Fatal(onBErr)
	}
	if n := len(onB); n == 0 || onB[n-1].Type != "error" || !strings.Contains(onB[n-1].Data, "owner_lost") {
		t.Fatalf("the reader on B ended with %+v, want event: error owner_lost", onB[max(0, n-1)])
	}
	if waited > 10*lease {
		t.Errorf("the reader on B waited %s for a dead owner (lease %s)", waited, lease)
	}
	t.Logf("timing: B's reader got owner_lost %s after the SIGKILL (lease %s)", waited.Round(time.Millisecond), lease)
	gen1 := append(slices.Clone(first), onB...)
	checkUnique(t, gen1)

	// The client that was on A resumes through B: the rest of generation 1
	// as journaled, then the same error.
	t.Run("the client of A resumes through B", func(t *testing.T) {
		resp := do(t, "GET", b.URL+"/v1/streams/k-killed", "", "Last-Event-ID", lastID(first))
		if resp.StatusCode == http.StatusNoContent {
			resp.Body.Close()
			t.Fatalf("204 to the cursor %s, though the reader on B got %d more events (see TestChaosOwnerLostResumeAfterCursor)", lastID(first), len(onB))
		}
		if resumed := readAll(t, resp); !slices.Equal(resumed, onB) {
			t.Fatalf("resume through B: %d events, the reader on B had %d (or they differ)", len(resumed), len(onB))
		}
	})
	st, _ := clusterStatus(t, b.URL, "k-killed")
	if st.State != "failed" || st.Error != resume.OwnerLost {
		t.Fatalf("status %+v, want failed owner_lost", st)
	}
	// The same key regenerates once, through B, with a reset first.
	regen := readAll(t, do(t, "POST", b.URL+chatPath, body, "Idempotency-Key", "k-killed", "Last-Event-ID", lastID(onB)))
	if regen[0].Type != "reset" {
		t.Fatalf("regeneration starts with %+v, want a reset", regen[0])
	}
	checkStream(t, w.llm, prompt, regen, 2)
	if gens := w.llm.Ledger().Generations(prompt); gens[0].Completed {
		t.Errorf("generation 1 completed upstream although its owner was killed mid-stream")
	}
	// Completed before the kill: replayed through B byte for byte, no new generation.
	rep := readAll(t, do(t, "POST", b.URL+chatPath, doneBody, "Idempotency-Key", "k-done"))
	if !slices.Equal(rep, done) {
		t.Fatalf("replay through B differs from what A served")
	}
	checkStream(t, w.llm, donePrompt, rep, 1)
}

// What the NATS node tests pin, named in their failures.
const (
	pinInOrder = "a generation's journal holds its events in order through a JetStream stream leader election: the " +
		"appends are not re-sent behind the ones after them (jetstream.WithRetryAttempts(0): an append answered " +
		"\"no responders\" fails the generation, journal_failure, instead of landing after later ones), and " +
		"journal.Reader checks every offset (ErrGap, sent as an error event), so no journal reader (another " +
		"instance, any replay) silently misses events of a generation that ends with [DONE]"
	pinNodeSurvived = "a NATS node failure, or the journal stream's leader election, fails no generation in flight on " +
		"the instances connected to it: journal.Writer chains its messages by expected last subject sequence and " +
		"tries again through failovers, so no key regenerates (a second upstream generation, billed again)"
)

// nodeKillOutcome classifies the streams of a NATS node kill.
type nodeKillOutcome struct {
	completed, failed int
	silent            []string // a [DONE] that is not the upstream's generation, or replays that differ
}

// runNodeKill runs streams through A and B, kills NATS node victim while
// they run, and classifies what their clients and later replays got.
func runNodeKill(t *testing.T, w *clusterWorld, a, b *instance, victim int, streams int) nodeKillOutcome {
	t.Helper()
	type result struct {
		prompt, key string
		evs         []event
		err         error
	}
	results := make([]result, streams)
	var wg sync.WaitGroup
	started := make(chan struct{}, streams)
	sctx := waitCtx(t, 90*time.Second)
	for i := range streams {
		in := []*instance{a, b}[i%2]
		results[i].prompt = uniquePrompt(t, fmt.Sprintf("s%d [tokens=150] [delay=3ms]", i))
		results[i].key = fmt.Sprintf("k-node-%d", i)
		wg.Go(func() {
			r := &results[i]
			r.evs, r.err = fetchEvents(sctx, "POST", in.URL+chatPath, chatBody(r.prompt, true), 20,
				func() { started <- struct{}{} }, "Idempotency-Key", r.key)
		})
	}
	for range streams {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("streams did not start within 30s")
		}
	}
	begin := time.Now()
	w.c.kill(victim)
	wg.Wait()
	t.Logf("timing: killed %s; streams ended %s later", w.c.names[victim], time.Since(begin).Round(time.Millisecond))
	var out nodeKillOutcome
	for _, r := range results {
		if r.err != nil {
			t.Fatalf("%s: %v", r.key, r.err)
		}
		last := r.evs[len(r.evs)-1]
		done := last.Data == "[DONE]" && last.Type == ""
		if !done && last.Type != "error" {
			t.Fatalf("%s: the stream ended with %+v, neither [DONE] nor an error event", r.key, last)
		}
		if done {
			out.completed++
		} else {
			out.failed++
		}
		testutil.Settled(t, w.llm.Ledger(), r.prompt, 1)
		gens := w.llm.Ledger().Generations(r.prompt)
		if gaps := gapsOf(r.evs); len(gaps) > 0 || done && (content(t, r.evs) != gens[0].Content || !gens[0].Completed) {
			out.silent = append(out.silent, fmt.Sprintf("%s: the client's stream has gaps %v or other content than the upstream's", r.key, gaps))
		}
		for _, in := range []*instance{a, b} {
			rep, err := fetchEvents(waitCtx(t, 30*time.Second), "GET", in.URL+"/v1/streams/"+r.key, "", 0, nil)
			if err != nil {
				t.Fatalf("%s: replay through %s: %v", r.key, in.name, err)
			}
			switch rlast := rep[len(rep)-1]; {
			case done && !slices.Equal(rep, r.evs):
				out.silent = append(out.silent, fmt.Sprintf("%s: replay through %s: %d events (gaps %v), the client got %d", r.key, in.name, len(rep), gapsOf(rep), len(r.evs)))
			case !done && rlast.Data == "[DONE]":
				out.silent = append(out.silent, fmt.Sprintf("%s: failed for its client, but a replay through %s ends with [DONE] (%d events, gaps %v)", r.key, in.name, len(rep), gapsOf(rep)))
			}
		}
	}
	// A failed key regenerates once, and completes.
	for _, r := range results {
		if last := r.evs[len(r.evs)-1]; last.Type == "error" {
			regen := readAll(t, do(t, "POST", b.URL+chatPath, chatBody(r.prompt, true), "Idempotency-Key", r.key, "Last-Event-ID", last.ID))
			checkStream(t, w.llm, r.prompt, regen, 2)
		}
	}
	t.Logf("%d streams completed, %d failed (then regenerated), %d silently lost events", out.completed, out.failed, len(out.silent))
	return out
}

// gapsOf lists where event offsets skip within a generation.
func gapsOf(evs []event) (gaps []string) {
	var gen, prev uint64
	for _, ev := range evs {
		p, err := resume.ParsePosition(ev.ID)
		if err != nil {
			return append(gaps, "bad id "+ev.ID)
		}
		if p.Gen != gen {
			gen, prev = p.Gen, 0
		}
		if ev.Type != "reset" && p.Offset != prev+1 {
			gaps = append(gaps, fmt.Sprintf("%d→%s", prev, ev.ID))
		}
		prev = p.Offset
	}
	return gaps
}

// TestClusterNATSNodeKilled: one nats-server of the three is shut down
// while streams run through both instances (R3).
//   - a follower of both the journal stream and the records bucket that no
//     instance is connected to: the streams continue, no loss, no
//     duplicate, one upstream generation each;
//   - a follower that instance A is connected to (A's connection fails
//     over), the leader of the journal stream (A on it), and the leader of
//     the records bucket: the same — writers and leases ride out the
//     reconnect and the election.
func TestClusterNATSNodeKilled(t *testing.T) {
	// Not parallel: it kills NATS nodes and needs the elections to end within the instances' 2 s leases.
	for _, victim := range []string{"follower, no instance on it", "follower with A on it", "journal leader", "records leader"} {
		t.Run(victim, func(t *testing.T) {
			w := newClusterWorld(t)
			probe := startInstance(t, "probe", w.c.urlsFrom(0), w.llmURL, instanceOptions{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			evLeader, recLeader, err := w.c.leaders(ctx, probe.nc)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			probe.stop(t)
			kill, aNode := w.c.index(evLeader), w.c.index(evLeader)
			switch victim {
			case "records leader":
				kill = w.c.index(recLeader)
				aNode = (kill + 1) % 3
			case "journal leader":
			default:
				for i, name := range w.c.names {
					if name != evLeader && name != recLeader {
						kill = i // with 3 nodes and 2 leaders, one node leads neither
					}
				}
				aNode = (kill + 1) % 3
				if victim == "follower with A on it" {
					aNode = kill
				}
			}
			bNode := (aNode + 1) % 3
			if bNode == kill {
				bNode = (bNode + 1) % 3
			}
			a := startInstance(t, "A", w.c.urlsFrom(aNode), w.llmURL, instanceOptions{lease: 2 * time.Second})
			b := startInstance(t, "B", w.c.urlsFrom(bNode), w.llmURL, instanceOptions{lease: 2 * time.Second})
			t.Logf("journal leader %s, records leader %s; A on %s, B on %s; killing %s",
				evLeader, recLeader, w.c.names[aNode], w.c.names[bNode], w.c.names[kill])
			out := runNodeKill(t, w, a, b, kill, 8)
			switch {
			case len(out.silent) > 0:
				t.Fatalf("silent loss: %s\n  seen here: %s", pinInOrder, strings.Join(out.silent, "\n  "))
			case out.failed > 0:
				t.Fatalf("%s (here: %d of 8 streams failed)", pinNodeSurvived, out.failed)
			}
		})
	}
}
