package journal

import (
	"bytes"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzDecode: decode never panics; what it accepts is a run of events at
// contiguous offsets from Reprise-Off, the end marker only last, every
// event with the message's sequence or, when the frame names one, its
// hint (a sequence at or before the message's); decodeFrom keeps the events
// from its offset on, the last event and the end marker; and encode then
// decode gives back the same events.
func FuzzDecode(f *testing.F) {
	f.Add("1", "2", "", "", []byte("\x01t\x01a\x00\x00"), uint64(7))
	f.Add("3", "0", "completed", "", []byte{}, uint64(1))
	f.Add("5", "", "completed", "", []byte{}, uint64(42)) // the format before frames
	f.Add("1", "", "", "", []byte("data"), uint64(2))
	f.Add("0", "1", "", "", []byte("\x00\x00"), uint64(0))
	f.Add("-1", "1", "failed", "", []byte("\x00\x00"), uint64(2))
	f.Add("18446744073709551615", "1", "failed", "", []byte("\x00\x00"), uint64(2))
	f.Add("2", "1", "", "", []byte("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), uint64(2))
	f.Add("2", "99999999999", "", "", []byte("\x00\x00"), uint64(2))
	f.Add("4", "2", "completed", "3", []byte("\x01t\x01a\x00\x00"), uint64(9)) // a hint
	f.Add("4", "1", "", "10", []byte("\x00\x00"), uint64(9))                   // a hint past the message
	f.Add("1", "1", "", "1", []byte("\x00\x00"), uint64(1))                    // startHint in a new stream's first message
	f.Add("4", "1", "", "0", []byte("\x00\x00"), uint64(9))
	f.Fuzz(func(t *testing.T, off, count, end, hint string, data []byte, seq uint64) {
		h := nats.Header{}
		h.Set(hdrOffset, off)
		if count != "" {
			h.Set(hdrCount, count)
		}
		if end != "" {
			h.Set(hdrEnd, end)
		}
		if hint != "" {
			h.Set(hdrHint, hint)
		}
		fr, ok := decode(h, data, seq)
		if !ok {
			return
		}
		first, err := strconv.ParseUint(off, 10, 64)
		if err != nil || first == 0 || len(fr.events) == 0 {
			t.Fatalf("decode accepted offset %q with %d events", off, len(fr.events))
		}
		wantSeq := seq
		if count != "" && hint != "" {
			if wantSeq, err = strconv.ParseUint(hint, 10, 64); err != nil || wantSeq == 0 || wantSeq > seq {
				t.Fatalf("decode accepted the hint %q for message %d", hint, seq)
			}
		}
		if fr.seq != seq {
			t.Fatalf("frame seq %d, the message's is %d", fr.seq, seq)
		}
		for i, ev := range fr.events {
			if ev.Offset != first+uint64(i) || ev.Seq != wantSeq || ev.IsEnd() != (end != "" && i == len(fr.events)-1) {
				t.Fatalf("event %d = %+v (offset %q, end %q)", i, ev, off, end)
			}
			if ev.IsEnd() && (ev.End != end || ev.Type != "" || len(ev.Data) != 0 && count != "") {
				t.Fatalf("end marker = %+v", ev)
			}
		}
		// From an offset in or around the frame: the events from there on,
		// the last event and the end marker, as decode has them.
		if count != "" {
			from := first - 1 + seq%uint64(len(fr.events)+2)
			part, ok := decodeFrom(h, data, seq, from)
			var want []Event
			for i, ev := range fr.events {
				last := i == len(fr.events)-1 || i == len(fr.events)-2 && fr.events[i+1].IsEnd()
				if ev.Offset >= from || last || ev.IsEnd() {
					want = append(want, ev)
				}
			}
			if !ok || !slices.EqualFunc(part.events, want, func(a, b Event) bool {
				return a.Offset == b.Offset && a.Type == b.Type && bytes.Equal(a.Data, b.Data) && a.End == b.End && a.Seq == b.Seq
			}) {
				t.Fatalf("decodeFrom %d: %+v, want %+v", from, part.events, want)
			}
		}
		evs := slices.Clone(fr.events)
		for i := range evs {
			if wantSeq == seq { // no hint: the writer sends events with none
				evs[i].Seq = 0
			}
		}
		m := encode("reprise.ev.x.1", "w", evs, "")
		back, ok := decode(m.Header, m.Data, seq)
		if !ok || back.writer != "w" || len(back.events) != len(fr.events) {
			t.Fatalf("encode/decode: %+v -> %+v (ok %t)", fr.events, back.events, ok)
		}
		for i, ev := range back.events {
			want := fr.events[i]
			if want.IsEnd() {
				want.Data = nil // the format before frames kept a body on the end marker
			}
			if ev.Offset != want.Offset || ev.Seq != want.Seq || ev.Type != want.Type || ev.End != want.End || !bytes.Equal(ev.Data, want.Data) {
				t.Fatalf("encode/decode event %d: %+v, want %+v", i, ev, want)
			}
		}
	})
}

// TestDecodeRejects: broken frames are not events.
func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name, off, count, end string
		data                  string
	}{
		{"no offset", "", "1", "", "\x00\x00"},
		{"zero offset", "0", "1", "", "\x00\x00"},
		{"bad count", "1", "x", "", "\x00\x00"},
		{"empty frame", "1", "0", "", ""},
		{"count above the body", "1", "2", "", "\x00\x00"},
		{"short field", "1", "1", "", "\x05ab\x00"},
		{"trailing bytes", "1", "1", "", "\x00\x00\x00"},
		{"offset wraps", "18446744073709551615", "1", "completed", "\x00\x00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := nats.Header{}
			h.Set(hdrOffset, tc.off)
			h.Set(hdrCount, tc.count)
			if tc.end != "" {
				h.Set(hdrEnd, tc.end)
			}
			if f, ok := decode(h, []byte(tc.data), 1); ok {
				t.Fatalf("decode accepted it: %+v", f.events)
			}
		})
	}
}

func TestRefSubject(t *testing.T) {
	tests := []struct {
		name string
		ref  Ref
		want string
	}{
		{"first generation", Ref{ID: "abc", Gen: 1}, "reprise.ev.abc.1"},
		{"large generation", Ref{ID: "0f_A-", Gen: 18446744073709551615}, "reprise.ev.0f_A-.18446744073709551615"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ref.subject(); got != tc.want {
				t.Fatalf("subject() = %q, want %q", got, tc.want)
			}
		})
	}
}
