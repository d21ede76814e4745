package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/tests/testutil"
	"github.com/reprise-dev/reprise/web/mockllm"
)

// TestAgainstReprise runs the client against a real reprise binary (embedded
// JetStream) in front of the fake upstream, served in this process so its
// ledger is the one the client reads.
func TestAgainstReprise(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the reprise binary")
	}
	fake := mockllm.New(mockllm.Config{})
	mux := http.NewServeMux()
	mux.Handle("/ledger", fake.LedgerHandler())
	mux.Handle("/", fake)
	up := httptest.NewServer(mux)
	t.Cleanup(up.Close)

	bin := filepath.Join(t.TempDir(), "reprise")
	if out, err := exec.Command("go", "build", "-o", bin, "../reprise").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	addr := testutil.FreeAddr(t)
	cmd := exec.Command(bin, "--listen", addr, "--upstream", up.URL, "--data", t.TempDir(), "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	target := "http://" + addr
	testutil.WaitReady(t, target, 30*time.Second, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := run(ctx, []string{"--target", target, "--ledger", up.URL + "/ledger",
		"--runs", "120", "--concurrency", "40", "--max-tokens", "40", "--max-delay", "5ms", "--seed", "7"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(sum)
	if sum.runs != 120 || !sum.clean() {
		t.Errorf("summary %v, want 120 clean runs", sum)
	}
	// One upstream generation per key, and the replays cost nothing.
	if total := fake.Ledger().Total(); total.Generations != 120 || total.Completed != 120 {
		t.Errorf("upstream ledger %+v, want 120 generations, all completed", total)
	}
}

// TestFindsDefects: the client's checks fail against proxies that lose,
// repeat or regenerate events.
func TestFindsDefects(t *testing.T) {
	tests := []struct {
		name   string
		broken brokenProxy
		want   func(summary) bool
	}{
		{"skips an event", brokenProxy{skip: 2}, func(s summary) bool { return s.lost > 0 }},
		{"ignores Last-Event-ID", brokenProxy{ignoreCursor: true}, func(s summary) bool { return s.duplicated > 0 }},
		{"upstream generated twice", brokenProxy{generations: 2}, func(s summary) bool { return s.extra > 0 }},
		{"content differs from the upstream's", brokenProxy{ledgerContent: "other"}, func(s summary) bool { return s.lost > 0 }},
		{"ends every stream with an error", brokenProxy{errorEvent: true}, func(s summary) bool { return s.failed > 0 }},
		{"regenerates more than its breaks explain", brokenProxy{breakFirst: &breaks{}, generations: 3}, func(s summary) bool { return s.extra > 0 && s.regenerated > 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.broken)
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sum, err := run(ctx, []string{"--target", srv.URL, "--ledger", srv.URL + "/ledger",
				"--runs", "8", "--concurrency", "4", "--drops", "2", "--min-tokens", "1", "--max-tokens", "1", "--seed", "3", "--run-timeout", "5s"}, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			if sum.clean() || !tc.want(sum) {
				t.Errorf("summary %v: the defect went unnoticed", sum)
			}
		})
	}
}

func TestRegenerationAllowed(t *testing.T) {
	// A generation that broke once is asked again: one more upstream
	// generation is then allowed.
	// The seed's plans must read the first answer (their one drop comes
	// after an event): else the client would not see the break it is
	// given, and the extra generation would rightly be counted.
	for _, p := range newPlans(config{targets: []string{"x"}, runs: 8, maxDrops: 1, minTokens: 1, maxTokens: 1, maxDelay: 20 * time.Millisecond, seed: 10}) {
		if p.drops[0].kind != dropAfterEvents {
			t.Fatal("seed 10 drops a first answer unread; pick another")
		}
	}
	srv := httptest.NewServer(brokenProxy{breakFirst: &breaks{}, generations: 2})
	t.Cleanup(srv.Close)
	sum, err := run(t.Context(), []string{"--target", srv.URL, "--ledger", srv.URL + "/ledger", "--runs", "8", "--concurrency", "4",
		"--drops", "1", "--min-tokens", "1", "--max-tokens", "1", "--seed", "10", "--run-timeout", "5s"}, os.Stderr)
	if err != nil || !sum.clean() || sum.regenerated != 8 {
		t.Errorf("one break per key: %v (%v), want clean with regenerated=8", sum, err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--target", "localhost:8080"},
		{"--ledger", "ftp://x/ledger"},
		{"--runs", "0"},
		{"--min-tokens", "9", "--max-tokens", "3"},
		{"--max-delay", "0s"},
		{"--nope"},
	} {
		if _, err := run(context.Background(), args, os.Stderr); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// brokenProxy streams "a", "b", "c" under ids 1-1-1 … 1-3-3 and serves a
// ledger that agrees, except for the defect it is given.
type brokenProxy struct {
	skip          int    // this event offset is never sent
	ignoreCursor  bool   // resumes restart from the first event
	generations   int    // the ledger's count (default 1)
	ledgerContent string // the ledger's content (default "abc")
	errorEvent    bool   // every stream ends with event: error
	breakFirst    *breaks
}

// breaks makes each key's first stream end with owner_lost.
type breaks struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (b *breaks) first(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen == nil {
		b.seen = map[string]bool{}
	}
	first := !b.seen[key]
	b.seen[key] = true
	return first
}

func (b brokenProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/ledger" {
		gens := max(b.generations, 1)
		content := b.ledgerContent
		if content == "" {
			content = "abc"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{
			"entry":       map[string]int{"generations": gens},
			"generations": []map[string]any{{"content": content, "completed": true}},
		})
		return
	}
	from := 0
	if id := r.Header.Get("Last-Event-ID"); id != "" && !b.ignoreCursor {
		from, _ = strconv.Atoi(strings.Split(id, "-")[1])
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if b.breakFirst != nil && r.Method == http.MethodPost && b.breakFirst.first(r.Header.Get("Idempotency-Key")) {
		fmt.Fprint(w, "event: error\ndata: {\"error\":{\"code\":\"owner_lost\"}}\n\n")
		return
	}
	for i, tok := range []string{"a", "b", "c"} {
		off := i + 1
		if off <= from || off == b.skip {
			continue
		}
		fmt.Fprintf(w, "id: 1-%d-%d\ndata: {\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", off, off, tok)
	}
	if b.errorEvent {
		fmt.Fprint(w, "event: error\ndata: {\"error\":{\"code\":\"upstream_interrupted\"}}\n\n")
		return
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func TestPositions(t *testing.T) {
	for _, tc := range []struct {
		prev, id       string
		follows, newer bool
	}{
		{"", "1-1-5", true, false},
		{"", "1-2-5", false, false},
		{"1-1-5", "1-2-9", true, false},
		{"1-1-5", "1-3-9", false, false},
		{"1-2-5", "1-2-5", false, false},
		{"1-9-5", "2-1-40", false, true},
		{"2-3-5", "1-1-1", false, false},
		{"1-9-5", "2-2-40", false, false},
		{"1-1-5", "garbage", false, false},
	} {
		if got := follows(tc.prev, tc.id); got != tc.follows {
			t.Errorf("follows(%q, %q) = %v", tc.prev, tc.id, got)
		}
		if got := newer(tc.prev, tc.id); got != tc.newer {
			t.Errorf("newer(%q, %q) = %v", tc.prev, tc.id, got)
		}
	}
}
