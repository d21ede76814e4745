package chaoscore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds of one run.
const (
	maxAttempts      = 80 // connections
	maxThrottles     = 30 // refusals waited out
	maxRegenerations = 3  // generations left behind broken
	maxTrace         = 200
)

// Run is one key played: its plan, what its client holds, and its verdict.
// A run is played by one goroutine; a harness's goroutines may call Broke,
// Errorf and the status reads.
type Run struct {
	Plan  Plan
	Index int
	Seed  uint64

	rn    *Runner
	rng   *rand.Rand
	start time.Time

	// When the client got the terminal event, and when the run was over
	// (unix nanoseconds, 0: not yet): read by a harness's goroutines.
	answered, ended atomic.Int64

	// What the client holds: the generation it follows, that generation's
	// events by offset, the last id it saw, and the offset of [DONE].
	gen    uint64
	evs    map[uint64]Event
	cursor string
	done   uint64
	codes  []string // error codes seen

	attempts, early int
	v               Verdict
	trace           []string
	// ids is every event the harness saw under each id, on any connection
	// or replay of the run (an id names one event).
	ids map[string]Event
	// answers are the different completed results the key gave; denied:
	// a replay gave another than the client's.
	answers [][]Event
	denied  bool

	mu       sync.Mutex // problems is also written by a harness's goroutines
	problems []string
	broken   atomic.Int32
}

// Verdict is one run's findings.
type Verdict struct {
	Lost, Duplicated, Extra int
	Throttled, Regenerated  int
	// Clashes are ids seen naming two different events (each is also a
	// problem). Superseded are ids of an event its owner showed but never
	// stored, then named by the break's stored error that took its place
	// (docs/design/live-path.md): allowed, counted apart.
	Clashes, Superseded int
	Problems            []string
}

// Failed reports whether the run found anything.
func (v Verdict) Failed() bool { return len(v.Problems) > 0 || v.Lost+v.Duplicated+v.Extra > 0 }

// Rand is the run's random source, seeded by the run: only for the run's
// goroutine (World.Link).
func (r *Run) Rand() *rand.Rand { return r.rng }

// Broke notes that a fault of the harness broke one of the run's
// generations: one more upstream generation is allowed.
func (r *Run) Broke() { r.broken.Add(1) }

// Errorf adds a problem found by the harness.
func (r *Run) Errorf(format string, args ...any) {
	r.mu.Lock()
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// Began is when the run started. Safe from any goroutine.
func (r *Run) Began() time.Time { return r.start }

// Answered is when the client got the completed generation's terminal
// event (zero: not yet, or never). Safe from any goroutine.
func (r *Run) Answered() time.Time { return unixTime(r.answered.Load()) }

// Ended is when the run was over, checks included (zero: not yet). Safe
// from any goroutine.
func (r *Run) Ended() time.Time { return unixTime(r.ended.Load()) }

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Codes are the error codes the client saw (error events, failed POSTs),
// in order. Only once the run is over.
func (r *Run) Codes() []string { return slices.Clone(r.codes) }

// Gen is the generation the client ended on. Only once the run is over.
func (r *Run) Gen() uint64 { return r.gen }

// Result is the completed generation the client assembled, [DONE] last
// (nil without one). Only once the run is over.
func (r *Run) Result() []Event {
	if r.done == 0 {
		return nil
	}
	out := make([]Event, 0, r.done)
	for off := uint64(1); off <= r.done; off++ {
		out = append(out, r.evs[off])
	}
	return out
}

// Verdict is the run's findings. Only once the run is over.
func (r *Run) Verdict() Verdict {
	v := r.v
	r.mu.Lock()
	v.Problems = slices.Clone(r.problems)
	r.mu.Unlock()
	return v
}

// Report describes a failed run: its verdict, plan, problems and trace.
func (r *Run) Report() string {
	v := r.Verdict()
	plan := planText(r.Plan)
	if r.Plan.Faults != nil {
		plan += fmt.Sprintf("\n  faults: %+v", r.Plan.Faults)
	}
	return fmt.Sprintf("chaos run %d (key %s, seed %d) failed after %s: lost=%d duplicated=%d extra_generations=%d\n  plan: %s\n  problems:\n    %s\n  trace:\n    %s",
		r.Index, r.Plan.Key, r.Seed, time.Since(r.start).Round(time.Millisecond), v.Lost, v.Duplicated, v.Extra,
		plan, strings.Join(v.Problems, "\n    "), strings.Join(r.trace, "\n    "))
}

func planText(p Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "tokens=%d delay=%s directives=%v drops=[", p.Tokens, p.Delay, p.Directives)
	for i, d := range p.Drops {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s", d.Kind)
		if d.Events > 0 {
			fmt.Fprintf(&b, "@%dev", d.Events)
		}
		if d.Bytes > 0 {
			fmt.Fprintf(&b, "@%dB", d.Bytes)
		}
		if d.Wait > 0 {
			fmt.Fprintf(&b, "/%s", d.Wait)
		}
		fmt.Fprintf(&b, "→%s", d.Resume)
	}
	b.WriteString("]")
	return b.String()
}

func (r *Run) problem(format string, args ...any) { r.Errorf(format, args...) }

func (r *Run) tracef(format string, args ...any) {
	if len(r.trace) < maxTrace {
		r.trace = append(r.trace, fmt.Sprintf("%s "+format, append([]any{time.Since(r.start).Round(time.Millisecond)}, args...)...))
	}
}

// Count adds n to a named count of the runner's summary. Safe from any goroutine.
func (r *Run) Count(name string, n int) { r.rn.Count(name, n) }

func (r *Run) count(name string) { r.rn.Count(name, 1) }

// play plays the whole run and checks it.
func (r *Run) play(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, r.rn.cfg.Timeout)
	defer cancel()
	defer func() { r.ended.Store(time.Now().UnixNano()) }()
	if f := r.rn.faults; f != nil {
		end, err := f.Begin(ctx, r)
		if err != nil {
			r.problem("arming the harness's faults: %v", err)
			return
		}
		defer end()
	}
	if err := r.stream(ctx); err != nil {
		r.problem("%v", err)
	}
	if r.gen > 0 {
		r.v.Regenerated = int(r.gen) - 1 // every generation before the last one broke
	}
	if r.done > 0 {
		r.answered.Store(time.Now().UnixNano())
		if r.rn.cfg.OnAnswer != nil {
			r.rn.cfg.OnAnswer(r)
		}
		r.check(ctx)
	}
}

// stream runs the client until it holds a completed generation: each
// attempt takes the next planned drop, and each outcome says how the next
// attempt asks.
func (r *Run) stream(ctx context.Context) error {
	mode := First
	drops := r.Plan.Drops
	backoff := time.Millisecond
	for r.done == 0 {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("run deadline: still no [DONE] after %d attempts: %w", r.attempts, ctx.Err())
		case r.attempts >= maxAttempts:
			return fmt.Errorf("no [DONE] after %d attempts", r.attempts)
		case r.gen > maxRegenerations+1:
			return fmt.Errorf("broken %d times", r.gen-1)
		}
		var d *Drop
		if len(drops) > 0 {
			d = &drops[0]
		}
		if f := r.rn.faults; f != nil && (mode == Post || mode == Retry) {
			if err := f.Settled(ctx, r); err != nil {
				return fmt.Errorf("waiting for the harness's faults: %w", err)
			}
		}
		r.attempts++
		r.count("resume:" + string(mode))
		sent := r.cursorIn(mode)
		a, err := r.attempt(ctx, mode, d)
		if err != nil {
			return err
		}
		kind := "none"
		if d != nil {
			kind = d.Kind
		}
		r.tracef("attempt %d %s cursor=%q drop=%s → %s after %d events (gen %d, last id %q)", r.attempts, mode, sent.String(), kind, a.out, a.events, r.gen, r.cursor)
		if a.out != outRefused && len(drops) > 0 {
			drops = drops[1:] // a refusal started nothing: the drop waits for the next attempt
		}
		if a.events == 0 && a.out != outDone && a.out != outRefused {
			// Nothing came through: the instance may be gone or restarting.
			pause(ctx, backoff)
			backoff = min(2*backoff, 200*time.Millisecond)
		} else {
			backoff = time.Millisecond
		}
		switch a.out {
		case outDone:
		case outDropped, outEnded:
			if a.out == outEnded {
				r.early++
				r.count("ended_early")
				if r.early > len(r.Plan.Drops)+5 {
					return fmt.Errorf("%d streams ended early without an error, %d events held", r.early, len(r.evs))
				}
			}
			if d != nil {
				r.count("drop:" + d.Kind)
				mode = d.Resume
			} else {
				r.count("drop:spurious")
				mode = r.rn.cfg.Shape.Resumes[r.rng.IntN(len(r.rn.cfg.Shape.Resumes))]
			}
		case outFailed:
			// The followed generation is over without a result: the same
			// key generates again (a POST with the cursor gets a reset first).
			r.count("generation_failed_seen")
			mode = []Mode{Post, Retry}[r.rng.IntN(2)]
		case outNotFound:
			mode = Retry // the first POST never reached reprise: nothing to resume
		case outRefused:
			r.v.Throttled++
			if r.v.Throttled > maxThrottles {
				return fmt.Errorf("refused %d times", r.v.Throttled)
			}
			if a.regenerate {
				mode = Post // a refused generation is over: ask for the key again
			}
			pause(ctx, a.wait)
		}
	}
	return nil
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
