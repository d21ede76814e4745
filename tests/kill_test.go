package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/testutil"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// reprisebin builds cmd/reprise once per test run.
func reprisebin(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "reprise-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "reprise")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/reprise").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binPath
}

// process is a reprise binary started by startReprise.
type process struct {
	cmd    *exec.Cmd
	URL    string
	exited chan struct{} // closed once the process ended
	err    error         // its exit status, once exited is closed
}

// startProcess runs the reprise binary against env's NATS and upstream.
func startProcess(tb testing.TB, e *env, extra ...string) *process {
	tb.Helper()
	return startReprise(tb, append([]string{
		"--nats", e.natsURL(), "--upstream", e.llmSrv.URL, "--data", tb.TempDir(), "--lease", e.opt.lease.String(),
	}, extra...)...)
}

// TestOwnerKilled: an instance killed mid-stream leaves a generation whose
// readers elsewhere get event: error once its lease expires; the same key
// then regenerates on another instance.
func TestOwnerKilled(t *testing.T) {
	// Not parallel: it SIGKILLs a reprise process and times how long readers wait for the dead owner's 1 s lease.
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	e := newEnv(t, withNATSPort(), withLease(time.Second))
	a := startProcess(t, e)
	prompt := uniquePrompt(t, "[tokens=400] [delay=10ms]")
	body := chatBody(prompt, true)
	first := readEvents(t, do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", "k-kill"), 5)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-kill", "", "Last-Event-ID", lastID(first)), -1)
	all := append(first, rest...)
	checkUnique(t, all)
	last := all[len(all)-1]
	if last.Type != "error" || !strings.Contains(last.Data, "owner_lost") {
		t.Fatalf("last event %+v, want event: error owner_lost", last)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("readers waited %s for a dead owner (lease 1s)", waited)
	}
	st := waitState(t, e, "k-kill", "failed")
	if st.Error != "owner_lost" {
		t.Errorf("error %q, want owner_lost", st.Error)
	}
	// A reader that got the error is at the end: 204, however stale the
	// dead owner's last count in the record.
	if resp := do(t, "GET", e.URL+"/v1/streams/k-kill", "", "Last-Event-ID", last.ID); resp.StatusCode != 204 {
		t.Errorf("cursor after owner_lost: %d, want 204", resp.StatusCode)
	}
	// A reader just before the error gets the error.
	if len(rest) >= 2 {
		again := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-kill", "", "Last-Event-ID", all[len(all)-2].ID), -1)
		if len(again) != 1 || again[0].Type != "error" {
			t.Errorf("reader before the end got %d events, want the owner_lost error", len(again))
		}
	}
	// The key regenerates through the surviving instance, with a reset for
	// a reader that was in generation 1.
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-kill", "Last-Event-ID", lastID(first)), -1)
	if evs[0].Type != "reset" || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("regeneration: first %+v last %+v", evs[0], evs[len(evs)-1])
	}
	testutil.Settled(t, e.LLM.Ledger(), prompt, 2)
	gens := e.LLM.Ledger().Generations(prompt)
	if len(gens) != 2 || gens[0].Completed || !gens[1].Completed {
		t.Fatalf("generations %d (first completed=%v), want the killed one and one complete", len(gens), gens[0].Completed)
	}
	if got := content(t, evs[1:]); got != gens[1].Content {
		t.Errorf("regenerated content differs from upstream")
	}
}

// TestGracefulShutdown: SIGTERM lets a running generation finish journaling.
func TestGracefulShutdown(t *testing.T) {
	// Not parallel: it SIGTERMs a reprise process and gives its running generation the grace to finish.
	if testing.Short() {
		t.Skip("builds a reprise binary")
	}
	e := newEnv(t, withNATSPort())
	a := startProcess(t, e)
	prompt := uniquePrompt(t, "[tokens=60] [delay=10ms]")
	readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-term"), 3)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.exited:
		if a.err != nil {
			t.Fatalf("reprise exited with %v", a.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("reprise did not exit within 20s of SIGTERM")
	}
	st := waitState(t, e, "k-term", "completed")
	if st.Events != 63 {
		t.Errorf("journaled %d events, want 63", st.Events)
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Completed != 1 {
		t.Errorf("ledger %+v", g)
	}
}

// TestOwnerKilledSeenWithinASecond: the owner of a generation, A (a
// reprise binary), is SIGKILLed while a reader on B follows the generation
// live. B learns at once that A's NATS connection closed: the reader gets
// event: error owner_lost within about a second — the lease (30 s) is far
// off — the record is failed owner_lost, and the key generates again.
func TestOwnerKilledSeenWithinASecond(t *testing.T) {
	// Not parallel: it SIGKILLs a reprise process and times how long a reader elsewhere waits.
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	const lease = 30 * time.Second
	e := newEnv(t, withNATSPort(), withLease(lease))
	a := startProcess(t, e)
	prompt := uniquePrompt(t, "[tokens=2000] [delay=20ms]") // 40 s: it runs past the kill
	body := chatBody(prompt, true)
	key := "k-kill-seen"
	first := readEvents(t, do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key), 3)
	var killed time.Time
	evs, err := fetchEvents(waitCtx(t, lease), "GET", e.URL+"/v1/streams/"+key, "", 3, func() {
		// B's reader follows the generation live: kill its owner.
		if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		killed = time.Now()
	}, "Last-Event-ID", lastID(first))
	if err != nil {
		t.Fatal(err)
	}
	seen := time.Since(killed)
	last := evs[len(evs)-1]
	if last.Type != "error" || !strings.Contains(last.Data, "owner_lost") || last.ID == "" {
		t.Fatalf("the reader on B ended with %+v, want event: error owner_lost with its id", last)
	}
	t.Logf("the reader on B got owner_lost %s after the kill (lease %s)", seen, lease)
	if seen > 5*time.Second {
		t.Errorf("the reader on B waited %s for a dead owner, want about a second (lease %s)", seen, lease)
	}
	checkUnique(t, append(first, evs...))
	if st := waitState(t, e, key, "failed"); st.Error != "owner_lost" {
		t.Errorf("error %q, want owner_lost", st.Error)
	}
	again := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=5]"), true), "Idempotency-Key", key+"-next"), -1)
	if again[len(again)-1].Data != "[DONE]" {
		t.Errorf("B after the kill: last %+v", again[len(again)-1])
	}
}

// TestOwnerPausedIsNotTakenForDead: the owner of a generation, A, is
// paused (SIGSTOP) for several of its readers' quiet checks while a reader
// on B follows the generation. A paused process keeps its NATS connection
// open: its subscription stays, B's asks get no answer, which is not
// taken for death. Continued, A finishes the generation, and B's reader
// gets all of it.
func TestOwnerPausedIsNotTakenForDead(t *testing.T) {
	// Not parallel: it pauses a reprise process.
	if testing.Short() {
		t.Skip("builds and pauses a reprise binary")
	}
	const lease = 30 * time.Second
	e := newEnv(t, withNATSPort(), withLease(lease))
	a := startProcess(t, e)
	prompt := uniquePrompt(t, "[tokens=100] [delay=10ms]")
	key := "k-paused-owner"
	first := readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key), 3)
	evs, err := fetchEvents(waitCtx(t, lease), "GET", e.URL+"/v1/streams/"+key, "", 3, func() {
		if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Error(err)
		}
		// Several quiet ticks (0.4 s each) and their asks, each
		// waiting out its timeout.
		time.Sleep(4 * time.Second)
		if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Error(err)
		}
	}, "Last-Event-ID", lastID(first))
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; last.Data != "[DONE]" {
		t.Fatalf("the reader on B ended with %+v after A's pause, want the whole answer", last)
	}
	checkUnique(t, append(first, evs...))
	waitState(t, e, key, "completed")
}
