package journal

import (
	"encoding/binary"
	"math"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
)

// End states carried by the end marker of a generation.
const (
	EndCompleted = "completed"
	EndFailed    = "failed"
)

// Message headers. A message is a frame: consecutive events of one
// generation (Reprise-N of them, packed in the body), the end marker last
// when Reprise-End is set. A message without Reprise-N is one event whose
// type is in Reprise-Type and whose body is its data (the format before
// frames; still read).
const (
	hdrOffset = "Reprise-Off"
	hdrCount  = "Reprise-N"
	hdrType   = "Reprise-Type"
	hdrEnd    = "Reprise-End"
	hdrWriter = "Reprise-Writer"
	// hdrHint, when set, is the Seq of every event of the frame: the
	// sequence of a message of the generation stored before it, known
	// when its events were appended, or the stream's first (startHint)
	// for events appended before the generation's first message was
	// stored (Writer): a sequence at or before the message's.
	hdrHint = "Reprise-Hint"
	// hdrNote, when set, is the note of an event appended noted
	// (Writer.AppendNoted) that the frame holds or follows: every message
	// of its writer from that event's on carries it, and a seal's message
	// carries the note of the message it follows (Journal.Note).
	hdrNote = "Reprise-Note"
)

// Event is one journaled upstream event, or a generation's end marker.
type Event struct {
	// Offset is the 1-based position of the event within its generation.
	// The end marker takes the offset after the last event.
	Offset uint64
	// Seq is where a reader of the event seeks: the stream sequence of
	// the message that holds it (several events can share one), or of one
	// stored before it on its generation's subject, as the writer knew
	// when the event was appended — so an event can be shown, with its id
	// (resume.Position), before JetStream stored it, and has the same Seq
	// for every reader. 0 for the first event until it is stored.
	Seq uint64
	// Type is the SSE event type ("" for an unnamed event).
	Type string
	// Data is the event payload, unchanged.
	Data []byte
	// End is EndCompleted or EndFailed on the end marker, "" on events.
	End string
}

// IsEnd reports whether e is a generation's end marker.
func (e Event) IsEnd() bool { return e.End != "" }

// eventOverhead is what an event costs beyond its type and data: the two
// length prefixes of its frame, and the record every copy in memory holds
// (a writer's queue, the engine's tail: the offset, the sequence and the
// three slice headers, 72 bytes on 64-bit).
const eventOverhead = lengthPrefixes + 72

// lengthPrefixes bounds the two length prefixes of an event in a frame.
const lengthPrefixes = 2 * binary.MaxVarintLen64

// frameRoom is what a message needs besides its packed events: its headers.
const frameRoom = 4096

// Size is what e costs stored and held: its type, its data and
// eventOverhead — every byte an upstream can put in an event that the
// journal keeps, so limits on what a generation may store count it (the
// upstream's own id line is not kept). It bounds what e adds to a frame's
// body.
func (e Event) Size() int { return len(e.Type) + len(e.Data) + eventOverhead }

// EventSize is the Size of an event of type typ and data.
func EventSize(typ string, data []byte) int { return Event{Type: typ, Data: data}.Size() }

// encode packs consecutive events, the end marker possibly last, into one
// message written by writer, carrying note when it is not empty. Their
// Seq, when set, is the same (the frame's hint). The message's body comes
// from bodies: once it is published (the connection copies it), release
// gives it back.
func encode(subject, writer string, evs []Event, note string) *nats.Msg {
	m := nats.NewMsg(subject)
	n, size := 0, 0
	for _, ev := range evs {
		if ev.IsEnd() {
			m.Header.Set(hdrEnd, ev.End)
			break
		}
		n++
		size += ev.Size()
	}
	body := bodies.get(size)
	for _, ev := range evs[:n] {
		body = binary.AppendUvarint(body, uint64(len(ev.Type)))
		body = append(body, ev.Type...)
		body = binary.AppendUvarint(body, uint64(len(ev.Data)))
		body = append(body, ev.Data...)
	}
	m.Data = body
	if evs[0].Seq != 0 {
		m.Header.Set(hdrHint, strconv.FormatUint(evs[0].Seq, 10))
	}
	m.Header.Set(hdrOffset, strconv.FormatUint(evs[0].Offset, 10))
	m.Header.Set(hdrCount, strconv.Itoa(n))
	m.Header.Set(hdrWriter, writer)
	if note != "" {
		m.Header.Set(hdrNote, note)
	}
	return m
}

// bodies recycles the bodies of published messages: a writer's every
// message would otherwise be a new allocation of up to a frame.
var bodies bodyPool

type bodyPool struct{ p sync.Pool }

func (b *bodyPool) get(size int) []byte {
	if v, ok := b.p.Get().(*[]byte); ok && cap(*v) >= size {
		return (*v)[:0]
	}
	return make([]byte, 0, max(size, 4<<10))
}

// release gives m's body back once nothing refers to it: nats.go copies
// a message into its connection's buffer as it publishes it, so after
// PublishMsg returned (whatever it answered) the body is the caller's.
func (b *bodyPool) release(m *nats.Msg) {
	if cap(m.Data) > maxFrame+frameRoom {
		return // an event larger than a frame: not kept
	}
	d := m.Data[:0]
	m.Data = nil
	b.p.Put(&d)
}

// frame is one decoded message.
type frame struct {
	events []Event // at least one; the end marker, if any, last
	writer string  // "" in the format before frames
	seq    uint64  // the message's stream sequence
	note   string  // hdrNote's value; "" when it has none
}

// last is the offset of the frame's last event (or end marker).
func (f frame) last() uint64 { return f.events[len(f.events)-1].Offset }

// decode reads a stored message; ok is false for anything that is not a
// well-formed frame (or single event). Data slices alias data.
func decode(h nats.Header, data []byte, seq uint64) (f frame, ok bool) {
	return decodeFrom(h, data, seq, 0)
}

// decodeFrom is decode keeping only the events from offset from on, the
// message's last event and its end marker: a resume into a message packed
// with thousands of events makes none of the ones before its cursor.
func decodeFrom(h nats.Header, data []byte, seq, from uint64) (f frame, ok bool) {
	off, err := strconv.ParseUint(h.Get(hdrOffset), 10, 64)
	if err != nil || off == 0 {
		return frame{}, false
	}
	end := h.Get(hdrEnd)
	count := h.Get(hdrCount)
	if count == "" {
		return frame{events: []Event{{Offset: off, Seq: seq, Type: h.Get(hdrType), Data: data, End: end}}, seq: seq}, true
	}
	msgSeq := seq
	if v := h.Get(hdrHint); v != "" {
		hint, err := strconv.ParseUint(v, 10, 64)
		if err != nil || hint == 0 || hint > seq { // == seq: startHint on a new stream's first message
			return frame{}, false
		}
		seq = hint
	}
	n, err := strconv.ParseUint(count, 10, 64)
	// Every packed event takes at least two bytes; offsets must not wrap.
	if err != nil || n > uint64(len(data))/2 {
		return frame{}, false
	}
	elems := n
	if end != "" {
		elems++
	}
	if elems == 0 || off-1 > math.MaxUint64-elems {
		return frame{}, false
	}
	skip := uint64(0)
	if from > off && n > 0 {
		skip = min(from-off, n-1) // the last is kept: a reader past a failed end gets it (the reason)
	}
	evs := make([]Event, 0, n-skip+1)
	for i := range n {
		typ, rest, ok := field(data)
		if !ok {
			return frame{}, false
		}
		val, rest, ok := field(rest)
		if !ok {
			return frame{}, false
		}
		if i >= skip {
			evs = append(evs, Event{Offset: off + i, Seq: seq, Type: string(typ), Data: val})
		}
		data = rest
	}
	if len(data) != 0 {
		return frame{}, false
	}
	if end != "" {
		evs = append(evs, Event{Offset: off + n, Seq: seq, End: end})
	}
	return frame{events: evs, writer: h.Get(hdrWriter), seq: msgSeq, note: h.Get(hdrNote)}, true
}

// field reads one length-prefixed field.
func field(b []byte) (val, rest []byte, ok bool) {
	l, k := binary.Uvarint(b)
	if k <= 0 || l > uint64(len(b)-k) {
		return nil, nil, false
	}
	b = b[k:]
	return b[:l:l], b[l:], true
}
