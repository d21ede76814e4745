// Command reprise-chaos is a black-box chaos client for a running reprise. It
// opens many concurrent streamed chats through reprise, drops each one 1–5
// times at random points (the client hangs up after k events, right after the
// response head, or before the request is answered), resumes it at random by
// GET + Last-Event-ID, a WebSocket with ?last_event_id=, POST + Last-Event-ID
// or a plain retry of the POST, and checks every key against the upstream's
// ledger: the reassembled content is byte-equal to what the upstream
// generated, no event id is seen twice on a resume and none is skipped, the
// upstream generated once, and the completed key replays identically (GET and
// POST). The plans, the client and the checks are the in-process chaos suite's
// (package chaoscore). --format responses streams /v1/responses instead of
// chat completions: against instances run with --upstream-background and
// killed now and then, regenerated counts the kills that cost a generation.
//
// The upstream must be the fake model (cmd/mockllm), whose /ledger it reads:
//
//	go run ./cmd/mockllm --listen :9090 &
//	go run ./cmd/reprise --upstream http://localhost:9090 &
//	go run ./cmd/reprise-chaos --target http://localhost:8080 --ledger http://localhost:9090/ledger
//
// Several targets (--target a,b) are used at random per request, as behind a
// load balancer without stickiness; checks take them in turn, and a link
// error is retried through the next one. A refusal (429/503) is waited out
// and counted as throttled. A generation that broke (an error event
// owner_lost, upstream_interrupted or journal_failure; event: reset; or the
// first event of a newer generation) is asked again and allows one more
// upstream generation, counted as regenerated. The seed is random unless
// --seed is given (keys are named after it: a seed played twice against the
// same reprise finds its old keys). It prints one line and exits 1 unless
// lost, duplicated, extra_generations and failed are zero:
//
//	chaos: runs=N lost=0 duplicated=0 extra_generations=0 failed=0 throttled=T regenerated=R seed=S
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/reprise-dev/reprise/cmd/reprise-chaos/chaoscore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reprise-chaos:", err)
		os.Exit(2)
	}
	fmt.Println(sum)
	if !sum.Clean() {
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log io.Writer) (chaoscore.Summary, error) {
	fs := flag.NewFlagSet("reprise-chaos", flag.ContinueOnError)
	var c config
	target := fs.String("target", "http://localhost:8080", "reprise's base URL; several, comma-separated, are used at random per request (instances behind no sticky balancer)")
	fs.StringVar(&c.ledger, "ledger", "http://localhost:9090/ledger", "the fake upstream's ledger URL (cmd/mockllm serves /ledger)")
	fs.StringVar(&c.token, "token", "reprise-chaos", "bearer token sent to reprise (its tenant)")
	fs.IntVar(&c.runs, "runs", 1000, "keys to stream")
	fs.IntVar(&c.concurrency, "concurrency", 200, "keys streaming at once")
	fs.IntVar(&c.maxDrops, "drops", 5, "drops per key at most (1..N)")
	fs.IntVar(&c.minTokens, "min-tokens", 10, "content tokens per stream, at least")
	fs.IntVar(&c.maxTokens, "max-tokens", 80, "content tokens per stream, at most")
	fs.DurationVar(&c.maxDelay, "max-delay", 20*time.Millisecond, "pause between tokens, at most (each stream draws its own)")
	fs.DurationVar(&c.runTimeout, "run-timeout", 2*time.Minute, "one key's budget, drops and resumes included")
	fs.Uint64Var(&c.seed, "seed", 0, "random seed (0: from the clock); the same seed gives the same plans")
	fs.BoolVar(&c.verbose, "v", false, "print every failed run's report")
	format := fs.String("format", "chat", "the API the runs stream through: chat (/v1/chat/completions) or responses (/v1/responses, which a reprise with --upstream-background runs in background mode, so that an instance killed mid-stream is reattached instead of regenerated)")
	if err := fs.Parse(args); err != nil {
		return chaoscore.Summary{}, err
	}
	if c.format = chaoscore.Format(*format); *format == "chat" {
		c.format = chaoscore.Chat
	}
	c.targets = strings.Split(*target, ",")
	if err := c.validate(); err != nil {
		return chaoscore.Summary{}, err
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return chaos(ctx, c, log)
}
