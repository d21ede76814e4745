package chaoscore

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Mode is how an attempt asks for its key.
type Mode string

// Attempt modes. After the first, each drop names the mode its resume takes.
const (
	First     Mode = "first" // the initial POST
	Get       Mode = "get"   // GET /v1/streams/{key}, Last-Event-ID: the last id seen
	Post      Mode = "post"  // POST, same key, Last-Event-ID: the last id seen
	Retry     Mode = "retry" // POST, same key, no Last-Event-ID: a full replay or attach, deduplicated by id
	WebSocket Mode = "ws"    // WebSocket on /v1/streams/{key}?last_event_id=
)

// Drop kinds the client carries out itself. Any other kind is a fault of
// the harness's link (World.Link), which the core passes through.
const (
	AfterEvents = "after_events" // the client hangs up after Drop.Events events
	AfterHead   = "after_head"   // the client hangs up once the answer's head is in
	InFlight    = "in_flight"    // the client gives up Drop.Wait after sending, answer or not
)

// Drop is one planned break of a run's connection, and how the client
// resumes after it.
type Drop struct {
	Kind   string
	Events int           // AfterEvents, and a link's mid-stream faults: after this many events read
	Bytes  int           // link faults that cut after so many bytes of the answer
	Wait   time.Duration // InFlight: when the client gives up; link faults: their delay
	Resume Mode
}

func (d *Drop) clientSide() bool {
	return d != nil && (d.Kind == AfterEvents || d.Kind == AfterHead || d.Kind == InFlight)
}

// Format is the API a run streams through.
type Format string

// Formats.
const (
	// Chat is /v1/chat/completions: unnamed chunks ending with [DONE]. The
	// default.
	Chat Format = ""
	// Responses is /v1/responses: named events, each with its
	// sequence_number, ending with response.completed (a reprise with
	// --upstream-background runs them in background mode).
	Responses Format = "responses"
)

// Plan is one run: a streamed chat (or Responses stream) of the fake model
// under one key.
type Plan struct {
	Key    string
	Format Format
	Tokens int           // content tokens ([tokens=N])
	Delay  time.Duration // between tokens ([delay=D])
	// Directives are more of the fake model's directives for the prompt
	// (e.g. [status=503,429]).
	Directives []string
	Drops      []Drop
	// Faults is the harness's own part of the plan (opaque here; reported
	// with the plan).
	Faults any
}

// Prompt is the run's prompt: unique to its key, with its directives.
func (p Plan) Prompt() string {
	d := fmt.Sprintf("[tokens=%d] [delay=%dms]", p.Tokens, p.Delay.Milliseconds())
	if len(p.Directives) > 0 {
		d += " " + strings.Join(p.Directives, " ")
	}
	return "chaos run " + p.Key + " " + d
}

// Path is the endpoint the run POSTs to.
func (p Plan) Path() string {
	if p.Format == Responses {
		return "/v1/responses"
	}
	return "/v1/chat/completions"
}

// Body is the run's request body: a streamed chat (or Responses request) of
// its prompt.
func (p Plan) Body() string {
	if p.Format == Responses {
		b, _ := json.Marshal(map[string]any{"model": "mock-1", "stream": true, "input": p.Prompt()})
		return string(b)
	}
	b, _ := json.Marshal(map[string]any{
		"model": "mock-1", "stream": true,
		"messages": []map[string]string{{"role": "user", "content": p.Prompt()}},
	})
	return string(b)
}

// Events is how many events a completed generation of the run has: the
// role chunk, one chunk per token, the stop chunk and [DONE], which is at
// this offset (the usage chunk reprise asks for is kept from clients that
// did not ask for it).
// Of Responses: response.created, .in_progress, .output_item.added,
// .content_part.added, a delta per token, .output_text.done,
// .content_part.done, .output_item.done and response.completed.
func (p Plan) Events() int {
	if p.Format == Responses {
		return p.Tokens + 8
	}
	return p.Tokens + 3
}

// Terminal reports whether ev completes the run's stream: [DONE], or
// response.completed.
func (p Plan) Terminal(ev Event) bool {
	if p.Format == Responses {
		return ev.Type == "response.completed"
	}
	return ev.Type == "" && ev.Data == "[DONE]"
}

// Text reassembles the text of a run's events.
func (p Plan) Text(evs []Event) string {
	if p.Format == Responses {
		return responsesText(evs)
	}
	return chatText(evs)
}

// AnswerBytes is about how many bytes reprise's SSE answer for the run has
// (an id line and a chunk per event), for drops that cut after some bytes.
func (p Plan) AnswerBytes() int { return 200 + p.Events()*180 }

// Key names run i of a seed (prefix keeps scenarios sharing a journal apart).
func Key(prefix string, seed uint64, i int) string {
	return fmt.Sprintf("%schaos-%d-%d", prefix, seed, i)
}

// Shape is how a harness's plans are drawn.
type Shape struct {
	MinTokens, MaxTokens int
	MaxDelay             time.Duration // the pace is drawn in [1ms, MaxDelay]
	MaxDrops             int           // 1..MaxDrops drops a run
	Format               Format        // the API the runs stream through; default Chat
	Resumes              []Mode        // the modes a drop may be resumed by
	// Drop draws one drop's kind and parameters (Draw draws its resume
	// mode). Default: ClientDrop.
	Drop func(rng *rand.Rand, p Plan) Drop
}

// Validate reports a shape Draw cannot use, wrapping ErrInvalidOption.
func (s Shape) Validate() error {
	switch {
	case s.MinTokens < 0 || s.MaxTokens < s.MinTokens:
		return fmt.Errorf("%w: want 0 <= min tokens (%d) <= max tokens (%d)", ErrInvalidOption, s.MinTokens, s.MaxTokens)
	case s.MaxDelay < time.Millisecond:
		return fmt.Errorf("%w: max delay %s under 1ms", ErrInvalidOption, s.MaxDelay)
	case s.MaxDrops < 1:
		return fmt.Errorf("%w: max drops %d, want at least 1", ErrInvalidOption, s.MaxDrops)
	case len(s.Resumes) == 0:
		return fmt.Errorf("%w: no resume modes", ErrInvalidOption)
	}
	return nil
}

// Draw draws the plan of key from rng: tokens, pace, then each drop's
// resume mode and the drop itself.
func (s Shape) Draw(rng *rand.Rand, key string) Plan {
	p := Plan{
		Key:    key,
		Format: s.Format,
		Tokens: s.MinTokens + rng.IntN(s.MaxTokens-s.MinTokens+1),
		Delay:  time.Duration(1+rng.IntN(int(s.MaxDelay/time.Millisecond))) * time.Millisecond,
	}
	draw := s.Drop
	if draw == nil {
		draw = ClientDrop
	}
	for range 1 + rng.IntN(s.MaxDrops) {
		resume := s.Resumes[rng.IntN(len(s.Resumes))]
		d := draw(rng, p)
		d.Resume = resume
		p.Drops = append(p.Drops, d)
	}
	return p
}

// ClientDrop draws a drop the client makes itself: after k events (7 in
// 10; k before [DONE]), after the answer's head (2 in 10), or in flight
// within 5ms (1 in 10).
func ClientDrop(rng *rand.Rand, p Plan) Drop {
	switch n := rng.IntN(10); {
	case n < 7:
		return Drop{Kind: AfterEvents, Events: 1 + rng.IntN(p.Events()-1)}
	case n < 9:
		return Drop{Kind: AfterHead}
	default:
		return Drop{Kind: InFlight, Wait: time.Duration(rng.IntN(5000)) * time.Microsecond}
	}
}
