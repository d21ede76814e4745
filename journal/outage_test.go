package journal_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reprise-dev/reprise/journal"
)

// holdLink is a TCP relay to a NATS server that can hold every byte both
// ways (nothing lost, nothing passed) and let it go again: the server, as a
// client sees it when its process is stopped (SIGSTOP) for as long as the
// test likes.
type holdLink struct {
	ln net.Listener

	mu   sync.Mutex
	held bool
	free *sync.Cond
}

func newHoldLink(t *testing.T, target string) *holdLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &holdLink{ln: ln}
	h.free = sync.NewCond(&h.mu)
	t.Cleanup(func() { h.release(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go h.pipe(c, s)
			go h.pipe(s, c)
		}
	}()
	return h
}

func (h *holdLink) url() string { return "nats://" + h.ln.Addr().String() }

// pipe copies from src to dst, each chunk once the link is not held.
func (h *holdLink) pipe(src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			h.mu.Lock()
			for h.held {
				h.free.Wait()
			}
			h.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (h *holdLink) hold() {
	h.mu.Lock()
	h.held = true
	h.mu.Unlock()
}

func (h *holdLink) release() {
	h.mu.Lock()
	h.held = false
	h.mu.Unlock()
	h.free.Broadcast()
}

// heldJournal is a journal whose NATS connection goes through a holdLink.
func heldJournal(t *testing.T, appendTimeout time.Duration) (*journal.Journal, *holdLink) {
	t.Helper()
	e, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	link := newHoldLink(t, e.Server.Addr().String())
	nc, err := nats.Connect(link.url(), append([]nats.Option{nats.Name(t.Name())}, journal.ConnectOptions()...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := journal.Open(ctx, nc, journal.Config{Memory: true, AppendTimeout: appendTimeout})
	if err != nil {
		t.Fatal(err)
	}
	return j, link
}

// stored reads ref's generation whole, the end marker included.
func storedEvents(t *testing.T, j *journal.Journal, ref journal.Ref) []journal.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rd, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var out []journal.Event
	for {
		ev, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("reading %v after %d events: %v", ref, len(out), err)
		}
		out = append(out, ev)
		if ev.IsEnd() {
			return out
		}
	}
}

// TestWriterStallsThroughAnOutage: NATS stops answering for longer than the
// append timeout while a generation is written. The writer stalls (Stalled;
// Append refuses with ErrStalled), takes the events that end the generation
// (AppendFinal, End), and once NATS answers again stores everything it was
// given, in order, each event at the offset it handed out: no hole, no event
// lost or replaced, whatever the outage's length (the 45 s pause
// past a 30 s timeout ended with events shown and never stored, and their
// ids naming the break's error).
func TestWriterStallsThroughAnOutage(t *testing.T) {
	j, link := heldJournal(t, 500*time.Millisecond)
	ref := journal.Ref{ID: "outage", Gen: 1}
	var sunk []journal.Event
	var mu sync.Mutex
	w := j.NewWriter(ref, func(ev journal.Event) { mu.Lock(); sunk = append(sunk, ev); mu.Unlock() })
	defer w.Abort()
	ctx := context.Background()
	if err := w.Append(ctx, "chunk", []byte("0")); err != nil {
		t.Fatal(err) // the fence, stored
	}
	link.hold()
	var shown []uint64
	for i := 1; i <= 20; i++ {
		if err := w.AppendShown(ctx, "chunk", fmt.Appendf(nil, "%d", i), func(ev journal.Event) { shown = append(shown, ev.Offset) }); err != nil {
			t.Fatalf("append %d while NATS is held (not yet stalled): %v", i, err)
		}
	}
	select {
	case <-w.Stalled():
	case <-time.After(time.Minute):
		t.Fatal("the writer did not stall with NATS held past its append timeout")
	}
	if err := w.Append(ctx, "chunk", []byte("late")); !errors.Is(err, journal.ErrStalled) {
		t.Fatalf("append after the stall: %v, want ErrStalled", err)
	}
	if err := w.AppendFinal(ctx, "error", []byte("journal_failure")); err != nil {
		t.Fatalf("the failure's event after the stall: %v", err)
	}
	ended := make(chan error, 1)
	go func() { ended <- w.End(ctx, journal.EndFailed) }()
	select {
	case err := <-ended:
		t.Fatalf("End returned while NATS was held: %v", err)
	default:
	}
	link.release()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("End after NATS answered again: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("End did not return once NATS answered again")
	}
	evs := storedEvents(t, j, ref)
	if len(evs) != 23 {
		t.Fatalf("stored %d events, want 23 (the fence, 20 chunks, the error, the end marker): %+v", len(evs), evs)
	}
	for i, ev := range evs {
		if ev.Offset != uint64(i+1) {
			t.Fatalf("event %d stored at offset %d", i, ev.Offset)
		}
		if i >= 1 && i <= 20 && string(ev.Data) != fmt.Sprint(i) {
			t.Fatalf("offset %d holds %q, want %q: the event handed out under it", ev.Offset, ev.Data, fmt.Sprint(i))
		}
	}
	if evs[21].Type != "error" || evs[22].End != journal.EndFailed {
		t.Fatalf("the generation ends with %+v, %+v; want the error, then the failed end marker", evs[21], evs[22])
	}
	for _, off := range shown {
		if string(evs[off-1].Data) != fmt.Sprint(off-1) {
			t.Fatalf("offset %d was shown before it was stored, and holds %q", off, evs[off-1].Data)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sunk) != 23 {
		t.Fatalf("the sink got %d events, want all 23 once stored", len(sunk))
	}
}

// TestWriterFenceStallsThroughAnOutage: a generation's first event, its
// fence, meets the outage: Append answers ErrStalled after the append
// timeout instead of waiting on, and the fence, the error and the end
// marker appended after it are stored once NATS answers again.
func TestWriterFenceStallsThroughAnOutage(t *testing.T) {
	j, link := heldJournal(t, 500*time.Millisecond)
	ref := journal.Ref{ID: "outage-fence", Gen: 1}
	w := j.NewWriter(ref, func(journal.Event) {})
	defer w.Abort()
	ctx := context.Background()
	link.hold()
	if err := w.Append(ctx, "chunk", []byte("fence")); !errors.Is(err, journal.ErrStalled) {
		t.Fatalf("the fence with NATS held: %v, want ErrStalled", err)
	}
	if err := w.AppendFinal(ctx, "error", []byte("journal_failure")); err != nil {
		t.Fatal(err)
	}
	link.release()
	ectx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.End(ectx, journal.EndFailed); err != nil {
		t.Fatalf("End once NATS answers: %v", err)
	}
	evs := storedEvents(t, j, ref)
	if len(evs) != 3 || string(evs[0].Data) != "fence" || evs[1].Type != "error" || evs[2].End != journal.EndFailed {
		t.Fatalf("stored %+v; want the fence, the error, the end marker", evs)
	}
}
