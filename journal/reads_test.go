package journal_test

import (
	"bytes"
	"testing"

	"github.com/reprise-dev/reprise/journal"
)

// TestShortReadsTakeTheirConnection: with Config.ShortReads, a short
// replay's gets go over that connection and none over the journal's; a
// long replay's gets past its first go over the journal's. (On one
// connection the short ones' replies queue behind the long ones'.)
func TestShortReadsTakeTheirConnection(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc, sc := connect(t, srv), connect(t, srv)
	j := openJournal(t, nc, journal.Config{Memory: true, ShortReads: sc})
	ctx := waitCtx(t, waitTimeout)

	short := journal.Ref{ID: "short", Gen: 1}
	writeGen(t, j, short, 10, journal.EndCompleted)
	long := journal.Ref{ID: "long", Gen: 1}
	w := j.NewWriter(long, func(journal.Event) {})
	for range 200 { // 3.2 MiB in several messages: far past what a short read may have left
		if err := w.Append(ctx, "", bytes.Repeat([]byte("x"), 16<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}

	// replay reads ref to its end marker and returns how many messages
	// each connection received meanwhile.
	replay := func(ref journal.Ref, events int) (onJournal, onShort uint64) {
		t.Helper()
		n0, s0 := nc.Stats().InMsgs, sc.Stats().InMsgs
		r, err := j.Read(ctx, ref, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		readN(t, r, events)
		if ev := readN(t, r, 1)[0]; !ev.IsEnd() {
			t.Fatalf("after %d events: %+v, want the end marker", events, ev)
		}
		return nc.Stats().InMsgs - n0, sc.Stats().InMsgs - s0
	}
	if onJournal, onShort := replay(short, 10); onJournal != 0 || onShort == 0 {
		t.Errorf("a short replay's gets brought %d messages over the journal's connection and %d over the short reads', want 0 and some", onJournal, onShort)
	}
	if onJournal, onShort := replay(long, 200); onJournal == 0 || onShort == 0 {
		t.Errorf("a long replay's gets brought %d messages over the journal's connection and %d over the short reads', want some and some (its first)", onJournal, onShort)
	}
}

// TestShortReplayInOneGet: a replay from the start of a generation
// shorter than a short read takes one batched get (a round trip), not a
// first one for its first message and a second for the rest.
func TestShortReplayInOneGet(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc, sc := connect(t, srv), connect(t, srv)
	j := openJournal(t, nc, journal.Config{Memory: true, ShortReads: sc, Linger: -1, LingerAlone: -1})
	ref := journal.Ref{ID: "small", Gen: 1}
	ctx := waitCtx(t, waitTimeout)
	stored := make(chan journal.Event, 64)
	w := j.NewWriter(ref, func(ev journal.Event) { stored <- ev })
	for i := range 50 {
		if err := w.Append(ctx, "", []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 { // several messages: the next is appended once these are stored
			for range 10 {
				<-stored
			}
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	messages := storedCount(t, nc, ref)
	if messages < 5 {
		t.Fatalf("the generation is %d messages, want at least 5", messages)
	}
	s0 := sc.Stats().InMsgs
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	readN(t, r, 51) // the events and the end marker
	// Each get brings its messages and the end of its batch.
	if got := sc.Stats().InMsgs - s0; got != messages+1 {
		t.Errorf("the replay of %d messages received %d: %d gets, want 1", messages, got, got-messages)
	}
}
