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
