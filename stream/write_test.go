package stream

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
)

// TestSSEWriterEventWithoutID: an event sent without a position (a reader's
// transient journal error) has no id line, so the client's Last-Event-ID
// stays on the last real event; others carry theirs.
func TestSSEWriterEventWithoutID(t *testing.T) {
	rec := httptest.NewRecorder()
	w, err := newSSEWriter(rec, httptest.NewRequest("GET", "/v1/streams/k", nil), time.Second, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.send("1-3-3", journal.Event{Offset: 3, Data: []byte("real")}); err != nil {
		t.Fatal(err)
	}
	if err := w.send("", journal.Event{Offset: 4, Type: engine.TypeError, Data: apierr.New(apierr.Unavailable).Body()}); err != nil {
		t.Fatal(err)
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	body := rec.Body.String()
	if strings.Count(body, "id:") != 1 || !strings.Contains(body, "id: 1-3-3\n") {
		t.Fatalf("want exactly one id line, for the real event:\n%s", body)
	}
	if i := strings.Index(body, "event: error"); i < 0 || !strings.Contains(body[i:], "journal_unavailable") {
		t.Fatalf("the error event is missing:\n%s", body)
	}
}

// TestSSEWriterData: every event has as many data lines as its data has
// lines — one for empty data, so that EventSource dispatches it, and an
// empty last one for data that ends with a newline.
func TestSSEWriterData(t *testing.T) {
	for _, tc := range []struct {
		typ, data, want string
	}{
		{"", "", "id: 1-1-1\ndata: \n\n"},
		{"keepalive", "", "id: 1-1-1\nevent: keepalive\ndata: \n\n"},
		{"", "a", "id: 1-1-1\ndata: a\n\n"},
		{"", "a\n", "id: 1-1-1\ndata: a\ndata: \n\n"},
		{"", "a\n\nb", "id: 1-1-1\ndata: a\ndata: \ndata: b\n\n"},
		{"", "\n", "id: 1-1-1\ndata: \ndata: \n\n"},
	} {
		rec := httptest.NewRecorder()
		w, err := newSSEWriter(rec, httptest.NewRequest("GET", "/v1/streams/k", nil), time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.send("1-1-1", journal.Event{Offset: 1, Type: tc.typ, Data: []byte(tc.data)}); err != nil {
			t.Fatal(err)
		}
		if err := w.flush(); err != nil {
			t.Fatal(err)
		}
		if got := rec.Body.String(); got != tc.want {
			t.Errorf("event %q %q: wrote %q, want %q", tc.typ, tc.data, got, tc.want)
		}
	}
}

// countingWriter is a ResponseRecorder that counts the writes reaching it.
type countingWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	return c.ResponseRecorder.Write(p)
}

// TestBatchWriter: an event stream served by net/http reaches it in writes
// of the batch buffer's size, not one per event, with the same bytes; a
// flush writes out the rest and gives the buffer back.
func TestBatchWriter(t *testing.T) {
	plain, counted := &countingWriter{ResponseRecorder: httptest.NewRecorder()}, &countingWriter{ResponseRecorder: httptest.NewRecorder()}
	bw := batched(counted)
	for _, w := range []http.ResponseWriter{plain, bw} {
		out, err := newSSEWriter(w, httptest.NewRequest("POST", "/v1/chat/completions", nil), time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 1000 {
			if err := out.send("1-"+strconv.Itoa(i+1)+"-1", journal.Event{Offset: uint64(i + 1), Data: []byte(strings.Repeat("x", 100))}); err != nil {
				t.Fatal(err)
			}
		}
		if err := out.flush(); err != nil {
			t.Fatal(err)
		}
	}
	size := plain.Body.Len()
	if counted.Body.String() != plain.Body.String() {
		t.Fatalf("the batched stream differs from the plain one (%d and %d bytes)", counted.Body.Len(), size)
	}
	if want := size/(32<<10) + 2; plain.writes < 1000 || counted.writes > want {
		t.Errorf("%d bytes in %d writes batched (want at most %d), %d plain", size, counted.writes, want, plain.writes)
	}
	if bw.buf != nil {
		t.Error("the flush kept the buffer")
	}
}
