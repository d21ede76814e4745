package chaoscore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
)

// check verifies the run's invariants once the client holds [DONE]: every
// event of the completed generation once, the key's record, the upstream's
// ledger, the content, and replays.
func (r *Run) check(ctx context.Context) {
	cfg := &r.rn.cfg
	// Every event of the completed generation, contiguous from 1, once.
	var evs []Event
	for off := uint64(1); off <= r.done; off++ {
		ev, ok := r.evs[off]
		if !ok {
			r.v.Lost++
			r.problem("offset %d of generation %d never delivered", off, r.gen)
			continue
		}
		evs = append(evs, ev)
	}
	for off := range r.evs {
		if off > r.done {
			r.problem("offset %d delivered after the terminal event at %d", off, r.done)
		}
	}
	if want := uint64(r.Plan.Events()); r.done != want {
		r.problem("the terminal event at offset %d, want %d (%d tokens)", r.done, want, r.Plan.Tokens)
	}
	// The harness's faults are over before the ledger is read.
	if f := r.rn.faults; f != nil {
		if err := f.Settled(ctx, r); err != nil {
			r.problem("the harness's faults still running at the end: %v", err)
			return
		}
	}
	// Readers get [DONE] as soon as JetStream acknowledged it; the key's
	// record is finished right after.
	st, err := r.AwaitEnd(ctx, r.gen)
	if err != nil || st.State != "completed" || st.Generation != int(r.gen) || st.Events != int(r.done) {
		r.problem("key status %+v (%v), want completed generation %d with %d events", st, err, r.gen, r.done)
		return
	}
	prompt := r.Plan.Prompt()
	gens, err := cfg.Ledger.Settled(ctx, prompt)
	if err != nil {
		r.problem("%v", err)
		return
	}
	broken := int(r.broken.Load())
	if cfg.Rules.BreaksSeen {
		broken = r.v.Regenerated
	}
	if allowed := 1 + broken; len(gens) > allowed {
		r.v.Extra += len(gens) - allowed
		r.problem("%d upstream generations, %d allowed (generations broken: %d; error codes seen: %v)", len(gens), allowed, broken, r.codes)
	}
	if len(gens) == 0 || len(gens) > st.Generation {
		// A reprise generation may end before reaching the upstream (an
		// answer head cut by a fault, a refusal), never the other way round.
		r.problem("reprise ran %d generations, the upstream saw %d", st.Generation, len(gens))
		return
	}
	// The content is the upstream's last generation's, which completed.
	final := gens[len(gens)-1]
	want := final.Content
	if cfg.Rules.Content != nil {
		want = cfg.Rules.Content(prompt, r.Plan.Tokens)
	}
	if got := r.Plan.Text(evs); !final.Completed || final.Content != want || got != want {
		r.v.Lost++
		r.problem("content: client reassembled %q; the upstream's last of %d generations is %q (completed=%v); expected %q", got, len(gens), final.Content, final.Completed, want)
	}
	// Replays are identical and cost no generation.
	r.result(evs)
	for _, mode := range []Mode{Get, Retry} {
		rep, header, err := r.replay(ctx, mode)
		r.saw(rep)
		switch {
		case err != nil:
			r.problem("%s replay: %v", mode, err)
		case !slices.Equal(rep, evs):
			r.problem("%s replay differs from what the client assembled: %d vs %d events; first difference %s; answer %v", mode, len(rep), len(evs), FirstDiff(rep, evs), header)
		case mode == Retry && header.Get("Idempotent-Replayed") != "true":
			r.problem("POST replay without Idempotent-Replayed: true (answer %v)", header)
		}
	}
	after, err := cfg.Ledger.Settled(ctx, prompt)
	if err != nil {
		r.problem("%v", err)
	} else if n := len(after) - len(gens); n > 0 {
		r.v.Extra += n
		r.problem("replays made %d upstream generations", n)
	}
}

// saw notes the events of a replay: the ids they name, and the result
// they make if they end with the terminal event.
func (r *Run) saw(evs []Event) {
	for _, ev := range evs {
		r.name(ev, false, false)
	}
	if len(evs) > 0 && r.Plan.Terminal(evs[len(evs)-1]) {
		r.result(evs)
	}
	if r.done > 0 && !slices.Equal(evs, r.Result()) {
		r.denied = true
	}
}

// result notes a completed result the key gave.
func (r *Run) result(evs []Event) {
	for _, a := range r.answers {
		if slices.Equal(a, evs) {
			return
		}
	}
	r.answers = append(r.answers, slices.Clone(evs))
}

// Reread is what a run's key shows once the harness's faults are over.
type Reread struct {
	Status Status // the key's
	// Generations is how many times the upstream generated the run's prompt.
	Generations int
	// Answers is how many different completed results the key was seen
	// to give: the client's, the replays checking it, and this read's
	// (more than one: a key with two answers).
	Answers int
	// Denied: the client got its completed result, and a replay of the key
	// gave something else (another result, or a failure).
	Denied bool
}

// Reread reads r's key again through World.Direct: its status, the
// upstream's ledger, a GET replay unless the key is still in progress, and
// a POST replay if the client got its answer (a POST would generate a key
// that has none). What the replays show is checked as the client's events
// are: an id naming another event than before is a clash (a problem). Only
// once the run is over; a harness calls it once its faults are over.
func (r *Run) Reread(ctx context.Context) (Reread, error) {
	var rr Reread
	gens, err := r.rn.cfg.Ledger.Settled(ctx, r.Plan.Prompt())
	if err != nil {
		return rr, err
	}
	rr.Generations = len(gens)
	for {
		st, code, err := r.Status(ctx, r.rn.cfg.World.Direct(r))
		if err == nil && code == http.StatusOK {
			rr.Status = st
			break
		}
		rules := &r.rn.cfg.Rules
		if ctx.Err() != nil || err != nil && !rules.RetryLinks || err == nil && !rules.refused(code, "") {
			rr.Answers = len(r.answers)
			return rr, errors.Join(err, ctx.Err())
		}
		pause(ctx, 100*time.Millisecond) // an instance down or refusing: its replacement answers
	}
	modes := []Mode{Get}
	if r.done > 0 {
		modes = append(modes, Retry)
	}
	for _, mode := range modes {
		if rr.Status.State == "in_progress" {
			break
		}
		rep, _, err := r.replay(ctx, mode)
		if err != nil {
			var ae *answerError
			if !errors.As(err, &ae) {
				return rr, fmt.Errorf("%s replay: %w", mode, err)
			}
			continue // a key without a result answers no stream
		}
		r.saw(rep)
	}
	rr.Answers, rr.Denied = len(r.answers), r.denied
	if rr.Answers > 1 {
		r.problem("the key gave %d different completed results (status %+v)", rr.Answers, rr.Status)
	}
	return rr, nil
}

// replay replays the key through World.Direct: a refusal is waited out, a
// link error tried again with Rules.RetryLinks, until an answer comes or
// ctx ends. A GET stream ends by closing its connection, so one cut by its
// instance dying ends cleanly: with Rules.RetryLinks a GET replay without
// [DONE] is read once more (a second one is the answer).
func (r *Run) replay(ctx context.Context, mode Mode) ([]Event, http.Header, error) {
	rules := &r.rn.cfg.Rules
	cut := false
	for {
		evs, header, err := r.Replay(ctx, r.rn.cfg.World.Direct(r), mode)
		var ae *answerError
		switch {
		case ctx.Err() != nil:
			return evs, header, err
		case err == nil && mode == Get && rules.RetryLinks && !cut && (len(evs) == 0 || !r.Plan.Terminal(evs[len(evs)-1])):
			cut = true
			r.count("replay_cut")
			r.tracef("GET replay ended after %d events without [DONE]: reading it again", len(evs))
		case err == nil:
			return evs, header, nil
		case errors.As(err, &ae) && rules.refused(ae.status, errorCode(ae.body)):
			r.v.Throttled++
			pause(ctx, r.refusalWait(ae.header))
		case errors.As(err, &ae) || !rules.RetryLinks:
			return evs, header, err
		default:
			pause(ctx, 100*time.Millisecond)
		}
	}
}

// FirstDiff describes where two event lists first differ.
func FirstDiff(a, b []Event) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %+v vs %+v", i, a[i], b[i])
		}
	}
	return "(one is a prefix of the other)"
}

// chatText reassembles the text of chat chunks, skipping named events and
// [DONE]; a chunk that does not parse is shown in its place.
func chatText(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type != "" || ev.Data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			fmt.Fprintf(&b, "<chunk %q: %v>", ev.Data, err)
			continue
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String()
}

// responsesText reassembles the text of a Responses stream's
// response.output_text.delta events; one that does not parse is shown in
// its place.
func responsesText(evs []Event) string {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type != "response.output_text.delta" {
			continue
		}
		var d struct {
			Delta string `json:"delta"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
			fmt.Fprintf(&b, "<delta %q: %v>", ev.Data, err)
			continue
		}
		b.WriteString(d.Delta)
	}
	return b.String()
}
