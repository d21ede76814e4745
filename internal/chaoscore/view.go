package chaoscore

import (
	"fmt"

	"github.com/reprise-dev/reprise/resume"
)

// conn is what one answer must deliver: generation gen from offset next
// (gen 0: whatever generation the server serves, from its first event).
type conn struct {
	mode    Mode
	gen     uint64
	next    uint64
	failed  bool   // the generation ended with an error event on this connection
	refusal string // the code of a refusal's error event
	cut     string // the code of an error without an id of its own: the connection, not the generation, ends
	last    string // the id of the connection's last event
}

// take checks one delivered event against what its connection must deliver
// and merges it into the client's view, deduplicating by id. A skipped
// offset is lost, a repeated one (or one delivered twice with different
// content) duplicated — except a break's error event, which may take the
// place of events shown before they were stored; an event that cannot be
// placed is a protocol violation, returned.
func (r *Run) take(c *conn, ev Event) error {
	if ev.Type == "error" && (ev.ID == "" || ev.ID == c.last) && r.rn.cfg.Rules.isRefusal(errorCode([]byte(ev.Data))) {
		// An error without an id (an SSE reader carries the last one on):
		// the instance ends this connection (it is closing, the journal does
		// not answer), not the generation; the cursor stays where it was.
		c.cut = errorCode([]byte(ev.Data))
		return nil
	}
	defer func() { c.last = ev.ID }()
	pos, err := resume.ParsePosition(ev.ID)
	if err != nil || pos.Gen == 0 {
		return fmt.Errorf("%s: event with id %q: not a position (%+v)", c.mode, ev.ID, ev)
	}
	r.cursor = ev.ID // what an EventSource sends back
	if pos.Gen < r.gen {
		return fmt.Errorf("%s: event %s of generation %d after the client saw generation %d", c.mode, ev.ID, pos.Gen, r.gen)
	}
	if ev.Type == "reset" {
		if pos.Offset != 0 || c.gen != 0 && pos.Gen <= c.gen {
			return fmt.Errorf("%s: reset %s does not lead past generation %d", c.mode, ev.ID, c.gen)
		}
		r.count("reset_seen")
		c.gen, c.next = pos.Gen, 1
		r.follow(pos.Gen)
		return nil
	}
	switch {
	case c.gen == 0:
		c.gen, c.next = pos.Gen, 1
	case pos.Gen < c.gen:
		return fmt.Errorf("%s: event %s of generation %d after generation %d on one connection", c.mode, ev.ID, pos.Gen, c.gen)
	case pos.Gen > c.gen:
		return fmt.Errorf("%s: event %s of generation %d without a reset (the connection was in generation %d)", c.mode, ev.ID, pos.Gen, c.gen)
	}
	r.follow(pos.Gen)
	supersedes := false
	if have, seen := r.evs[pos.Offset]; ev.Type == "error" && (pos.Offset < c.next || seen && have != ev) && r.rn.cfg.Rules.isBreak(errorCode([]byte(ev.Data))) {
		supersedes = true
		// The generation broke after its owner showed events the journal
		// never stored (docs/design/live-path.md): its stored failure takes their
		// place. They were no result; the view drops them.
		r.count("superseded_by_failure")
		for off := range r.evs {
			if off >= pos.Offset {
				delete(r.evs, off)
			}
		}
		c.next = min(c.next, pos.Offset)
	}
	have, seen := r.evs[pos.Offset]
	r.name(ev, supersedes, seen && have != ev) // the latter reported below as delivered twice
	switch {
	case pos.Offset > c.next:
		r.v.Lost += int(pos.Offset - c.next)
		r.problem("%s: event %s delivered after %d-%d: %d event(s) skipped", c.mode, ev.ID, c.gen, c.next-1, pos.Offset-c.next)
	case pos.Offset < c.next:
		r.v.Duplicated++
		r.problem("%s: event %s delivered again (expected offset %d)", c.mode, ev.ID, c.next)
	}
	c.next = pos.Offset + 1
	if have, ok := r.evs[pos.Offset]; ok {
		if have != ev {
			r.v.Duplicated++
			r.problem("offset %d delivered as %+v and as %+v", pos.Offset, have, ev)
		}
	} else {
		r.evs[pos.Offset] = ev
	}
	switch {
	case ev.Type == "error":
		code := errorCode([]byte(ev.Data))
		r.codes = append(r.codes, code)
		r.count("error_event:" + code)
		rules := &r.rn.cfg.Rules
		switch {
		case rules.isBreak(code):
		case rules.isRefusal(code):
			c.refusal = code // explained only as a connection's one event: see attempt
		default:
			r.problem("%s: event: error %s (%s), not a failure the faults cause", c.mode, code, ev.ID)
		}
		c.failed = true
	case r.Plan.Terminal(ev):
		r.done = pos.Offset
	}
	return nil
}

// name notes that ev's id names ev: an id seen before naming another event
// is a clash (a problem, unless reported otherwise), unless ev is a break's
// error taking the place of events shown but never stored (supersedes).
func (r *Run) name(ev Event, supersedes, reported bool) {
	have, ok := r.ids[ev.ID]
	switch {
	case !ok:
		r.ids[ev.ID] = ev
	case have == ev:
	case supersedes:
		r.v.Superseded++
		r.count("id_superseded")
		r.ids[ev.ID] = ev
	default:
		r.v.Clashes++
		r.count("id_clash")
		if !reported {
			r.problem("id %s names two events: %+v and %+v", ev.ID, have, ev)
		}
	}
}

// follow switches the client's view to generation gen when it is newer.
func (r *Run) follow(gen uint64) {
	if gen > r.gen {
		if r.gen != 0 {
			r.count("regenerations_followed")
		}
		r.gen, r.evs = gen, map[uint64]Event{}
	}
}
