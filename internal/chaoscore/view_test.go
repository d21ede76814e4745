package chaoscore

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

type nowhere struct{}

func (nowhere) Link(context.Context, *Run, *Drop) (Link, error) { return Link{}, errors.New("nowhere") }
func (nowhere) Direct(*Run) string                              { return "http://127.0.0.1:1" }

type noLedger struct{}

func (noLedger) Settled(context.Context, string) ([]mockllm.Generation, error) { return nil, nil }

func testRun(t *testing.T, rules Rules) *Run {
	t.Helper()
	rn, err := New(Config{World: nowhere{}, Ledger: noLedger{}, Rules: rules, Shape: Shape{
		MinTokens: 1, MaxTokens: 1, MaxDelay: 1e6, MaxDrops: 1, Resumes: []Mode{Get},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return rn.newRun(1, 0)
}

func ev(id, typ, data string) Event { return Event{ID: id, Type: typ, Data: data} }

var (
	chunk = `{"choices":[{"delta":{"content":"a"}}]}`
	done  = "[DONE]"
	lost  = `{"error":{"code":"owner_lost"}}`
	gone  = `{"error":{"code":"journal_unavailable"}}`
)

// TestTake: what the client's view makes of connections' events.
func TestTake(t *testing.T) {
	type connection struct {
		mode   Mode
		cursor string // the connection's Last-Event-ID ("": none)
		events []Event
	}
	tests := []struct {
		name      string
		conns     []connection
		wantErr   string // a protocol violation ending the run
		lost, dup int
		problems  int
		gen, done uint64
		// ids naming two events; of them, a break's failure in the place
		// of an event shown but lost
		clashes, superseded int
	}{
		{name: "whole stream", conns: []connection{{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-2", "", done)}}}, gen: 1, done: 2},
		{name: "resume after the cursor", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk)}},
			{Get, "1-1-1", []Event{ev("1-2-2", "", chunk), ev("1-3-3", "", done)}},
		}, gen: 1, done: 3},
		{name: "a resume skips an event", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk)}},
			{Get, "1-1-1", []Event{ev("1-3-3", "", done)}},
		}, lost: 1, problems: 1, gen: 1, done: 3},
		{name: "a resume repeats an event", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk)}},
			{Post, "1-1-1", []Event{ev("1-1-1", "", chunk), ev("1-2-2", "", done)}},
		}, dup: 1, problems: 1, gen: 1, done: 2},
		{name: "a full replay repeats exactly", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk)}},
			{Retry, "", []Event{ev("1-1-1", "", chunk), ev("1-2-2", "", done)}},
		}, gen: 1, done: 2},
		{name: "a full replay with other content", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk)}},
			{Retry, "", []Event{ev("1-1-1", "", "other"), ev("1-2-2", "", done)}},
		}, dup: 1, problems: 1, gen: 1, done: 2, clashes: 1},
		{name: "the first event is not the first", conns: []connection{{First, "", []Event{ev("1-2-2", "", chunk)}}}, lost: 1, problems: 1, gen: 1},
		{name: "a reset leads to the next generation", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-2", "error", lost)}},
			{Post, "1-2-2", []Event{ev("2-0-0", "reset", "{}"), ev("2-1-5", "", chunk), ev("2-2-6", "", done)}},
		}, gen: 2, done: 2},
		{name: "a new generation without a reset", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk)}},
			{Get, "1-1-1", []Event{ev("2-1-5", "", chunk)}},
		}, wantErr: "without a reset"},
		{name: "a retry may start the next generation", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-2", "error", lost)}},
			{Retry, "", []Event{ev("2-1-5", "", chunk), ev("2-2-6", "", done)}},
		}, gen: 2, done: 2},
		{name: "a break's stored failure takes the place of events shown but lost", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-1", "", chunk), ev("1-3-1", "", chunk)}},
			{Get, "1-3-1", []Event{ev("1-2-9", "error", lost)}},
			{Retry, "", []Event{ev("1-1-1", "", chunk), ev("1-2-9", "error", lost)}},
		}, gen: 1},
		{name: "a full replay meets the stored failure where the client saw events", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-1", "", chunk), ev("1-3-1", "", chunk)}},
			{Retry, "", []Event{ev("1-1-1", "", chunk), ev("1-2-9", "error", lost)}},
		}, gen: 1},
		{name: "an event other than a break's failure may not go back", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-1", "", chunk)}},
			{Get, "1-2-1", []Event{ev("1-2-9", "", chunk)}}, // a repeat, under another id
		}, dup: 2, problems: 2, gen: 1},
		{name: "an older generation after a newer", conns: []connection{
			{First, "", []Event{ev("2-1-1", "", chunk)}},
			{Retry, "", []Event{ev("1-1-1", "", chunk)}},
		}, wantErr: "after the client saw generation 2"},
		{name: "an error without an id cuts the connection, not the generation", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk)}},
			{Get, "1-1-1", []Event{ev("", "error", gone)}},
			{Get, "1-1-1", []Event{ev("1-2-2", "", done)}},
		}, gen: 1, done: 2},
		{name: "an SSE reader carries the last id onto an error without one", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-1-1", "error", gone)}},
			{Get, "1-1-1", []Event{ev("1-2-2", "", done)}},
		}, gen: 1, done: 2},
		{name: "an id names two events", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-2", "", chunk)}},
			{Get, "1-1-1", []Event{ev("1-2-2", "", "other")}},
		}, dup: 1, problems: 1, gen: 1, clashes: 1},
		{name: "a break's failure under the id of an event shown but lost", conns: []connection{
			{First, "", []Event{ev("1-1-1", "", chunk), ev("1-2-1", "", chunk)}},
			{Get, "1-2-1", []Event{ev("1-2-1", "error", lost)}},
		}, gen: 1, superseded: 1},
		{name: "an event without a position", conns: []connection{{First, "", []Event{ev("", "error", lost)}}}, wantErr: "not a position"},
		{name: "an error no fault explains", conns: []connection{
			{First, "", []Event{ev("1-1-1", "error", `{"error":{"code":"journal_failure"}}`)}},
		}, problems: 1, gen: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := testRun(t, Rules{Breaks: []string{"owner_lost"}, Refusals: []string{"journal_unavailable"}})
			var err error
			for _, cn := range tc.conns {
				r.cursor = cn.cursor
				c := conn{mode: cn.mode}
				if sent := r.cursorIn(cn.mode); sent.Gen != 0 {
					c.gen, c.next = sent.Gen, sent.Offset+1
				}
				for _, e := range cn.events {
					if err = r.take(&c, e); err != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			v := r.Verdict()
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one saying %q", err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "":
				return
			}
			if v.Lost != tc.lost || v.Duplicated != tc.dup || len(v.Problems) != tc.problems || r.gen != tc.gen || r.done != tc.done {
				t.Errorf("lost=%d dup=%d problems=%q gen=%d done=%d; want lost=%d dup=%d %d problems gen=%d done=%d",
					v.Lost, v.Duplicated, v.Problems, r.gen, r.done, tc.lost, tc.dup, tc.problems, tc.gen, tc.done)
			}
			if v.Clashes != tc.clashes || v.Superseded != tc.superseded {
				t.Errorf("clashes=%d superseded=%d, want %d and %d", v.Clashes, v.Superseded, tc.clashes, tc.superseded)
			}
		})
	}
}

// TestDraw: a seed and an index give the same plan, within its shape.
func TestDraw(t *testing.T) {
	s := Shape{MinTokens: 3, MaxTokens: 9, MaxDelay: 5e6, MaxDrops: 4, Resumes: []Mode{Get, WebSocket}}
	for i := range 200 {
		a := s.Draw(rand.New(rand.NewPCG(7, uint64(i))), "k")
		b := s.Draw(rand.New(rand.NewPCG(7, uint64(i))), "k")
		if planText(a) != planText(b) {
			t.Fatalf("run %d: %s, then %s", i, planText(a), planText(b))
		}
		if a.Tokens < 3 || a.Tokens > 9 || a.Delay < 1e6 || a.Delay > 5e6 || len(a.Drops) < 1 || len(a.Drops) > 4 {
			t.Fatalf("run %d out of shape: %s", i, planText(a))
		}
		for _, d := range a.Drops {
			if d.Resume != Get && d.Resume != WebSocket || d.Kind == AfterEvents && (d.Events < 1 || d.Events >= a.Events()) {
				t.Fatalf("run %d: drop %+v", i, d)
			}
		}
	}
	for _, bad := range []Shape{
		{MinTokens: 5, MaxTokens: 4, MaxDelay: 1e6, MaxDrops: 1, Resumes: []Mode{Get}},
		{MaxTokens: 4, MaxDelay: 1e3, MaxDrops: 1, Resumes: []Mode{Get}},
		{MaxTokens: 4, MaxDelay: 1e6, Resumes: []Mode{Get}},
		{MaxTokens: 4, MaxDelay: 1e6, MaxDrops: 1},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%+v: %v, want ErrInvalidOption", bad, err)
		}
	}
}

// TestSummaryLine: the line CI greps.
func TestSummaryLine(t *testing.T) {
	s := Summary{Seed: 1, Runs: 320, Extra: 2}
	if got, want := s.Line(), "chaos: runs=320 lost=0 duplicated=0 extra_generations=2 seed=1"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
	if s.Clean() {
		t.Error("a summary with extra generations is clean")
	}
}

func TestResponsesPlan(t *testing.T) {
	p := Plan{Key: "k", Format: Responses, Tokens: 2}
	var body struct {
		Stream bool   `json:"stream"`
		Input  string `json:"input"`
	}
	if p.Path() != "/v1/responses" || json.Unmarshal([]byte(p.Body()), &body) != nil || !body.Stream || body.Input != p.Prompt() {
		t.Fatalf("Path %s, Body %s: want a streamed Responses request of the prompt", p.Path(), p.Body())
	}
	evs := []Event{
		{Type: "response.created", Data: `{}`},
		{Type: "response.output_text.delta", Data: `{"delta":"a"}`},
		{Type: "response.output_text.delta", Data: `{"delta":" b"}`},
		{Type: "response.completed", Data: `{}`},
	}
	if got := p.Text(evs); got != "a b" {
		t.Fatalf("Text = %q, want %q", got, "a b")
	}
	if p.Terminal(evs[2]) || !p.Terminal(evs[3]) || p.Terminal(Event{Data: "[DONE]"}) {
		t.Fatal("Terminal: want response.completed only")
	}
	if p.Events() != 10 {
		t.Fatalf("Events = %d, want 2 tokens + 8", p.Events())
	}
}
