package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/reprise-dev/reprise/internal/chaoscore"
)

// pauses is the NATS-pause fault: while the load runs, the nats-server
// process pid is stopped (SIGSTOP) for each duration in turn and continued
// (SIGCONT). The first pause starts gap into the load; each next one gap
// after the previous one recovered: a key first asked after the SIGCONT got
// its whole answer (or, failing that, the recovery bound passed).
type pauses struct {
	pid          int
	durs         []time.Duration
	gap          time.Duration
	recoverBound time.Duration
	signal       func(pid int, stop bool) error // SIGSTOP / SIGCONT

	mu      sync.Mutex
	windows []window
	err     error
	over    chan struct{} // closed once the last pause recovered, or the fault gave up
	woke    chan struct{} // the current window recovered
}

// window is one pause as it happened.
type window struct {
	dur                       time.Duration
	began, resumed, recovered time.Time // recovered zero: not within the bound
}

// parsePauses reads --nats-pause: durations, comma-separated.
func parsePauses(s string) ([]time.Duration, error) {
	if s == "" {
		return nil, nil
	}
	var out []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("--nats-pause %q: want positive durations, comma-separated (5s,12s,30s)", s)
		}
		out = append(out, d)
	}
	return out, nil
}

func newPauses(pid int, durs []time.Duration, gap, recoverBound time.Duration) *pauses {
	return &pauses{pid: pid, durs: durs, gap: gap, recoverBound: recoverBound, signal: signalNATS, over: make(chan struct{})}
}

// done reports whether every pause is over and recovered (or the fault
// gave up).
func (p *pauses) done() bool {
	select {
	case <-p.over:
		return true
	default:
		return false
	}
}

// answered is chaoscore's OnAnswer: a run begun after the current pause
// ended that got its answer recovers it.
func (p *pauses) answered(r *chaoscore.Run) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.windows) == 0 {
		return
	}
	w := &p.windows[len(p.windows)-1]
	if w.resumed.IsZero() || !w.recovered.IsZero() || r.Began().Before(w.resumed) {
		return
	}
	w.recovered = r.Answered()
	close(p.woke)
}

// run plays the pauses; it always leaves the process running.
func (p *pauses) run(ctx context.Context) {
	defer close(p.over)
	for _, d := range p.durs {
		if !sleep(ctx, p.gap) {
			return
		}
		if err := p.pause(ctx, d); err != nil {
			p.mu.Lock()
			p.err = err
			p.mu.Unlock()
			return
		}
		p.mu.Lock()
		woke := p.woke
		p.mu.Unlock()
		select {
		case <-woke:
		case <-time.After(p.recoverBound):
		case <-ctx.Done():
			return
		}
	}
}

// pause stops the process for d (less if ctx ends), then continues it.
func (p *pauses) pause(ctx context.Context, d time.Duration) error {
	p.mu.Lock()
	p.woke = make(chan struct{})
	p.windows = append(p.windows, window{dur: d, began: time.Now()})
	p.mu.Unlock()
	if err := p.signal(p.pid, true); err != nil {
		return fmt.Errorf("stopping NATS (pid %d): %w", p.pid, err)
	}
	sleep(ctx, d)
	if err := p.signal(p.pid, false); err != nil {
		return fmt.Errorf("continuing NATS (pid %d): %w", p.pid, err)
	}
	p.mu.Lock()
	p.windows[len(p.windows)-1].resumed = time.Now()
	p.mu.Unlock()
	return nil
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pauseReport is what the keys a pause touched went through: the keys in
// flight when it began, and every key that was running at some point
// between its SIGSTOP and its recovery.
type pauseReport struct {
	Dur      time.Duration // zero: the keys no pause touched
	InFlight int           // keys in flight at the SIGSTOP
	Keys     int           // keys touched
	// Regenerated: keys the upstream generated more than once.
	Regenerated int
	// Failed: keys by error code of a generation they saw fail (error
	// event, or a POST answered with it); each key once per code.
	Failed map[string]int
	// Unanswered: keys whose client never got the whole answer, by the
	// key's final state and error ("failed:journal_failure").
	Unanswered map[string]int
	// TwoAnswers: keys seen giving two different completed results.
	// Denied: keys whose client got the completed result and whose replay
	// then gave another, or a failure.
	TwoAnswers, Denied int
	// Clashes: ids seen naming two different events. Superseded: ids of an
	// event shown but never stored, then of the break's failure in its place.
	Clashes, Superseded int
	// Stuck: keys still in_progress once every run and pause was over.
	Stuck int
	// Recovery: from the SIGCONT to the first answer of a key asked after it
	// (zero: none within the bound).
	Recovery time.Duration
}

// bad reports whether the pause broke an invariant: a key with two
// answers, or whose answer a replay denied, an id naming two events (an
// event shown and then superseded by the break's error among them), or a
// key left in progress.
func (pr pauseReport) bad() bool {
	return pr.TwoAnswers+pr.Denied+pr.Clashes+pr.Superseded+pr.Stuck > 0
}

// keyState is one key's account once the load is over.
type keyState struct {
	run    *chaoscore.Run
	reread chaoscore.Reread
	err    error
}

// report attributes every key to the first pause it was running through
// (the last row: keys no pause touched), from its reread state.
func (p *pauses) report(keys []keyState) []pauseReport {
	p.mu.Lock()
	windows := slices.Clone(p.windows)
	p.mu.Unlock()
	rows := make([]pauseReport, len(windows)+1)
	for i, w := range windows {
		rows[i].Dur = w.dur
		if !w.recovered.IsZero() {
			rows[i].Recovery = w.recovered.Sub(w.resumed)
		}
	}
	for i := range rows {
		rows[i].Failed, rows[i].Unanswered = map[string]int{}, map[string]int{}
	}
	for _, k := range keys {
		began, ended := k.run.Began(), k.run.Ended()
		row := &rows[len(windows)]
		for i, w := range windows {
			end := w.recovered
			if end.IsZero() {
				end = w.resumed.Add(p.recoverBound)
			}
			if began.Before(w.began) && (ended.IsZero() || ended.After(w.began)) {
				rows[i].InFlight++
			}
			if began.Before(end) && (ended.IsZero() || ended.After(w.began)) {
				row = &rows[i]
				break
			}
		}
		row.add(k)
	}
	return rows
}

func (pr *pauseReport) add(k keyState) {
	pr.Keys++
	v := k.run.Verdict()
	pr.Clashes += v.Clashes
	pr.Superseded += v.Superseded
	if k.reread.Generations > 1 {
		pr.Regenerated++
	}
	if k.reread.Answers > 1 {
		pr.TwoAnswers++
	}
	if k.reread.Denied {
		pr.Denied++
	}
	st := k.reread.Status
	if st.State == "in_progress" {
		pr.Stuck++
	}
	seen := map[string]bool{}
	for _, c := range k.run.Codes() {
		if !seen[c] {
			seen[c] = true
			pr.Failed[c]++
		}
	}
	if k.run.Answered().IsZero() {
		state := st.State
		switch {
		case k.err != nil:
			state = "unread"
		case st.Error != "":
			state += ":" + st.Error
		}
		pr.Unanswered[state]++
	}
}

// printPauses writes the pause table (Markdown) to w.
func printPauses(w io.Writer, rows []pauseReport, pid int) {
	fmt.Fprintf(w, "NATS (pid %d) paused under the load:\n\n", pid)
	fmt.Fprintln(w, "| pause | in flight at SIGSTOP | keys touched | regenerated | failed, by code | unanswered | two answers | answer not replayed | ids naming two events | stuck in_progress | recovery |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		name, rec, inFlight := r.Dur.String(), "none within the bound", fmt.Sprint(r.InFlight)
		switch {
		case r.Dur == 0:
			name, rec, inFlight = "no pause", "—", "—"
		case r.Recovery > 0:
			rec = r.Recovery.Round(10 * time.Millisecond).String()
		}
		ids := fmt.Sprint(r.Clashes)
		if r.Superseded > 0 {
			ids += fmt.Sprintf(" (+%d superseded by the break's error)", r.Superseded)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s | %d | %d | %s | %d | %s |\n",
			name, inFlight, r.Keys, r.Regenerated, tally(r.Failed), tally(r.Unanswered), r.TwoAnswers, r.Denied, ids, r.Stuck, rec)
	}
	fmt.Fprintln(w)
}

// tally is "a 3, b 1", by name, or 0.
func tally(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
