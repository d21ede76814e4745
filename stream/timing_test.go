package stream

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/journal"
)

// recordingWriter is an eventWriter that notes what was done to it.
type recordingWriter struct{ did []string }

func (w *recordingWriter) send(id string, _ journal.Event) error {
	w.did = append(w.did, "send "+id)
	return nil
}
func (w *recordingWriter) reset(string, uint64) error { w.did = append(w.did, "reset"); return nil }
func (w *recordingWriter) ping() error                { w.did = append(w.did, "ping"); return nil }
func (w *recordingWriter) flush() error               { w.did = append(w.did, "flush"); return nil }

// TestThenFlushedRunsAfterTheFirstFlush: what a resume asks to run once its
// client got its first event (the count of what it saved) runs after the
// first flush, not at the first send, and once.
func TestThenFlushedRunsAfterTheFirstFlush(t *testing.T) {
	s := &Server{}
	r := withLifecycle(httptest.NewRequest("POST", "/v1/chat/completions", nil), &lifecycle{at: time.Now()}) // not timed: neither a GET nor a start
	inner := &recordingWriter{}
	ran := 0
	thenFlushed(r, func() {
		ran++
		inner.did = append(inner.did, "then")
	})
	out := s.timed(r)(inner)
	_ = out.send("1-1-1", journal.Event{})
	if ran != 0 {
		t.Fatal("ran at the first send, before its flush")
	}
	_ = out.flush()
	_ = out.send("1-2-1", journal.Event{})
	_ = out.flush()
	want := []string{"send 1-1-1", "flush", "then", "send 1-2-1", "flush"}
	if ran != 1 || len(inner.did) != len(want) {
		t.Fatalf("ran %d times; did %q, want %q", ran, inner.did, want)
	}
	for i := range want {
		if inner.did[i] != want[i] {
			t.Fatalf("did %q, want %q", inner.did, want)
		}
	}
}
