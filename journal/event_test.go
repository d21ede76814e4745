package journal

import (
	"bytes"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
)

// FuzzEventFrom: eventFrom never panics, accepts exactly the positive
// decimal offsets, and reads back every event msg writes.
func FuzzEventFrom(f *testing.F) {
	f.Add("1", "message", "", []byte("data"), uint64(7))
	f.Add("3", "", "completed", []byte{}, uint64(1))
	f.Add("0", "", "", []byte(nil), uint64(0))
	f.Add("", "t", "", []byte("x"), uint64(2))
	f.Add("-1", "t", "failed", []byte("x"), uint64(2))
	f.Add("18446744073709551616", "", "", []byte("x"), uint64(2))
	f.Fuzz(func(t *testing.T, off, typ, end string, data []byte, seq uint64) {
		h := nats.Header{}
		h.Set(hdrOffset, off)
		h.Set(hdrType, typ)
		h.Set(hdrEnd, end)
		ev, ok := eventFrom(h, data, seq)
		n, err := strconv.ParseUint(off, 10, 64)
		if want := err == nil && n > 0; ok != want {
			t.Fatalf("eventFrom with offset %q: ok %t, want %t", off, ok, want)
		}
		if !ok {
			return
		}
		if ev.Offset != n || ev.Seq != seq || ev.Type != typ || ev.End != end || !bytes.Equal(ev.Data, data) {
			t.Fatalf("eventFrom = %+v", ev)
		}

		in := Event{Offset: n, Type: typ, Data: data, End: end}
		m := in.msg("reprise.ev.x.1")
		out, ok := eventFrom(m.Header, m.Data, seq)
		if !ok || out.Offset != n || out.Seq != seq || out.Type != typ || out.End != end || !bytes.Equal(out.Data, data) || out.IsEnd() != (end != "") {
			t.Fatalf("msg/eventFrom round trip: %+v -> %+v (ok %t)", in, out, ok)
		}
	})
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
