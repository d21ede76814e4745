package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-dev/reprise/internal/chaoscore"
)

type config struct {
	targets              []string
	ledger, token        string
	runs, concurrency    int
	maxDrops             int
	minTokens, maxTokens int
	maxDelay, runTimeout time.Duration
	seed                 uint64
	verbose              bool
	format               chaoscore.Format
	pauses               []time.Duration // the NATS-pause fault's
	natsPID              int
	pauseGap             time.Duration
}

func (c config) validate() error {
	for _, raw := range append([]string{c.ledger}, c.targets...) {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%q: want an http(s) URL", raw)
		}
	}
	switch {
	case c.runs < 1, c.concurrency < 1, c.maxDrops < 1:
		return errors.New("--runs, --concurrency and --drops must be at least 1")
	case c.minTokens < 1 || c.maxTokens < c.minTokens:
		return errors.New("want 1 <= --min-tokens <= --max-tokens")
	case c.maxDelay < time.Millisecond || c.runTimeout <= 0:
		return errors.New("--max-delay must be at least 1ms and --run-timeout positive")
	case c.format != chaoscore.Chat && c.format != chaoscore.Responses:
		return fmt.Errorf("--format %q: want chat or responses", c.format)
	case len(c.pauses) > 0 && c.natsPID <= 0, len(c.pauses) == 0 && c.natsPID != 0:
		return errors.New("--nats-pause and --nats-pid go together")
	case len(c.pauses) > 0 && c.pauseGap <= 0:
		return errors.New("--nats-pause-gap must be positive")
	case len(c.pauses) > 0:
		if err := natsAlive(c.natsPID); err != nil {
			return fmt.Errorf("--nats-pid %d: %w", c.natsPID, err)
		}
	}
	return c.shape().Validate()
}

// shape is how the command's plans are drawn: drops the client makes
// itself (after k events, after the answer's head, in flight), each resumed
// by GET or POST with Last-Event-ID, a WebSocket, or a plain retry.
func (c config) shape() chaoscore.Shape {
	return chaoscore.Shape{
		MinTokens: c.minTokens, MaxTokens: c.maxTokens, MaxDelay: c.maxDelay, MaxDrops: c.maxDrops, Format: c.format,
		Resumes: []chaoscore.Mode{chaoscore.Get, chaoscore.Post, chaoscore.Retry, chaoscore.WebSocket},
	}
}

// rules are what the command tolerates from a reprise it cannot see into:
// a generation may break (its owner killed, its upstream or journal
// failing), each allowing one more upstream generation; any 429 or 503 (or
// a generation refused for capacity) is waited out; an instance may be down
// when a check reaches it.
var rules = chaoscore.Rules{
	Breaks:           []string{"owner_lost", "upstream_interrupted", "journal_failure"},
	Refusals:         []string{"too_many_generations", "upstream_saturated", "too_many_readers", "shutting_down", "overloaded", "journal_unavailable"},
	ThrottleStatuses: []int{http.StatusTooManyRequests, http.StatusServiceUnavailable},
	RetryLinks:       true,
	BreaksSeen:       true,
}

// targets is the command's World: each attempt goes to a target at random
// (a balancer without stickiness); checks take the targets in turn, so a
// link error is retried through the next one.
type targets struct {
	urls []string
	next atomic.Uint64
}

func (t *targets) Link(_ context.Context, r *chaoscore.Run, _ *chaoscore.Drop) (chaoscore.Link, error) {
	return chaoscore.Link{Base: t.urls[r.Rand().IntN(len(t.urls))]}, nil
}

func (t *targets) Direct(*chaoscore.Run) string {
	return t.urls[(t.next.Add(1)-1)%uint64(len(t.urls))]
}

// outcome is what a chaos run found: the summary, and with --nats-pause a
// row per pause (the last: keys no pause touched).
type outcome struct {
	chaoscore.Summary
	Pauses []pauseReport
	pid    int
}

// Clean reports whether the summary is clean and no pause left a key with
// two answers, an id naming two events, or a key in progress.
func (o outcome) Clean() bool {
	for _, p := range o.Pauses {
		if p.bad() {
			return false
		}
	}
	return o.Summary.Clean()
}

// chaos plays c.runs keys, c.concurrency at a time, and reports the first
// failed runs (all with --v) to log. With pauses, the load goes on until the
// last one recovered, then every key is read again.
func chaos(ctx context.Context, c config, log io.Writer) (outcome, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = c.concurrency
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: transport}
	var mu sync.Mutex
	reported := 0
	report := func(r *chaoscore.Run) {
		mu.Lock()
		defer mu.Unlock()
		if reported++; c.verbose || reported <= 10 {
			fmt.Fprintln(log, r.Report())
		}
	}
	var p *pauses
	if len(c.pauses) > 0 {
		p = newPauses(c.natsPID, c.pauses, c.pauseGap, c.runTimeout)
	}
	cfg := chaoscore.Config{
		World:   &targets{urls: c.targets},
		Ledger:  chaoscore.RemoteLedger(hc, c.ledger),
		Rules:   rules,
		Shape:   c.shape(),
		Client:  hc,
		Header:  http.Header{"Authorization": {"Bearer " + c.token}},
		Timeout: c.runTimeout,
		OnEnd: func(r *chaoscore.Run) {
			if r.Verdict().Failed() {
				report(r)
			}
		},
	}
	if p != nil {
		cfg.OnAnswer = p.answered
	}
	rn, err := chaoscore.New(cfg)
	if err != nil {
		return outcome{}, err
	}
	if p == nil {
		sum := rn.Play(ctx, c.seed, c.runs, c.concurrency)
		return outcome{Summary: sum}, ctx.Err()
	}
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { p.run(pctx) })
	rn.PlayWhile(ctx, c.seed, c.concurrency, func(i int) bool { return i < c.runs || !p.done() })
	stop()
	wg.Wait()
	if p.err != nil {
		return outcome{}, p.err
	}
	keys := reread(ctx, rn, c.concurrency, report)
	return outcome{Summary: rn.Summary(), Pauses: p.report(keys), pid: c.natsPID}, ctx.Err()
}

// reread reads every run's key again, parallel at a time, once the load and
// the faults are over; a run in which it finds a problem is reported.
func reread(ctx context.Context, rn *chaoscore.Runner, parallel int, report func(*chaoscore.Run)) []keyState {
	var runs []*chaoscore.Run
	rn.Each(func(r *chaoscore.Run) bool { runs = append(runs, r); return true })
	keys := make([]keyState, len(runs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, parallel) {
		wg.Go(func() {
			for i := range next {
				r := runs[i]
				before := len(r.Verdict().Problems)
				rr, err := r.Reread(ctx)
				keys[i] = keyState{run: r, reread: rr, err: err}
				if len(r.Verdict().Problems) > before {
					report(r)
				}
			}
		})
	}
	for i := range runs {
		next <- i
	}
	close(next)
	wg.Wait()
	return keys
}
