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
//
// --nats-pause 5s,12s,30s --nats-pid PID is the NATS-pause fault: with
// reprise on an external nats-server (--nats), that process is stopped
// (SIGSTOP) for each duration in turn and continued, the first
// --nats-pause-gap into the load and each next one as long after the load
// recovered (a key first asked after the SIGCONT got its answer). The load
// goes on until the last pause recovered and --runs keys were played; then
// every key is read again (status, upstream ledger, GET and POST replays),
// and a table says per pause: the keys in flight at the SIGSTOP, the keys
// it touched (running between the SIGSTOP and the recovery), of them
// regenerated (the upstream generated the key twice), failed by code, left
// without an answer (by final state), seen giving two different completed
// results, whose client's result a replay did not give again, the ids seen
// naming two different events, the keys still in_progress, and the
// recovery time. A key with two answers or an answer not replayed, an id
// naming two events (an event shown, then superseded by the break's error,
// included), or a key stuck in_progress also exits 1.
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

	"github.com/reprise-dev/reprise/internal/chaoscore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := run(ctx, os.Args[1:], os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reprise-chaos:", err)
		os.Exit(2)
	}
	if out.Pauses != nil {
		printPauses(os.Stdout, out.Pauses, out.pid)
	}
	fmt.Println(out.Summary)
	if !out.Clean() {
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, log io.Writer) (outcome, error) {
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
	pauses := fs.String("nats-pause", "", "the NATS-pause fault: stop the nats-server --nats-pid for each of these durations in turn (e.g. 5s,12s,30s) under the load, and report per pause")
	fs.IntVar(&c.natsPID, "nats-pid", 0, "the process id of the nats-server reprise uses (--nats-pause stops and continues it)")
	fs.DurationVar(&c.pauseGap, "nats-pause-gap", 10*time.Second, "load before the first pause, and after each pause recovered before the next")
	format := fs.String("format", "chat", "the API the runs stream through: chat (/v1/chat/completions) or responses (/v1/responses, which a reprise with --upstream-background runs in background mode, so that an instance killed mid-stream is reattached instead of regenerated)")
	if err := fs.Parse(args); err != nil {
		return outcome{}, err
	}
	var err error
	if c.pauses, err = parsePauses(*pauses); err != nil {
		return outcome{}, err
	}
	if c.format = chaoscore.Format(*format); *format == "chat" {
		c.format = chaoscore.Chat
	}
	c.targets = strings.Split(*target, ",")
	if err := c.validate(); err != nil {
		return outcome{}, err
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	return chaos(ctx, c, log)
}
