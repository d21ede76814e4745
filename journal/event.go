package journal

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// End states carried by the end marker of a generation.
const (
	EndCompleted = "completed"
	EndFailed    = "failed"
)

const (
	hdrOffset = "Reprise-Off"
	hdrType   = "Reprise-Type"
	hdrEnd    = "Reprise-End"
)

// Event is one journaled upstream event, or a generation's end marker.
type Event struct {
	// Offset is the 1-based position of the event within its generation.
	// The end marker takes the offset after the last event.
	Offset uint64
	// Seq is the JetStream stream sequence; 0 until the append is acknowledged.
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

func (e Event) msg(subject string) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = e.Data
	m.Header.Set(hdrOffset, strconv.FormatUint(e.Offset, 10))
	if e.Type != "" {
		m.Header.Set(hdrType, e.Type)
	}
	if e.End != "" {
		m.Header.Set(hdrEnd, e.End)
	}
	return m
}

func eventFrom(h nats.Header, data []byte, seq uint64) (Event, bool) {
	off, err := strconv.ParseUint(h.Get(hdrOffset), 10, 64)
	if err != nil || off == 0 {
		return Event{}, false
	}
	return Event{Offset: off, Seq: seq, Type: h.Get(hdrType), Data: data, End: h.Get(hdrEnd)}, true
}
