package journal

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// liveMessages subscribes to subject's live messages on j's connection.
// A message the test publishes on the same connection after the writer's
// arrives after them (one connection's messages keep their order), so
// sentinel tells when everything published before it has come.
func liveMessages(t *testing.T, j *Journal, subject string) (msgs <-chan *nats.Msg, sentinel func()) {
	t.Helper()
	live := livePrefix + strings.TrimPrefix(subject, subjectPrefix)
	ch := make(chan *nats.Msg, 64)
	sub, err := j.nc.ChanSubscribe(live, ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := j.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch, func() {
		m := nats.NewMsg(live)
		m.Header.Set("Sentinel", "1")
		if err := j.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
}

// until returns the live messages that came before the sentinel.
func until(t *testing.T, msgs <-chan *nats.Msg) []*nats.Msg {
	t.Helper()
	var got []*nats.Msg
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-msgs:
			if m.Header.Get("Sentinel") != "" {
				return got
			}
			got = append(got, m)
		case <-timeout:
			t.Fatal("the sentinel did not come back")
		}
	}
}

// storedThrough waits until w stored offset n.
func storedThrough(t *testing.T, w *Writer, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.Stored() < n {
		if time.Now().After(deadline) {
			t.Fatalf("stored through %d, want %d", w.Stored(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func seqHeaders(t *testing.T, m *nats.Msg) (seq, prev uint64) {
	t.Helper()
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		t.Fatalf("live message without its sequence: %v", m.Header)
	}
	prev, err = strconv.ParseUint(m.Header.Get(lastSequenceHeader), 10, 64)
	if err != nil {
		t.Fatalf("live message without its previous sequence: %v", m.Header)
	}
	return seq, prev
}

// TestStoredPublishedLiveOnlyWhileWatched: the stream republishes nothing;
// a writer publishes what it stores on the live subject only while a watch
// holds it, each message with its sequence and its subject's previous one,
// and its events as stored. The watch that finds it unwatched announces
// the last message stored, which links no reader's position.
func TestStoredPublishedLiveOnlyWhileWatched(t *testing.T) {
	j := newTestJournal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := j.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.RePublish != nil {
		t.Fatalf("the stream republishes: %+v", info.Config.RePublish)
	}
	ref := Ref{ID: "livewatch", Gen: 1}
	msgs, sentinel := liveMessages(t, j, ref.subject())
	w := j.NewWriter(ref, func(Event) {})
	defer w.Abort()

	// Unwatched: stored, published to nobody.
	if err := w.Append(ctx, "", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, "", []byte("b")); err != nil {
		t.Fatal(err)
	}
	storedThrough(t, w, 2) // Append queues; the flusher stores
	sentinel()
	if got := until(t, msgs); len(got) != 0 {
		t.Fatalf("%d live messages while nobody watched, want none", len(got))
	}
	lastUnwatched := w.storedSeq.Load()
	if lastUnwatched == 0 {
		t.Fatal("the writer knows no stored message")
	}

	// The first watch announces the last message stored: its sequence as
	// its own previous one, no events.
	w.watched(time.Now().Add(time.Minute))
	sentinel()
	got := until(t, msgs)
	if len(got) != 1 {
		t.Fatalf("%d live messages after the first watch, want the announcement", len(got))
	}
	if seq, prev := seqHeaders(t, got[0]); seq != lastUnwatched || prev != seq || len(got[0].Data) != 0 {
		t.Fatalf("announcement: seq %d prev %d, %d bytes; want seq %d as its own previous, no data", seq, prev, len(got[0].Data), lastUnwatched)
	}
	w.watched(time.Now().Add(time.Minute)) // still watched: nothing to announce
	sentinel()
	if got := until(t, msgs); len(got) != 0 {
		t.Fatalf("%d live messages after a watch of a watched writer, want none", len(got))
	}

	// Watched: every stored message (one or two: the end marker may share
	// the event's), chained, with its events.
	if err := w.Append(ctx, "t", []byte("c")); err != nil {
		t.Fatal(err)
	}
	if err := w.End(ctx, EndCompleted); err != nil {
		t.Fatal(err)
	}
	sentinel()
	got = until(t, msgs)
	if len(got) == 0 {
		t.Fatal("no live message for what was stored while watched")
	}
	prevWant := lastUnwatched
	var evs []Event
	for _, m := range got {
		seq, prev := seqHeaders(t, m)
		if prev != prevWant || seq <= prev {
			t.Fatalf("live message seq %d after %d, want after %d", seq, prev, prevWant)
		}
		prevWant = seq
		f, ok := decode(m.Header, m.Data, seq)
		if !ok {
			t.Fatalf("live message %d is no frame: %v", seq, m.Header)
		}
		evs = append(evs, f.events...)
	}
	if len(evs) != 2 || string(evs[0].Data) != "c" || evs[0].Type != "t" || evs[0].Offset != 3 || evs[1].End != EndCompleted {
		t.Fatalf("live events %+v, want c (offset 3) and the end marker", evs)
	}
	if prevWant != w.storedSeq.Load() {
		t.Fatalf("last live sequence %d, the writer stored %d", prevWant, w.storedSeq.Load())
	}
}

// TestSealPublishedLive: a seal's message reaches the generation's live
// readers at once, whoever watches: the instance that seals does not know.
func TestSealPublishedLive(t *testing.T) {
	j := newTestJournal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := Ref{ID: "sealedlive", Gen: 1}
	msgs, sentinel := liveMessages(t, j, ref.subject())
	w := j.NewWriter(ref, func(Event) {})
	if err := w.Append(ctx, "", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, "", []byte("b")); err != nil {
		t.Fatal(err)
	}
	storedThrough(t, w, 2)
	w.Abort()
	stored := w.storedSeq.Load()
	end, sealed, err := j.Seal(ctx, ref, func(Event, bool) []Event { return []Event{{End: EndFailed}} })
	if err != nil || !sealed {
		t.Fatalf("seal: %v, sealed %v", err, sealed)
	}
	sentinel()
	got := until(t, msgs)
	if len(got) != 1 {
		t.Fatalf("%d live messages after a seal, want 1", len(got))
	}
	seq, prev := seqHeaders(t, got[0])
	if seq != end.Seq || prev != stored {
		t.Fatalf("seal's live message: seq %d after %d, want %d after %d", seq, prev, end.Seq, stored)
	}
}

// TestOpenDropsRePublish: a stream made by a version that had JetStream
// republish every message loses that on Open.
func TestOpenDropsRePublish(t *testing.T) {
	nc := newTestConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Memory: true}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: cfg.Stream, Subjects: []string{subjectPrefix + ">", attemptPrefix + ">"}, Storage: jetstream.MemoryStorage,
		MaxAge: cfg.TTL, Duplicates: time.Second, AllowDirect: true,
		RePublish: &jetstream.RePublish{Source: subjectPrefix + ">", Destination: livePrefix + ">"},
	}); err != nil {
		t.Fatal(err)
	}
	j, err := Open(ctx, nc, Config{Memory: true})
	if err != nil {
		t.Fatal(err)
	}
	info, err := j.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.RePublish != nil {
		t.Fatalf("the stream still republishes after Open: %+v", info.Config.RePublish)
	}
}
