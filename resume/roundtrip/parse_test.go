package roundtrip

import (
	"bytes"
	"testing"
	"time"
)

func TestParser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		events int
		lastID string
		final  bool // of the last event
		retry  time.Duration
	}{
		{"chat chunk", "retry: 1000\nid: a\ndata: {\"choices\":[]}\n\n", 1, "a", false, time.Second},
		{"chat done", "id: b\ndata: [DONE]\n\n", 1, "b", true, 0},
		{"done with a type is not chat's", "event: x\ndata: [DONE]\n\n", 1, "", false, 0},
		{"responses completed", "event: response.completed\nid: c\ndata: {}\n\n", 1, "c", true, 0},
		{"terminal by data type", "data: {\"type\":\"message_stop\"}\n\n", 1, "", true, 0},
		{"speech done", "data: {\"type\":\"speech.audio.done\"}\r\n\r\n", 1, "", true, 0},
		{"error with id ends", "event: error\nid: d\ndata: {}\n\n", 1, "d", true, 0},
		{"error without id does not", "event: error\ndata: {}\n\n", 1, "", false, 0},
		{"CR line ends", "id: e\rdata: x\r\r:", 1, "e", false, 0},
		{"comment only", ": ping\n\n", 1, "", false, 0},
		{"unfinished event", "id: f\ndata: x\n", 0, "", false, 0},
		{"CR at the end waits", "data: x\n\r", 0, "", false, 0},
		{"two events", "id: 1\ndata: a\n\nid: 2\ndata: b\n\n", 2, "2", false, 0},
		{"bad retry ignored", "retry: soon\ndata: a\n\n", 1, "", false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var p parser
			evs := p.push([]byte(tc.in))
			if len(evs) != tc.events {
				t.Fatalf("%d events, want %d", len(evs), tc.events)
			}
			if p.lastID != tc.lastID {
				t.Errorf("lastID %q, want %q", p.lastID, tc.lastID)
			}
			if len(evs) == 0 {
				return
			}
			last := evs[len(evs)-1]
			if last.final != tc.final {
				t.Errorf("final %v, want %v", last.final, tc.final)
			}
			if evs[0].retry != tc.retry {
				t.Errorf("retry %v, want %v", evs[0].retry, tc.retry)
			}
			var all []byte
			for _, ev := range evs {
				all = append(all, ev.raw...)
			}
			if !bytes.HasPrefix([]byte(tc.in), all) {
				t.Errorf("raw %q is not a prefix of the input", all)
			}
		})
	}
}

// TestParserDropPartial: the bytes of a cut event are forgotten, and the
// next stream's events come whole.
func TestParserDropPartial(t *testing.T) {
	t.Parallel()
	var p parser
	p.push([]byte("id: 1\ndata: a\n\nid: 2\nda"))
	p.dropPartial()
	evs := p.push([]byte("id: 2\ndata: b\n\n"))
	if len(evs) != 1 || string(evs[0].raw) != "id: 2\ndata: b\n\n" || p.lastID != "2" {
		t.Fatalf("after a drop: %+v, lastID %q", evs, p.lastID)
	}
}

// FuzzParser: however the bytes are split, the events are the same and
// their raw bytes are the input's, in order, up to the last whole event.
func FuzzParser(f *testing.F) {
	for _, s := range []string{
		"id: a\ndata: x\n\n", "retry: 10\r\ndata: [DONE]\r\n\r\n", "event: error\rdata: {}\r\r", ": c\n\nid\n\n", "data: {\"type\":\"message_stop\"}\n\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, step uint8) {
		var whole parser
		want := whole.push(in)
		var split parser
		var got []event
		n := int(step%16) + 1
		for i := 0; i < len(in); i += n {
			got = append(got, split.push(in[i:min(i+n, len(in))])...)
		}
		if len(got) != len(want) {
			t.Fatalf("%d events split every %d bytes, %d whole", len(got), n, len(want))
		}
		var all []byte
		for i := range got {
			if !bytes.Equal(got[i].raw, want[i].raw) || got[i].final != want[i].final || got[i].typ != want[i].typ {
				t.Fatalf("event %d: %+v split, %+v whole", i, got[i], want[i])
			}
			all = append(all, got[i].raw...)
		}
		if !bytes.HasPrefix(in, all) {
			t.Fatalf("events %q are not the input's start", all)
		}
		if split.lastID != whole.lastID {
			t.Fatalf("lastID %q split, %q whole", split.lastID, whole.lastID)
		}
	})
}
