package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
)

// natsHelperEnv, set to a directory, makes this test binary a JetStream
// server of its own on that store (a process the NATS-pause fault can stop).
const natsHelperEnv = "REPRISE_CHAOS_TEST_NATS"

func TestMain(m *testing.M) {
	if dir := os.Getenv(natsHelperEnv); dir != "" {
		os.Exit(serveNATS(dir))
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// serveNATS serves JetStream on dir and a random port, whose URL it prints
// first, until its standard input closes.
func serveNATS(dir string) int {
	e, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir, Port: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer e.Shutdown()
	fmt.Println(e.Server.ClientURL())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startNATS runs a JetStream server in a process of its own and returns its
// URL and the process.
func startNATS(t *testing.T) (string, *os.Process) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), natsHelperEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	url := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		url <- strings.TrimSpace(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-url:
		if !strings.HasPrefix(u, "nats://") {
			t.Fatalf("the NATS process printed %q, want its URL", u)
		}
		return u, cmd.Process
	case <-time.After(60 * time.Second):
		t.Fatal("the NATS process did not print its URL within 60s")
		return "", nil
	}
}

var (
	binOnce sync.Once
	binDir  string // removed by TestMain
	binErr  error
)

// repriseBinary builds cmd/reprise once for the package's tests.
func repriseBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "reprise-chaos-test-"); binErr != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "reprise"), "../reprise").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return filepath.Join(binDir, "reprise")
}

// startReprise runs the reprise binary in front of upstream with args and
// returns its base URL once it is ready; its log is shown if the test fails.
func startReprise(t *testing.T, upstream string, args ...string) string {
	t.Helper()
	addr := testutil.FreeAddr(t)
	cmd := exec.Command(repriseBinary(t), append([]string{"--listen", addr, "--upstream", upstream, "--data", t.TempDir(), "--log-level", "error"}, args...)...)
	logs, err := os.Create(filepath.Join(t.TempDir(), "reprise.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(logs.Name())
			t.Logf("reprise's log:\n%s", b)
		}
		_ = logs.Close()
	})
	target := "http://" + addr
	testutil.WaitReady(t, target, 60*time.Second, nil)
	return target
}

// fakeUpstream serves the fake model and its ledger in this process.
func fakeUpstream(t *testing.T) (*mockllm.Server, string) {
	t.Helper()
	fake := mockllm.New(mockllm.Config{})
	mux := http.NewServeMux()
	mux.Handle("/ledger", fake.LedgerHandler())
	mux.Handle("/", fake)
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)
	return fake, up.URL
}

// outageEnv set to 1 (.ci/run does) plays the long outages of
// TestNATSPause too: NATS stopped for 45 s and then 90 s under the load, at
// reprise's default lease and journal timeout, for three seeds (~10 min).
const outageEnv = "REPRISE_OUTAGE_LONG"

// pauseCase is one play of TestNATSPause.
type pauseCase struct {
	name   string
	flags  []string // reprise's, beyond its upstream and NATS
	pauses string   // --nats-pause
	gap    string   // --nats-pause-gap
	seed   string
	load   []string // reprise-chaos's load flags
	long   bool     // only with outageEnv
}

// pauseCases: in miniature (a lease and journal timeout of 1 s, 2.5 s
// pauses) with short streams, which were all sent before the writers
// stalled, and with streams that go on past it, whose upstream calls the
// stall cuts; then the outages of the issue at the defaults, past the
// journal timeout (30 s) and three times past the lease (10 s). A key's
// budget spans both pauses: a long stream in flight through the first,
// regenerated, and refused (503) through the second needs over 4 minutes.
var pauseCases = []pauseCase{
	{name: "brief", flags: []string{"--lease", "1s", "--journal-timeout", "1s"}, pauses: "2500ms", gap: "1s", seed: "11",
		load: []string{"--runs", "60", "--concurrency", "20", "--max-tokens", "40", "--max-delay", "10ms", "--run-timeout", "90s"}},
	{name: "brief, streams past the stall", flags: []string{"--lease", "1s", "--journal-timeout", "1s"}, pauses: "2500ms", gap: "1s", seed: "12",
		load: []string{"--runs", "40", "--concurrency", "20", "--min-tokens", "20", "--max-tokens", "40", "--max-delay", "200ms", "--run-timeout", "90s"}},
	{name: "45s and 90s, seed 11", pauses: "45s,90s", gap: "10s", seed: "11", long: true,
		load: []string{"--runs", "300", "--concurrency", "150", "--run-timeout", "8m"}},
	{name: "45s and 90s, seed 12", pauses: "45s,90s", gap: "10s", seed: "12", long: true,
		load: []string{"--runs", "300", "--concurrency", "150", "--run-timeout", "8m"}},
	{name: "45s and 90s, seed 13, streams past the stall", pauses: "45s,90s", gap: "10s", seed: "13", long: true,
		load: []string{"--runs", "300", "--concurrency", "150", "--min-tokens", "40", "--max-tokens", "100", "--max-delay", "600ms", "--run-timeout", "8m"}},
}

// TestNATSPause plays the NATS-pause fault: two reprise binaries on a
// JetStream server in a process of its own, stopped (SIGSTOP) under the
// load for longer than reprise's lease and journal timeout — writers
// stall, leases look expired by the clock. Whatever the outage's length,
// no key gave two different completed results or failed to replay the one
// its client got, no id named two events (none shown and then superseded
// by a break's error either), no key was left in progress, nothing was lost,
// duplicated or generated beyond its breaks, and every key ended completed
// or failed with a code a client retries.
func TestNATSPause(t *testing.T) {
	if testing.Short() {
		t.Skip("builds reprise and pauses a NATS process for seconds")
	}
	long := os.Getenv(outageEnv) == "1"
	for _, pc := range pauseCases {
		t.Run(pc.name, func(t *testing.T) {
			if pc.long && !long {
				t.Skipf("a long outage: set %s=1 (.ci/run does)", outageEnv)
			}
			playPause(t, pc)
		})
	}
}

// playPause plays pc against two fresh instances and checks what it found.
func playPause(t *testing.T, pc pauseCase) {
	t.Helper()
	natsURL, nats := startNATS(t)
	_, upstream := fakeUpstream(t)
	// One secret: a key names the same stream on both instances.
	flags := append([]string{"--nats", natsURL, "--secret", "reprise-chaos-test-secret"}, pc.flags...)
	a, b := startReprise(t, upstream, flags...), startReprise(t, upstream, flags...)

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	args := append([]string{"--target", a + "," + b, "--ledger", upstream + "/ledger", "--seed", pc.seed,
		"--nats-pause", pc.pauses, "--nats-pid", fmt.Sprint(nats.Pid), "--nats-pause-gap", pc.gap}, pc.load...)
	out, err := run(ctx, args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	printPauses(&table, out.Pauses, nats.Pid)
	t.Logf("%v\n%s", out.Line(), table.String())

	want := len(strings.Split(pc.pauses, ","))
	if len(out.Pauses) != want+1 {
		t.Fatalf("pauses %+v, want the %d pauses and the keys no pause touched", out.Pauses, want)
	}
	for _, p := range out.Pauses[:want] {
		if p.InFlight == 0 || p.Recovery <= 0 {
			t.Errorf("the %v pause: %d keys in flight at its start, recovered after %v; want keys in flight and a recovery", p.Dur, p.InFlight, p.Recovery)
		}
	}
	if s := out.Summary; !s.Clean() {
		t.Errorf("summary %v: want nothing lost, duplicated or generated beyond its breaks, and no run failed", s.Line())
	}
	keys := 0
	for _, p := range out.Pauses {
		keys += p.Keys
		if p.bad() {
			t.Errorf("pause %v: %d keys with two answers, %d whose answer was not replayed, %d ids naming two events (+%d superseded), %d keys stuck in_progress",
				p.Dur, p.TwoAnswers, p.Denied, p.Clashes, p.Superseded, p.Stuck)
		}
		for code := range p.Failed {
			if c := code[strings.Index(code, ":")+1:]; !slices.Contains(rules.Breaks, c) {
				t.Errorf("pause %v: a generation failed with %q, not a failure a client retries", p.Dur, code)
			}
		}
		for state := range p.Unanswered {
			if c, ok := strings.CutPrefix(state, "failed:"); !ok || !slices.Contains(rules.Breaks, c) {
				if state != "completed" {
					t.Errorf("pause %v: a key left without its answer ended %q, not completed or failed with a code a client retries", p.Dur, state)
				}
			}
		}
	}
	if keys != out.Runs {
		t.Errorf("the rows account for %d keys, %d were played", keys, out.Runs)
	}
}
