package stream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/fair"
	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
)

// chanWriter is an eventWriter that hands every event sent to it over a
// channel, so a test can wait for them.
type chanWriter struct{ events chan journal.Event }

func newChanWriter() *chanWriter { return &chanWriter{events: make(chan journal.Event, 1024)} }

func (w *chanWriter) send(_ string, ev journal.Event) error { w.events <- ev; return nil }
func (w *chanWriter) reset(string, uint64) error            { return nil }
func (w *chanWriter) ping() error                           { return nil }
func (w *chanWriter) flush() error                          { return nil }

// turnsServer is a Server on a fresh journal whose replays have one turn,
// which never expires (the test holds it as long as it likes).
func turnsServer(t *testing.T) (*Server, *journal.Journal) {
	t.Helper()
	j := journaltest.New(t, journal.Config{})
	s, _ := benchServer(t, j)
	var err error
	if s.turns, err = fair.New(fair.Config{Turns: 1, Quantum: -1}); err != nil {
		t.Fatal(err)
	}
	return s, j
}

// appendEvents appends n chat chunks to w.
func appendEvents(ctx context.Context, t *testing.T, w *journal.Writer, n int) {
	t.Helper()
	for i := range n {
		if err := w.Append(ctx, "", fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// untilWaiting waits (10 s at most) until n streams wait for a turn of s's.
func untilWaiting(ctx context.Context, t *testing.T, s *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for s.turns.Waiting() != n {
		select {
		case <-ctx.Done():
			t.Fatalf("waited for %d streams waiting for a turn: %d are", n, s.turns.Waiting())
		case <-time.After(time.Millisecond):
		}
	}
}

// TestReplayWaitsForItsTurn: a replay of a stored generation writes no
// event before it has a turn; once the turn another tenant held is given
// back, it writes them all.
func TestReplayWaitsForItsTurn(t *testing.T) {
	s, j := turnsServer(t)
	ctx := benchCtx(t)
	ref := journal.Ref{ID: "fair-stored", Gen: 1}
	w := j.NewWriter(ref, func(journal.Event) {})
	appendEvents(ctx, t, w, 100)
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	bulk := s.turns.Stream("bulk")
	if err := bulk.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	out := newChanWriter()
	errc := make(chan error, 1)
	go func() { errc <- s.followJournal(ctx, out, "small", ref, apierr.OpenAI, 0, 0, "") }()
	untilWaiting(ctx, t, s, 1)
	if n := len(out.events); n > 0 {
		t.Fatalf("the replay wrote %d events without a turn", n)
	}
	bulk.Done()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if n := len(out.events); n != 100 {
		t.Errorf("the replay wrote %d events, want 100", n)
	}
}

// TestCaughtUpReaderTakesNoTurn: a reader that has caught up with a
// generation running elsewhere gets each new event while another tenant
// holds every turn: it follows live, and takes turns only for what was
// stored before it came. (Until the reader has joined the live topic, a
// new event is read from the store, in a turn: the test then gives the
// turn back and tries with the next event.)
func TestCaughtUpReaderTakesNoTurn(t *testing.T) {
	s, j := turnsServer(t)
	ctx := benchCtx(t)
	ref := journal.Ref{ID: "fair-live", Gen: 1}
	w := j.NewWriter(ref, func(journal.Event) {})
	appendEvents(ctx, t, w, 3)
	out := newChanWriter()
	errc := make(chan error, 1)
	go func() { errc <- s.followJournal(ctx, out, "small", ref, apierr.OpenAI, 0, 0, "") }()
	for range 3 {
		<-out.events
	}
	bulk := s.turns.Stream("bulk")
	live := false
	for try := 0; try < 5 && !live; try++ {
		if err := bulk.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		appendEvents(ctx, t, w, 1)
		waiting := time.NewTicker(time.Millisecond)
	wait:
		for {
			select {
			case <-out.events:
				live = true
				break wait
			case <-waiting.C:
				if s.turns.Waiting() == 1 { // read from the store: in a turn
					bulk.Done()
					<-out.events
					break wait
				}
			case <-ctx.Done():
				t.Fatal("the new event never came")
			}
		}
		waiting.Stop()
		if live {
			bulk.Done()
		}
	}
	if !live {
		t.Fatal("every new event waited for a turn: the reader took turns for what it followed live")
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
