package mockllm

import (
	"context"
	"fmt"
	"sync"
)

// Generation is one upstream generation: a request that was accepted and
// started producing a 200 response (or hung after being accepted).
type Generation struct {
	Prompt string `json:"prompt"`
	Path   string `json:"path"`
	// Content is the concatenated content tokens written (chat), or the raw
	// PCM bytes written (speech).
	Content string `json:"content"`
	// Events counts SSE data events written (for raw audio responses: audio
	// chunks written).
	Events int `json:"events"`
	// Completed: the response ended normally.
	Completed bool `json:"completed"`
	// Aborted: the generation ended without completing (abort_after, hang,
	// client gone, write error).
	Aborted bool `json:"aborted"`
	// Tokens counts content tokens (chat) or audio chunks (speech) generated.
	Tokens int `json:"tokens"`
	// PromptTokens is the prompt's tokens (its words) the generation's
	// usage reports: what it bills as input (text formats).
	PromptTokens int `json:"prompt_tokens"`
}

// Entry aggregates the ledger for one prompt (or for all prompts in Total).
type Entry struct {
	// Requests counts every HTTP request seen, including error statuses.
	Requests int `json:"requests"`
	// Generations counts requests that started generating.
	Generations int `json:"generations"`
	// Completed counts generations that ended normally.
	Completed int `json:"completed"`
	// Tokens counts tokens (or audio chunks) generated.
	Tokens int `json:"tokens"`
}

// Ledger counts what the fake upstream generated. Requests that carry no
// prompt (unknown path, malformed body) are booked under the prompt "".
// All methods are safe for concurrent use.
type Ledger struct {
	mu      sync.Mutex
	epoch   uint64 // bumped by Reset; recorders from older epochs are ignored
	total   Entry
	prompts map[string]*promptLog
	order   []string      // prompts in the order they were first booked, for forgetting the oldest
	max     int           // prompts kept at most (0: all)
	changed chan struct{} // closed and replaced on every mutation
}

type promptLog struct {
	entry Entry
	gens  []*generation
}

type generation struct {
	Generation
	content []byte
}

func newLedger() *Ledger {
	return &Ledger{prompts: map[string]*promptLog{}, changed: make(chan struct{})}
}

// Get returns the entry for prompt (zero if never seen).
func (l *Ledger) Get(prompt string) Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.prompts[prompt]; p != nil {
		return p.entry
	}
	return Entry{}
}

// Generations returns copies of the generations for prompt in start order.
func (l *Ledger) Generations(prompt string) []Generation {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.prompts[prompt]
	if p == nil {
		return nil
	}
	out := make([]Generation, len(p.gens))
	for i, g := range p.gens {
		out[i] = g.snapshot()
	}
	return out
}

// Total returns the sum over all prompts.
func (l *Ledger) Total() Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// Entries returns a copy of the per-prompt entries.
func (l *Ledger) Entries() map[string]Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]Entry, len(l.prompts))
	for k, p := range l.prompts {
		out[k] = p.entry
	}
	return out
}

// Reset forgets everything. Generations still running keep going but are no
// longer booked. Because status directives count requests in the ledger, Reset
// also restarts every status sequence.
func (l *Ledger) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.epoch++
	l.total = Entry{}
	l.prompts, l.order = map[string]*promptLog{}, nil
	l.notifyLocked()
}

// Wait blocks until prompt has at least n finished (completed or aborted)
// generations, or ctx ends. A client that read a stream to its end may be
// ahead of the ledger: the handler books a generation as finished after its
// last write returned. The error says what was awaited and what was seen.
func (l *Ledger) Wait(ctx context.Context, prompt string, n int) error {
	_, err := l.waitFor(ctx, prompt, fmt.Sprintf("%d finished generations", n), func(p *promptLog) bool {
		return p.finished() >= n
	})
	return err
}

// WaitSettled blocks until prompt has at least n generations and every one
// it started has finished (completed or aborted), or ctx ends. It returns
// the prompt's entry at that moment: counts that stay put until another
// request for prompt arrives. Read the ledger through it after a stream
// ended, rather than with Get at once (see Wait). With n = 0 it waits only
// for running generations to end.
func (l *Ledger) WaitSettled(ctx context.Context, prompt string, n int) (Entry, error) {
	return l.waitFor(ctx, prompt, fmt.Sprintf("at least %d generations, none running", n), func(p *promptLog) bool {
		return len(p.gens) >= n && p.finished() == len(p.gens)
	})
}

// WaitStarted blocks until prompt has at least n started generations, or ctx
// ends. Useful to act (cancel, kill a connection) while a generation runs.
func (l *Ledger) WaitStarted(ctx context.Context, prompt string, n int) error {
	_, err := l.waitFor(ctx, prompt, fmt.Sprintf("%d started generations", n), func(p *promptLog) bool { return len(p.gens) >= n })
	return err
}

// WaitEvents blocks until the latest generation of prompt has written at
// least n events, or ctx ends.
func (l *Ledger) WaitEvents(ctx context.Context, prompt string, n int) error {
	_, err := l.waitFor(ctx, prompt, fmt.Sprintf("%d events written by the latest generation", n), func(p *promptLog) bool {
		return len(p.gens) > 0 && p.gens[len(p.gens)-1].Events >= n
	})
	return err
}

// waitFor blocks until done holds for prompt's log and returns its entry
// then; when ctx ends first, the error names what (the awaited condition)
// and what the log held.
func (l *Ledger) waitFor(ctx context.Context, prompt, what string, done func(*promptLog) bool) (Entry, error) {
	for {
		l.mu.Lock()
		p := l.prompts[prompt]
		if p == nil {
			p = &promptLog{}
		}
		ok := done(p)
		entry, seen := p.entry, p.describe()
		changed := l.changed
		l.mu.Unlock()
		if ok {
			return entry, nil
		}
		select {
		case <-ctx.Done():
			return entry, fmt.Errorf("mockllm: waiting for %s of prompt %q: %w (seen: %s)", what, prompt, ctx.Err(), seen)
		case <-changed:
		}
	}
}

// finished counts the generations that completed or aborted. l.mu must be held.
func (p *promptLog) finished() int {
	n := 0
	for _, g := range p.gens {
		if g.Completed || g.Aborted {
			n++
		}
	}
	return n
}

// describe says what the log holds, for errors. l.mu must be held.
func (p *promptLog) describe() string {
	s := fmt.Sprintf("%d requests; generations: %d started, %d finished, %d completed",
		p.entry.Requests, len(p.gens), p.finished(), p.entry.Completed)
	if len(p.gens) > 0 {
		s += fmt.Sprintf("; the latest wrote %d events", p.gens[len(p.gens)-1].Events)
	}
	return s
}

func (g *generation) snapshot() Generation {
	s := g.Generation
	s.Content = string(g.content)
	return s
}

// notifyLocked wakes all waiters. l.mu must be held.
func (l *Ledger) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// logLocked returns the log for prompt, creating it. l.mu must be held.
func (l *Ledger) logLocked(prompt string) *promptLog {
	p := l.prompts[prompt]
	if p == nil {
		if l.max > 0 && len(l.prompts) >= l.max {
			l.forgetOldestLocked()
		}
		p = &promptLog{}
		l.prompts[prompt] = p
		l.order = append(l.order, prompt)
	}
	return p
}

// forgetOldestLocked drops the oldest prompt's log (its totals stay in
// the ledger's total). l.mu must be held.
func (l *Ledger) forgetOldestLocked() {
	for len(l.order) > 0 {
		oldest := l.order[0]
		l.order = l.order[1:]
		if _, ok := l.prompts[oldest]; ok {
			delete(l.prompts, oldest)
			break
		}
	}
	if cap(l.order) > 2*l.max { // the dropped head's room is given back now and then
		l.order = append([]string(nil), l.order...)
	}
}

// request books one HTTP request and returns its 1-based index for prompt.
func (l *Ledger) request(prompt string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.logLocked(prompt)
	p.entry.Requests++
	l.total.Requests++
	l.notifyLocked()
	return p.entry.Requests
}
