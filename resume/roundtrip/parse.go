package roundtrip

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// event is one whole SSE event as received, and the fields a resume
// needs.
type event struct {
	raw    []byte        // its bytes, the blank line that ends it included
	typ    string        // its event: field, "" when absent
	hasID  bool          // it had a non-empty id: field
	isData bool          // it had a data: field
	final  bool          // a terminal event, or an error that ends the generation
	retry  time.Duration // its retry: field, 0 when absent
}

// terminal are the event types that end a stream with its result.
var terminal = map[string]bool{
	"response.completed": true, "response.incomplete": true, "message_stop": true, "speech.audio.done": true,
}

// parser splits an SSE byte stream into whole events, keeping their bytes
// unchanged (WHATWG HTML §9.2.6: lines end in CRLF, LF or CR; a blank line
// ends an event).
type parser struct {
	buf    []byte // the current event's bytes so far
	scan   int    // where the next line starts in buf
	lastID string // the last event's id, as the stream's cursor

	typ    string
	data   []string
	id     *string
	retry  time.Duration
	isData bool
}

// push takes the next bytes and returns the events they complete. The
// events' raw bytes are their own copies.
func (p *parser) push(b []byte) []event {
	p.buf = append(p.buf, b...)
	var out []event
	start := 0
	for {
		rel := bytes.IndexAny(p.buf[p.scan:], "\r\n")
		if rel < 0 {
			break
		}
		end := p.scan + rel
		next := end + 1
		if p.buf[end] == '\r' {
			if next >= len(p.buf) {
				break // a CRLF may be split: wait for the next byte
			}
			if p.buf[next] == '\n' {
				next++
			}
		}
		line := p.buf[p.scan:end]
		p.scan = next
		if len(line) == 0 {
			out = append(out, p.dispatch(bytes.Clone(p.buf[start:next])))
			start = next
			continue
		}
		p.field(string(line))
	}
	// Keep the unfinished event's bytes only.
	p.buf = append(p.buf[:0], p.buf[start:]...)
	p.scan -= start
	return out
}

// dropPartial forgets the bytes of an event that did not end.
func (p *parser) dropPartial() {
	p.buf, p.scan = p.buf[:0], 0
	p.clear()
}

func (p *parser) clear() {
	p.typ, p.data, p.id, p.retry, p.isData = "", p.data[:0], nil, 0, false
}

func (p *parser) field(line string) {
	if strings.HasPrefix(line, ":") {
		return
	}
	name, value, _ := strings.Cut(line, ":")
	value = strings.TrimPrefix(value, " ")
	switch name {
	case "event":
		p.typ = value
	case "data":
		p.data = append(p.data, value)
		p.isData = true
	case "id":
		if !strings.Contains(value, "\x00") {
			p.id = &value
		}
	case "retry":
		if ms, err := strconv.ParseUint(value, 10, 31); err == nil {
			p.retry = time.Duration(ms) * time.Millisecond
		}
	}
}

func (p *parser) dispatch(raw []byte) event {
	if p.id != nil {
		p.lastID = *p.id
	}
	ev := event{raw: raw, typ: p.typ, hasID: p.id != nil && *p.id != "", isData: p.isData, retry: p.retry}
	ev.final = isTerminal(p.typ, strings.Join(p.data, "\n")) || (p.typ == "error" && ev.hasID)
	p.clear()
	return ev
}

// isTerminal reports whether an event ends its stream with a result:
// chat's data: [DONE], or a terminal type (as event: or as the data's
// "type").
func isTerminal(typ, data string) bool {
	if data == "[DONE]" && (typ == "" || typ == "message") {
		return true
	}
	if terminal[typ] {
		return true
	}
	if typ != "" || !strings.HasPrefix(data, "{") || !strings.Contains(data, `"type"`) {
		return false
	}
	var v struct {
		Type string `json:"type"`
	}
	return json.Unmarshal([]byte(data), &v) == nil && terminal[v.Type]
}
