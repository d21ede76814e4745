package chaoscore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInvalidOption is wrapped by the errors of New and Shape.Validate.
var ErrInvalidOption = errors.New("chaoscore: invalid option")

// Defaults of Config.
const (
	// DefaultTimeout is one run's deadline, drops and resumes included.
	DefaultTimeout = 90 * time.Second
	// DefaultRefusalWait is how long a refusal without Retry-After is waited out.
	DefaultRefusalWait = time.Second
)

// A World is where a harness's runs go: the link each attempt takes and the
// instance checks read from.
type World interface {
	// Link opens the way for one attempt of r, with d the drop planned for
	// it (nil: none). It is called from r's goroutine.
	Link(ctx context.Context, r *Run, d *Drop) (Link, error)
	// Direct is the base URL (http://host:port) of an instance the checks
	// of r read from, past any fault of the harness.
	Direct(r *Run) string
}

// Link is the way one attempt takes.
type Link struct {
	// Base is the base URL the attempt's request goes to.
	Base string
	// Mid, when set, is started in its own goroutine once the attempt has
	// read the drop's Events events: a link fault in mid-stream. Its error
	// ends the run.
	Mid func() error
	// Close, when set, releases the link after the attempt.
	Close func()
}

// Faults is a World's optional per-run faults of its own (the in-process
// suite breaks each run's upstream link once).
type Faults interface {
	// Begin arms r's faults before its first attempt; end, called once r
	// is checked, releases them.
	Begin(ctx context.Context, r *Run) (end func(), err error)
	// Settled returns once r's faults can no longer break a generation: it
	// holds back a POST that could regenerate the key, and the checks.
	Settled(ctx context.Context, r *Run) error
}

// Rules say which failures a harness's faults explain.
type Rules struct {
	// Breaks are the error codes a generation may end with because of a
	// fault. Any other error event, or refused POST, is a problem.
	Breaks []string
	// Refusals are codes of answers that started nothing: a 429 or 503
	// answer with one of them, or a stream whose only event is an error
	// with one of them, is waited out (Retry-After) and asked again.
	Refusals []string
	// ThrottleStatuses are refused whatever their code (from outside, any
	// 429 or 503 is a reason to wait).
	ThrottleStatuses []int
	// RetryLinks: a check's request that could not connect or broke is
	// tried again (World.Direct may name another instance) until the run's
	// deadline: the World's instances may be down. Otherwise it is a problem.
	RetryLinks bool
	// BreaksSeen: every generation before the one that completed counts as
	// broken, allowing one more upstream generation (a client that cannot
	// know the faults). Otherwise only the harness's Run.Broke calls do.
	BreaksSeen bool
	// Content, when set, is the text the fake model writes for a prompt of
	// n tokens: the reassembled content must be it as well.
	Content func(prompt string, n int) string
}

func (rl Rules) isBreak(code string) bool   { return slices.Contains(rl.Breaks, code) }
func (rl Rules) isRefusal(code string) bool { return slices.Contains(rl.Refusals, code) }

func (rl Rules) refused(status int, code string) bool {
	if slices.Contains(rl.ThrottleStatuses, status) {
		return true
	}
	return (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) && rl.isRefusal(code)
}

// Config is one harness's runs.
type Config struct {
	World  World  // required
	Ledger Ledger // required
	Rules  Rules
	// Shape draws each run's plan, from the run's own random source (seeded
	// by the seed and the run's index). Required.
	Shape Shape
	// KeyPrefix starts every key (scenarios sharing a journal). Default: "".
	KeyPrefix string
	// Extend, when set, draws the harness's part of a plan after Shape's,
	// from the same source (Plan.Faults, more Plan.Directives).
	Extend func(rng *rand.Rand, p *Plan)
	// Client makes the attempts. Default: http.DefaultClient.
	Client *http.Client
	// Checks makes the checks' requests (status, replays). Default: Client.
	Checks *http.Client
	// Header is sent with every request (a credential). Default: none.
	Header http.Header
	// RunHeader, when set, is a header carrying the run's key on every POST
	// (a harness routing its upstream requests by run). Default: none.
	RunHeader string
	// Idle, when positive, is how long an attempt may go without a byte
	// before the client takes its connection for dead. Default: 0, never.
	Idle time.Duration
	// Timeout is one run's deadline. Default: DefaultTimeout.
	Timeout time.Duration
	// RefusalWait is how long a refusal without Retry-After is waited out.
	// Default: DefaultRefusalWait.
	RefusalWait time.Duration
	// StopAfter, when positive, starts no new run once so many failed.
	// Default: 0, every run is played.
	StopAfter int
	// OnAnswer, when set, is called with each run whose client got its
	// completed generation, before the checks, from its goroutine.
	OnAnswer func(*Run)
	// OnEnd, when set, is called with each run once it is checked, from its
	// goroutine.
	OnEnd func(*Run)
}

// Runner plays runs and sums their verdicts.
type Runner struct {
	cfg    Config
	faults Faults // cfg.World's, or nil
	runs   sync.Map

	mu  sync.Mutex
	sum Summary
}

// New checks cfg and fills in its defaults.
func New(cfg Config) (*Runner, error) {
	switch {
	case cfg.World == nil:
		return nil, fmt.Errorf("%w: no World", ErrInvalidOption)
	case cfg.Ledger == nil:
		return nil, fmt.Errorf("%w: no Ledger", ErrInvalidOption)
	case cfg.Idle < 0 || cfg.Timeout < 0 || cfg.RefusalWait < 0:
		return nil, fmt.Errorf("%w: negative duration", ErrInvalidOption)
	}
	if err := cfg.Shape.Validate(); err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	if cfg.Checks == nil {
		cfg.Checks = cfg.Client
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RefusalWait == 0 {
		cfg.RefusalWait = DefaultRefusalWait
	}
	rn := &Runner{cfg: cfg, sum: Summary{Counts: map[string]int{}}}
	rn.faults, _ = cfg.World.(Faults)
	return rn, nil
}

// Play plays runs [0, n) of seed, parallel at a time, and returns the
// summary of every run played so far. It returns when they are all checked,
// or when ctx ends (runs in flight end with it).
func (rn *Runner) Play(ctx context.Context, seed uint64, n, parallel int) Summary {
	return rn.PlayWhile(ctx, seed, max(1, min(parallel, n)), func(i int) bool { return i < n })
}

// PlayWhile plays runs 0, 1, … of seed, parallel at a time, while more(i)
// says run i is to be played (called from the runs' goroutines), and
// returns as Play does.
func (rn *Runner) PlayWhile(ctx context.Context, seed uint64, parallel int, more func(i int) bool) Summary {
	rn.mu.Lock()
	rn.sum.Seed = seed
	rn.mu.Unlock()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, parallel) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if !more(i) || ctx.Err() != nil || rn.stopped() {
					return
				}
				r := rn.newRun(seed, i)
				rn.runs.Store(r.Plan.Key, r)
				r.play(ctx)
				rn.add(r)
				if rn.cfg.OnEnd != nil {
					rn.cfg.OnEnd(r)
				}
			}
		})
	}
	wg.Wait()
	return rn.Summary()
}

// newRun draws run i of seed.
func (rn *Runner) newRun(seed uint64, i int) *Run {
	rng := rand.New(rand.NewPCG(seed, uint64(i)))
	p := rn.cfg.Shape.Draw(rng, Key(rn.cfg.KeyPrefix, seed, i))
	if rn.cfg.Extend != nil {
		rn.cfg.Extend(rng, &p)
	}
	return &Run{Plan: p, Index: i, Seed: seed, rn: rn, rng: rng, start: time.Now(), evs: map[uint64]Event{}, ids: map[string]Event{}}
}

func (rn *Runner) stopped() bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.cfg.StopAfter > 0 && rn.sum.Failed >= rn.cfg.StopAfter
}

func (rn *Runner) add(r *Run) {
	v := r.Verdict()
	rn.mu.Lock()
	defer rn.mu.Unlock()
	s := &rn.sum
	s.Runs++
	s.Lost += v.Lost
	s.Duplicated += v.Duplicated
	s.Extra += v.Extra
	s.Throttled += v.Throttled
	s.Regenerated += v.Regenerated
	if v.Failed() {
		s.Failed++
	}
}

// Each calls f with every run started so far, until f returns false. Runs
// may be in flight: only their Plan, Broke and a Status read are safe then.
func (rn *Runner) Each(f func(*Run) bool) {
	rn.runs.Range(func(_, v any) bool { return f(v.(*Run)) })
}

// Count adds n to the named count of the summary (a harness's own tallies).
func (rn *Runner) Count(name string, n int) {
	rn.mu.Lock()
	rn.sum.Counts[name] += n
	rn.mu.Unlock()
}

// Summary returns a copy of the summary so far.
func (rn *Runner) Summary() Summary {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	s := rn.sum
	s.Counts = make(map[string]int, len(rn.sum.Counts))
	for k, v := range rn.sum.Counts {
		s.Counts[k] = v
	}
	return s
}

// Summary is what the runs found. A run with lost, duplicated or extra
// generations is also failed; failed alone means a run had another problem
// (an unexplained error, a bad status, a check, its deadline).
type Summary struct {
	Seed                          uint64
	Runs, Lost, Duplicated, Extra int
	Failed                        int
	Throttled                     int // refusals waited out
	Regenerated                   int // broken generations asked again
	// Counts tally what happened, by name: resume:<mode>, drop:<kind>,
	// error_event:<code>, refused:<status>:<code>, throttled:<status>:<code>,
	// reset_seen, regenerations_followed, and a harness's own.
	Counts map[string]int
}

// Clean reports whether nothing was lost, duplicated or generated in
// excess, and no run failed.
func (s Summary) Clean() bool {
	return s.Lost == 0 && s.Duplicated == 0 && s.Extra == 0 && s.Failed == 0
}

// Line is the summary line CI greps:
//
//	chaos: runs=N lost=0 duplicated=0 extra_generations=0 seed=S
func (s Summary) Line() string {
	return fmt.Sprintf("chaos: runs=%d lost=%d duplicated=%d extra_generations=%d seed=%d", s.Runs, s.Lost, s.Duplicated, s.Extra, s.Seed)
}

// String is the whole summary on one line.
func (s Summary) String() string {
	return fmt.Sprintf("chaos: runs=%d lost=%d duplicated=%d extra_generations=%d failed=%d throttled=%d regenerated=%d seed=%d",
		s.Runs, s.Lost, s.Duplicated, s.Extra, s.Failed, s.Throttled, s.Regenerated, s.Seed)
}

// Mix lists the counts whose names start with prefix, as " name=n…".
func (s Summary) Mix(prefix string) string {
	var names []string
	for k := range s.Counts {
		if strings.HasPrefix(k, prefix) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%d", strings.TrimPrefix(k, prefix), s.Counts[k])
	}
	return b.String()
}
