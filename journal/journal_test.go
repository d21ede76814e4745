package journal_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

// startServer, connect and openJournal are journaltest's, which the
// packages above the journal use too.
var (
	startServer = journaltest.Server
	connect     = journaltest.Connect
	openJournal = journaltest.Open
)

// newJournal starts a fresh embedded server and opens an in-memory journal on it.
func newJournal(tb testing.TB) *journal.Journal {
	tb.Helper()
	j, _ := newJournalConn(tb)
	return j
}

// newJournalConn is newJournal that also returns the client connection.
func newJournalConn(tb testing.TB) (*journal.Journal, *nats.Conn) {
	tb.Helper()
	nc := connect(tb, startServer(tb, tb.TempDir()))
	return openJournal(tb, nc, journal.Config{Memory: true}), nc
}

// storedCount is how many messages the default stream holds for ref,
// whether or not they are events a Reader would return.
func storedCount(tb testing.TB, nc *nats.Conn, ref journal.Ref) uint64 {
	tb.Helper()
	ctx := waitCtx(tb, waitTimeout)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		tb.Fatal(err)
	}
	// One subject per generation: reprise.ev.<id>.<gen> (see TestRefSubject).
	subject := "reprise.ev." + ref.ID + "." + strconv.FormatUint(ref.Gen, 10)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		tb.Fatal(err)
	}
	return info.State.Subjects[subject]
}

// waitCtx is a context that ends after d or with the test.
func waitCtx(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// collector is a Writer sink that keeps every acknowledged event.
type collector struct {
	mu  sync.Mutex
	evs []journal.Event
}

func (c *collector) sink(ev journal.Event) {
	c.mu.Lock()
	c.evs = append(c.evs, ev)
	c.mu.Unlock()
}

func (c *collector) events() []journal.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]journal.Event(nil), c.evs...)
}

// eventData is the payload of event i (1-based) in these tests.
func eventData(i int) string { return "data-" + strconv.Itoa(i) }

// eventType is the type of event i: every third event is unnamed.
func eventType(i int) string {
	if i%3 == 0 {
		return ""
	}
	return "t" + strconv.Itoa(i%3)
}

// writeGen appends n events to ref, ends it with state and returns every
// acknowledged event, the end marker last.
func writeGen(tb testing.TB, j *journal.Journal, ref journal.Ref, n int, state string) []journal.Event {
	tb.Helper()
	ctx := waitCtx(tb, waitTimeout)
	var c collector
	w := j.NewWriter(ref, c.sink)
	for i := 1; i <= n; i++ {
		if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			w.Abort()
			tb.Fatalf("Append %d: %v", i, err)
		}
	}
	if err := w.End(ctx, state); err != nil {
		tb.Fatalf("End: %v", err)
	}
	evs := c.events()
	if len(evs) != n+1 {
		tb.Fatalf("sink saw %d events, want %d", len(evs), n+1)
	}
	return evs
}

// checkEvent fails unless ev is event i (1-based) as written by writeGen.
func checkEvent(tb testing.TB, ev journal.Event, i int) {
	tb.Helper()
	if ev.Offset != uint64(i) || ev.Type != eventType(i) || string(ev.Data) != eventData(i) || ev.IsEnd() {
		tb.Fatalf("event = {Offset:%d Type:%q Data:%q End:%q}, want {Offset:%d Type:%q Data:%q}",
			ev.Offset, ev.Type, ev.Data, ev.End, i, eventType(i), eventData(i))
	}
}

// readN reads n events from r, each within a deadline.
func readN(tb testing.TB, r *journal.Reader, n int) []journal.Event {
	tb.Helper()
	out := make([]journal.Event, 0, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		ev, err := r.Next(ctx)
		cancel()
		if err != nil {
			tb.Fatalf("Next after %d events: %v", len(out), err)
		}
		out = append(out, ev)
	}
	return out
}

func TestWriterSinkInOrder(t *testing.T) {
	const n = 200
	j := newJournal(t)
	evs := writeGen(t, j, journal.Ref{ID: "w", Gen: 1}, n, journal.EndCompleted)
	var last uint64
	for i, ev := range evs[:n] {
		checkEvent(t, ev, i+1)
		if ev.Seq < last || ev.Seq == 0 {
			t.Fatalf("event %d: Seq %d below previous %d", i+1, ev.Seq, last)
		}
		last = ev.Seq
	}
	end := evs[n]
	if !end.IsEnd() || end.End != journal.EndCompleted || end.Offset != n+1 || end.Seq < last {
		t.Fatalf("end marker = %+v, want End %q at Offset %d with Seq from %d", end, journal.EndCompleted, n+1, last)
	}
}

// TestWriterPacksEvents: events appended while a message is in flight go
// together in the next one, so a fast generation takes far fewer messages
// than events — and readers still get every event, from any position.
func TestWriterPacksEvents(t *testing.T) {
	const n = 2000
	j, nc := newJournalConn(t)
	ref := journal.Ref{ID: "pack", Gen: 1}
	evs := writeGen(t, j, ref, n, journal.EndCompleted)
	msgs := storedCount(t, nc, ref)
	checkNoRepeats(t, nc, ref)
	if msgs >= n/2 {
		t.Fatalf("%d messages for %d events: appends were not packed", msgs, n)
	}
	t.Logf("%d events in %d messages", n, msgs)
	for _, after := range []uint64{0, 1, 999, n - 1, n} {
		r, err := j.Read(waitCtx(t, waitTimeout), ref, after, evs[max(after, 1)-1].Seq)
		if err != nil {
			t.Fatal(err)
		}
		got := readN(t, r, n-int(after)+1)
		r.Close()
		for i, ev := range got[:n-int(after)] {
			checkEvent(t, ev, int(after)+i+1)
			if ev.Seq != evs[int(after)+i].Seq {
				t.Fatalf("after %d: event %d has Seq %d, the writer's sink saw %d", after, ev.Offset, ev.Seq, evs[int(after)+i].Seq)
			}
		}
		if end := got[len(got)-1]; !end.IsEnd() || end.Offset != n+1 {
			t.Fatalf("after %d: last = %+v, want the end marker", after, end)
		}
	}
}

// storedMessage is what the headers of one stored message say.
type storedMessage struct {
	writer string
	first  uint64 // Reprise-Off
	n      uint64 // Reprise-N, and one for an end marker
}

// storedMessages reads ref's stored messages in order, whether or not they
// are events a Reader would return (it skips a repeated one). A get that
// fails (a cluster electing a leader) is asked again.
func storedMessages(tb testing.TB, nc *nats.Conn, ref journal.Ref) []storedMessage {
	tb.Helper()
	ctx := waitCtx(tb, waitTimeout)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	subject := "reprise.ev." + ref.ID + "." + strconv.FormatUint(ref.Gen, 10)
	var msgs []storedMessage
	for seq := uint64(1); ; {
		var m *jetstream.RawStreamMsg
		for {
			st, err := js.Stream(ctx, journal.DefaultStream)
			if err == nil {
				m, err = st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			}
			if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if ctx.Err() != nil {
				tb.Fatalf("reading the stored messages: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if m == nil {
			return msgs
		}
		first, _ := strconv.ParseUint(m.Header.Get("Reprise-Off"), 10, 64)
		n, _ := strconv.ParseUint(m.Header.Get("Reprise-N"), 10, 64)
		if m.Header.Get("Reprise-End") != "" {
			n++
		}
		msgs = append(msgs, storedMessage{writer: m.Header.Get("Reprise-Writer"), first: first, n: n})
		seq = m.Sequence + 1
	}
}

// checkNoRepeats fails unless ref's stored messages hold consecutive,
// distinct offsets from 1 on: no message was stored twice.
func checkNoRepeats(tb testing.TB, nc *nats.Conn, ref journal.Ref) {
	tb.Helper()
	next := uint64(1)
	for i, m := range storedMessages(tb, nc, ref) {
		if m.first != next {
			tb.Fatalf("message %d holds offsets from %d, want %d: a message was stored twice, or one is missing", i+1, m.first, next)
		}
		next += m.n
	}
}

func TestWriterAppended(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	w := j.NewWriter(journal.Ref{ID: "appended", Gen: 1}, func(journal.Event) {})
	for i := 1; i <= 5; i++ {
		if err := w.Append(ctx, "", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if got := w.Appended(); got != uint64(i) {
			t.Fatalf("Appended() = %d, want %d", got, i)
		}
	}
	if err := w.End(ctx, journal.EndFailed); err != nil {
		t.Fatal(err)
	}
	w.Abort() // safe after End
}

func TestWriterEmptyGeneration(t *testing.T) {
	j := newJournal(t)
	ref := journal.Ref{ID: "empty", Gen: 1}
	evs := writeGen(t, j, ref, 0, journal.EndFailed)
	if end := evs[0]; end.Offset != 1 || end.End != journal.EndFailed {
		t.Fatalf("end marker = %+v, want failed at offset 1", end)
	}
	r, err := j.Read(waitCtx(t, waitTimeout), ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ev := readN(t, r, 1)[0]; !ev.IsEnd() || ev.End != journal.EndFailed {
		t.Fatalf("read %+v, want the failed end marker", ev)
	}
}

func TestWriterAfterAbort(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	w := j.NewWriter(journal.Ref{ID: "abort", Gen: 1}, func(journal.Event) {})
	if err := w.Append(ctx, "", []byte("x")); err != nil {
		t.Fatal(err)
	}
	w.Abort()
	if err := w.Append(ctx, "", []byte("y")); !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("Append after Abort: %v, want ErrClosed", err)
	}
	if err := w.End(ctx, journal.EndCompleted); !errors.Is(err, journal.ErrClosed) {
		t.Fatalf("End after Abort: %v, want ErrClosed", err)
	}
}

func TestReaderFromStart(t *testing.T) {
	const n = 50
	j := newJournal(t)
	ref := journal.Ref{ID: "r", Gen: 1}
	written := writeGen(t, j, ref, n, journal.EndCompleted)
	// Another generation and another id on the same stream must not leak in.
	writeGen(t, j, journal.Ref{ID: "r", Gen: 2}, 3, journal.EndCompleted)
	writeGen(t, j, journal.Ref{ID: "other", Gen: 1}, 3, journal.EndCompleted)

	checkStored(t, j, ref, written)
}

// checkStored reads ref from its start and fails unless it holds the n
// events writeGen writes, each at the Seq the writer's sink saw (sink: the
// n events and the end marker), then the completed end marker.
func checkStored(tb testing.TB, j *journal.Journal, ref journal.Ref, sink []journal.Event) {
	tb.Helper()
	n := len(sink) - 1
	r, err := j.Read(waitCtx(tb, waitTimeout), ref, 0, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	got := readN(tb, r, n+1)
	for i, ev := range got[:n] {
		checkEvent(tb, ev, i+1)
		if ev.Seq != sink[i].Seq {
			tb.Fatalf("event %d: stored at Seq %d, the writer's sink saw %d", i+1, ev.Seq, sink[i].Seq)
		}
	}
	if end := got[n]; !end.IsEnd() || end.Offset != uint64(n+1) || end.End != journal.EndCompleted {
		tb.Fatalf("last = %+v, want the completed end marker at %d", end, n+1)
	}
}

// TestReaderAfter reads a generation after offset k with hints good and bad;
// every one must yield exactly k+1..n and the end marker.
func TestReaderAfter(t *testing.T) {
	const n, k = 20, 7
	j := newJournal(t)
	ref := journal.Ref{ID: "hint", Gen: 1}
	// Interleave another generation so the stream sequences of ref are not
	// contiguous and a wrong hint can point into another subject.
	ctx := waitCtx(t, waitTimeout)
	var mine, theirs collector
	w := j.NewWriter(ref, mine.sink)
	o := j.NewWriter(journal.Ref{ID: "hint", Gen: 2}, theirs.sink)
	for i := 1; i <= n; i++ {
		if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
		if err := o.Append(ctx, "", []byte("noise")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	if err := o.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	evs, noise := mine.events(), theirs.events()
	seq := func(off int) uint64 { return evs[off-1].Seq }
	last := noise[len(noise)-1].Seq

	tests := []struct {
		name  string
		after uint64
		hint  uint64
	}{
		{name: "no hint", after: k},
		{name: "correct hint", after: k, hint: seq(k)},
		{name: "hint too small", after: k, hint: seq(2)},
		{name: "hint one too small", after: k, hint: seq(k) - 1},
		{name: "hint too large", after: k, hint: seq(k + 3)},
		{name: "hint into another generation", after: k, hint: noise[k+1].Seq},
		{name: "after 0 ignores hint", after: 0, hint: seq(5)},
		{name: "after the last event", after: n, hint: seq(n)},
		{name: "hint on the end marker", after: k, hint: seq(n + 1)},
		{name: "hint past the stream's end", after: k, hint: last + 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := j.Read(waitCtx(t, waitTimeout), ref, tc.after, tc.hint)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			rest := n - int(tc.after)
			got := readN(t, r, rest+1)
			for i, ev := range got[:rest] {
				checkEvent(t, ev, int(tc.after)+i+1)
				if want := seq(int(tc.after) + i + 1); ev.Seq != want {
					t.Fatalf("event %d: Seq %d, want %d", ev.Offset, ev.Seq, want)
				}
			}
			if end := got[rest]; !end.IsEnd() || end.Offset != n+1 {
				t.Fatalf("last = %+v, want the end marker at %d", end, n+1)
			}
		})
	}
}

func TestReaderFollowsLive(t *testing.T) {
	const n = 30
	j := newJournal(t)
	ref := journal.Ref{ID: "live", Gen: 1}
	ctx := waitCtx(t, waitTimeout)
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	type result struct {
		evs []journal.Event
		err error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		for len(res.evs) < n+1 {
			ev, err := r.Next(ctx)
			if err != nil {
				res.err = err
				break
			}
			res.evs = append(res.evs, ev)
		}
		done <- res
	}()

	// Nothing is stored yet: a short Next must time out and leave the reader
	// usable. (Only the goroutine above calls Next, so check via a second
	// reader.)
	r2, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = r2.Next(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on an empty generation: %v, want DeadlineExceeded", err)
	}

	w := j.NewWriter(ref, func(journal.Event) {})
	for i := 1; i <= n; i++ {
		if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}

	var res result
	select {
	case res = <-done:
	case <-time.After(waitTimeout):
		t.Fatal("live reader did not see every event")
	}
	if res.err != nil {
		t.Fatalf("live Next: %v", res.err)
	}
	for i, ev := range res.evs[:n] {
		checkEvent(t, ev, i+1)
	}
	if end := res.evs[n]; !end.IsEnd() {
		t.Fatalf("last = %+v, want the end marker", end)
	}
	// The second reader is still usable after its timeout.
	checkEvent(t, readN(t, r2, 1)[0], 1)
}

// fenceCase is a second writer of a generation a first writer started.
type fenceCase struct {
	name      string
	firstEnds bool // the first writer ended before the second starts
	second    int  // events the second writer appends before its End
}

var fenceCases = []fenceCase{
	{name: "first ended, second ends at once", firstEnds: true},
	{name: "first ended, second appends one", firstEnds: true, second: 1},
	{name: "first ended, second appends more than first wrote", firstEnds: true, second: 8},
	{name: "first still writing, second appends one", second: 1},
	{name: "first still writing, second appends several", second: 5},
}

// fenceResult is what runFence observed.
type fenceResult struct {
	ref    journal.Ref
	err    error           // what the second writer's Append or End returned
	werr   error           // the second writer's Err afterwards
	second []journal.Event // the second writer's sink
	first  []journal.Event // the first writer's sink, end marker last
}

// runFence lets a first writer append 3 events, then a second writer on the
// same Ref append tc.second events and end; a first writer still writing
// then appends 3 more and ends.
func runFence(t *testing.T, j *journal.Journal, id string, tc fenceCase) fenceResult {
	t.Helper()
	ctx := waitCtx(t, waitTimeout)
	res := fenceResult{ref: journal.Ref{ID: id, Gen: 1}}
	var first, second collector
	w1 := j.NewWriter(res.ref, first.sink)
	defer w1.Abort()
	for range 3 {
		if err := w1.Append(ctx, "", []byte("first")); err != nil {
			t.Fatal(err)
		}
	}
	if tc.firstEnds {
		if err := w1.End(ctx, journal.EndCompleted); err != nil {
			t.Fatal(err)
		}
	} else {
		// The first event is stored before the second writer starts.
		r, err := j.Read(ctx, res.ref, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		readN(t, r, 1)
		r.Close()
	}

	w2 := j.NewWriter(res.ref, second.sink)
	for i := 1; i <= tc.second && res.err == nil; i++ {
		res.err = w2.Append(ctx, "", []byte("second"))
	}
	if res.err == nil {
		res.err = w2.End(ctx, journal.EndFailed)
	} else {
		w2.Abort()
	}
	res.werr = w2.Err()

	if !tc.firstEnds {
		for range 3 {
			if err := w1.Append(ctx, "", []byte("first")); err != nil {
				t.Fatalf("first writer after the second: %v", err)
			}
		}
		if err := w1.End(ctx, journal.EndCompleted); err != nil {
			t.Fatalf("first writer End: %v", err)
		}
	}
	res.second, res.first = second.events(), first.events()
	return res
}

// TestWriterFenced: a second writer of a generation another writer already
// started fails with ErrFenced (its first append is rejected), its sink sees
// nothing, and readers see exactly the first writer's events.
func TestWriterFenced(t *testing.T) {
	j := newJournal(t)
	for i, tc := range fenceCases {
		t.Run(tc.name, func(t *testing.T) {
			res := runFence(t, j, "fence"+strconv.Itoa(i), tc)
			if !errors.Is(res.err, journal.ErrFenced) {
				t.Errorf("second writer: %v, want ErrFenced", res.err)
			}
			if !errors.Is(res.werr, journal.ErrFenced) {
				t.Errorf("second writer Err() = %v, want ErrFenced", res.werr)
			}
			if len(res.second) != 0 {
				t.Errorf("second writer's sink saw %d events, want none", len(res.second))
			}
			r, err := j.Read(waitCtx(t, waitTimeout), res.ref, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i, ev := range readN(t, r, len(res.first)) {
				if want := res.first[i]; ev.Offset != want.Offset || ev.Seq != want.Seq || string(ev.Data) != string(want.Data) || ev.End != want.End {
					t.Errorf("read %+v, the first writer's sink saw %+v", ev, want)
				}
			}
		})
	}
}

// TestWriterFencedStoresNothing: a fenced writer stores nothing at all, so
// the generation holds exactly the first writer's events.
func TestWriterFencedStoresNothing(t *testing.T) {
	j, nc := newJournalConn(t)
	for i, tc := range fenceCases {
		t.Run(tc.name, func(t *testing.T) {
			res := runFence(t, j, "strict"+strconv.Itoa(i), tc)
			writers := map[string]int{}
			for _, m := range storedMessages(t, nc, res.ref) {
				writers[m.writer]++
			}
			if len(writers) != 1 {
				t.Errorf("messages stored by writer: %v, want only the first writer's", writers)
			}
			r, err := j.Read(waitCtx(t, waitTimeout), res.ref, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for i, ev := range readN(t, r, len(res.first)) {
				if want := res.first[i]; ev.Offset != want.Offset || ev.Seq != want.Seq || string(ev.Data) != string(want.Data) || ev.End != want.End {
					t.Errorf("read {Offset:%d Seq:%d Data:%q End:%q}, the first writer's sink saw {Offset:%d Seq:%d Data:%q End:%q}",
						ev.Offset, ev.Seq, ev.Data, ev.End, want.Offset, want.Seq, want.Data, want.End)
				}
			}
		})
	}
}

func TestRecords(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	existing, created, err := j.Create(ctx, "existing", []byte("v1"))
	if err != nil || !created {
		t.Fatalf("Create = %v, %v", created, err)
	}
	tests := []struct {
		name   string
		op     func() (rev uint64, ok bool, err error)
		wantOK bool
	}{
		{"create new", func() (uint64, bool, error) { return j.Create(ctx, "new", []byte("v")) }, true},
		{"create existing", func() (uint64, bool, error) { return j.Create(ctx, "existing", []byte("v2")) }, false},
		{"update stale revision", func() (uint64, bool, error) { return j.Update(ctx, "existing", []byte("v2"), existing+100) }, false},
		{"update zero revision", func() (uint64, bool, error) { return j.Update(ctx, "existing", []byte("v2"), 0) }, false},
		{"update missing", func() (uint64, bool, error) { return j.Update(ctx, "missing", []byte("v2"), existing) }, false},
		{"get missing", func() (uint64, bool, error) { _, rev, found, err := j.Get(ctx, "missing"); return rev, found, err }, false},
		{"get existing", func() (uint64, bool, error) { _, rev, found, err := j.Get(ctx, "existing"); return rev, found, err }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rev, ok, err := tc.op()
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if ok == (rev == 0) {
				t.Fatalf("revision %d with ok %v", rev, ok)
			}
		})
	}

	// A good update moves the revision on; the old one is then stale.
	rev, ok, err := j.Update(ctx, "existing", []byte("v3"), existing)
	if err != nil || !ok {
		t.Fatalf("Update = %v, %v", ok, err)
	}
	if rev <= existing {
		t.Fatalf("Update revision %d not above %d", rev, existing)
	}
	if _, ok, err := j.Update(ctx, "existing", []byte("v4"), existing); err != nil || ok {
		t.Fatalf("second update with the old revision: %v, %v, want not updated", ok, err)
	}
	val, grev, found, err := j.Get(ctx, "existing")
	if err != nil || !found {
		t.Fatalf("Get = %v, %v", found, err)
	}
	if string(val) != "v3" || grev != rev {
		t.Fatalf("Get = %q rev %d, want \"v3\" rev %d", val, grev, rev)
	}
}

func TestOpenInvalidConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     journal.Config
		wantErr error
	}{
		{"ttl 10ms", journal.Config{Memory: true, TTL: 10 * time.Millisecond}, journal.ErrInvalidOption},
		{"negative ttl", journal.Config{Memory: true, TTL: -time.Hour}, journal.ErrInvalidOption},
		{"replicas 9", journal.Config{Memory: true, Replicas: 9}, journal.ErrInvalidOption},
		{"negative replicas", journal.Config{Memory: true, Replicas: -1}, journal.ErrInvalidOption},
		{"defaults", journal.Config{Memory: true}, nil},
		{"ttl 1s", journal.Config{Memory: true, TTL: time.Second}, nil},
		{"ttl 90s", journal.Config{Memory: true, TTL: 90 * time.Second}, nil},
		{"ttl 2m", journal.Config{Memory: true, TTL: 2 * time.Minute}, nil},
		{"named stream and bucket", journal.Config{Memory: true, Stream: "OTHER", Bucket: "other", Replicas: 1}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nc := connect(t, startServer(t, t.TempDir()))
			ctx := waitCtx(t, waitTimeout)
			j, err := journal.Open(ctx, nc, tc.cfg)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Open: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if err := j.Ready(ctx); err != nil {
				t.Fatalf("Ready: %v", err)
			}
			js, err := jetstream.New(nc)
			if err != nil {
				t.Fatal(err)
			}
			st, err := js.Stream(ctx, cmp.Or(tc.cfg.Stream, journal.DefaultStream))
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := cmp.Or(tc.cfg.TTL, journal.DefaultTTL); info.Config.MaxAge != want {
				t.Fatalf("the stream keeps events %s, want %s", info.Config.MaxAge, want)
			}
		})
	}
}

func TestStartEmbeddedNeedsDir(t *testing.T) {
	if _, err := journal.StartEmbedded(journal.EmbeddedConfig{}); !errors.Is(err, journal.ErrInvalidOption) {
		t.Fatalf("StartEmbedded without Dir: %v, want ErrInvalidOption", err)
	}
}

// TestRestartPersistence: with file storage, events and records outlive a
// restart of the server on the same directory.
func TestRestartPersistence(t *testing.T) {
	const n = 10
	dir := t.TempDir()
	ref := journal.Ref{ID: "persist", Gen: 1}

	e, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := e.Connect("before")
	if err != nil {
		e.Shutdown()
		t.Fatal(err)
	}
	j := openJournal(t, nc, journal.Config{})
	written := writeGen(t, j, ref, n, journal.EndCompleted)
	ctx := waitCtx(t, waitTimeout)
	rev, _, err := j.Create(ctx, "rec", []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	e.Shutdown()

	e2 := startServer(t, dir)
	j2 := openJournal(t, connect(t, e2), journal.Config{})
	val, rev2, found, err := j2.Get(ctx, "rec")
	if err != nil || !found {
		t.Fatalf("Get after restart: %v", err)
	}
	if string(val) != "kept" || rev2 != rev {
		t.Fatalf("Get after restart = %q rev %d, want \"kept\" rev %d", val, rev2, rev)
	}
	r, err := j2.Read(ctx, ref, 3, written[2].Seq)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readN(t, r, n-3+1)
	for i, ev := range got[:n-3] {
		checkEvent(t, ev, i+4)
	}
	if end := got[n-3]; !end.IsEnd() || end.Offset != n+1 {
		t.Fatalf("last = %+v, want the end marker", end)
	}
	// The generation stays fenced after the restart.
	w := j2.NewWriter(ref, func(journal.Event) {})
	defer w.Abort()
	if err := w.Append(ctx, "", []byte("late")); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("writer after restart: %v, want ErrFenced", err)
	}
}

// BenchmarkAppend measures pipelined appends of 128-byte events.
func BenchmarkAppend(b *testing.B) {
	for _, mem := range []bool{true, false} {
		name := "file"
		if mem {
			name = "memory"
		}
		b.Run(name, func(b *testing.B) {
			e := startServer(b, b.TempDir())
			j := openJournal(b, connect(b, e), journal.Config{Memory: mem})
			data := make([]byte, 128)
			ctx := waitCtx(b, time.Hour)
			var acked int
			w := j.NewWriter(journal.Ref{ID: "bench", Gen: 1}, func(journal.Event) { acked++ })
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			start := time.Now()
			for b.Loop() {
				if err := w.Append(ctx, "chunk", data); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.End(ctx, journal.EndCompleted); err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			if acked != b.N+1 {
				b.Fatalf("acked %d, want %d", acked, b.N+1)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
		})
	}
}

// BenchmarkReadAfter measures a resume: open a Reader after an event and
// receive the next one.
func BenchmarkReadAfter(b *testing.B) {
	const n = 2000
	j := newJournal(b)
	ref := journal.Ref{ID: "bench", Gen: 1}
	evs := writeGen(b, j, ref, n, journal.EndCompleted)
	for _, hinted := range []bool{true, false} {
		name := "unhinted"
		if hinted {
			name = "hinted"
		}
		b.Run(name, func(b *testing.B) {
			ctx := waitCtx(b, time.Hour)
			i := 0
			for b.Loop() {
				k := n/2 + i%(n/2) // resume in the second half
				i++
				var hint uint64
				if hinted {
					hint = evs[k-1].Seq
				}
				r, err := j.Read(ctx, ref, uint64(k), hint)
				if err != nil {
					b.Fatal(err)
				}
				ev, err := r.Next(ctx)
				r.Close()
				if err != nil {
					b.Fatal(err)
				}
				if ev.Offset != uint64(k+1) {
					b.Fatalf("resumed at %d, want %d", ev.Offset, k+1)
				}
			}
		})
	}
}

// Example shows a generation written and read back.
func Example() {
	dir, err := os.MkdirTemp("", "journal-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	e, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Shutdown()
	nc, err := e.Connect("example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()

	ctx := context.Background()
	j, err := journal.Open(ctx, nc, journal.Config{Memory: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	ref := journal.Ref{ID: "example", Gen: 1}
	var seqs []uint64
	w := j.NewWriter(ref, func(ev journal.Event) { seqs = append(seqs, ev.Seq) })
	for _, tok := range []string{"Hel", "lo", "!"} {
		if err := w.Append(ctx, "token", []byte(tok)); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		fmt.Println(err)
		return
	}

	// Resume after the first event, with its sequence as the hint.
	r, err := j.Read(ctx, ref, 1, seqs[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	for {
		ev, err := r.Next(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		if ev.IsEnd() {
			fmt.Println("end:", ev.End)
			return
		}
		fmt.Printf("%d %s %s\n", ev.Offset, ev.Type, ev.Data)
	}
	// Output:
	// 2 token lo
	// 3 token !
	// end: completed
}

// TestReadersCostNoConsumer: two thousand readers following one live
// generation hold no JetStream consumer between them (a stream takes a
// bounded number: ~1,000 readers each holding one made every other read
// fail), share one subscription, and all get every event as it is stored,
// the end marker last; a thousand-event replay meanwhile reads in full.
func TestReadersCostNoConsumer(t *testing.T) {
	const readers, n = 2000, 20
	j, nc := newJournalConn(t)
	ref := journal.Ref{ID: "many", Gen: 1}
	ctx := waitCtx(t, 60*time.Second)
	w := j.NewWriter(ref, func(journal.Event) {})
	defer w.Abort()
	if err := w.Append(ctx, eventType(1), []byte(eventData(1))); err != nil {
		t.Fatal(err)
	}
	var caught sync.WaitGroup // readers that got event 1, and so wait live
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for i := range readers {
		r, err := j.Read(ctx, ref, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		caught.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.Close()
			for k := 1; ; k++ {
				ev, err := r.Next(ctx)
				if err != nil {
					errs <- fmt.Errorf("reader %d at %d: %w", i, k, err)
					if k == 1 {
						caught.Done()
					}
					return
				}
				if k == 1 {
					caught.Done()
				}
				if ev.IsEnd() {
					if k != n+1 {
						errs <- fmt.Errorf("reader %d: end at %d, want %d", i, k, n+1)
					}
					return
				}
				if ev.Offset != uint64(k) || string(ev.Data) != eventData(k) {
					errs <- fmt.Errorf("reader %d: event %d = %d %q", i, k, ev.Offset, ev.Data)
					return
				}
			}
		}()
	}
	caught.Wait()

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("%d readers hold %d consumers, want none", readers, info.State.Consumers)
	}

	// Another generation's long replay is not held up by them.
	long := journal.Ref{ID: "long", Gen: 1}
	writeGen(t, j, long, 1000, journal.EndCompleted)
	rl, err := j.Read(ctx, long, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i, ev := range readN(t, rl, 1001) {
		if i < 1000 {
			checkEvent(t, ev, i+1)
		} else if !ev.IsEnd() {
			t.Fatalf("event 1001 = %+v, want the end marker", ev)
		}
	}
	rl.Close()
	t.Logf("a 1000-event replay beside %d live readers: %v", readers, time.Since(start))

	for i := 2; i <= n; i++ {
		if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestReaderPastTheEnd: a reader whose position is past its generation's
// end gets the end marker, not a wait for events that will never come.
func TestReaderPastTheEnd(t *testing.T) {
	j := newJournal(t)
	ref := journal.Ref{ID: "past", Gen: 1}
	writeGen(t, j, ref, 5, journal.EndCompleted)
	for _, after := range []uint64{6, 7, 1000} {
		r, err := j.Read(waitCtx(t, waitTimeout), ref, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		ev := readN(t, r, 1)[0]
		r.Close()
		if !ev.IsEnd() || ev.Offset != 6 {
			t.Errorf("Next after %d = %+v, want the end marker at 6", after, ev)
		}
	}
}

// TestReaderPastAFailedEnd: a cursor past a failed generation's end, or at
// its last event's offset without naming it (its owner showed events
// before the journal lost them), reads the reason it failed, that last
// event, and then the end marker; the reason's own cursor reads only the
// end marker.
func TestReaderPastAFailedEnd(t *testing.T) {
	j := newJournal(t)
	ref := journal.Ref{ID: "past-failed", Gen: 1}
	evs := writeGen(t, j, ref, 5, journal.EndFailed) // events 1..5, the end marker at 6
	for _, after := range []uint64{5, 6, 9, 1000} {  // 5 without the reason's Seq: another event at its offset
		r, err := j.Read(waitCtx(t, waitTimeout), ref, after, 0)
		if err != nil {
			t.Fatal(err)
		}
		evs := readN(t, r, 2)
		r.Close()
		if evs[0].Offset != 5 || evs[0].IsEnd() || string(evs[0].Data) != eventData(5) || !evs[1].IsEnd() || evs[1].End != journal.EndFailed {
			t.Errorf("after %d: %+v; want event 5 (the reason), then the failed end marker", after, evs)
		}
	}
	r, err := j.Read(waitCtx(t, waitTimeout), ref, 5, evs[4].Seq)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ev := readN(t, r, 1)[0]; !ev.IsEnd() || ev.Offset != 6 {
		t.Errorf("after the reason (its own cursor): %+v; want the end marker", ev)
	}
}

// TestSeal: a generation whose writer is gone is ended after its last
// event, once; a writer still alive is fenced from then on.
func TestSeal(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	if _, err := j.First(ctx, journal.Ref{ID: "seal-none", Gen: 1}); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("First of an empty generation: %v, want ErrNotFound", err)
	}
	if _, _, err := j.Seal(ctx, journal.Ref{ID: "seal-bad", Gen: 1}, func(journal.Event, bool) []journal.Event { return nil }); !errors.Is(err, journal.ErrInvalidOption) {
		t.Fatalf("Seal without an end marker: %v, want ErrInvalidOption", err)
	}
	ended := writeGen(t, j, journal.Ref{ID: "seal-ended", Gen: 1}, 3, journal.EndFailed)
	if end, sealed, err := j.Seal(ctx, journal.Ref{ID: "seal-ended", Gen: 1}, endAs(journal.EndCompleted)); err != nil || sealed || !sameEvent(end, ended[3]) {
		t.Fatalf("Seal of an ended generation = %+v, %v; want its own end marker %+v", end, err, ended[3])
	}

	ref := journal.Ref{ID: "seal", Gen: 1}
	var c collector
	w := j.NewWriter(ref, c.sink)
	defer w.Abort()
	for i := 1; i <= 5; i++ {
		if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, waitTimeout, "5 events stored", func() bool { return w.Stored() == 5 })
	end, sealed, err := j.Seal(ctx, ref, endAs(journal.EndCompleted))
	if err != nil || !sealed || end.Offset != 6 || end.End != journal.EndCompleted || end.Seq == 0 {
		t.Fatalf("Seal = %+v, %v; want the completed end marker at 6", end, err)
	}
	if again, sealedAgain, err := j.Seal(ctx, ref, endAs(journal.EndFailed)); err != nil || !sealedAgain || !sameEvent(again, end) {
		t.Fatalf("Seal again = %+v, %v; want %+v", again, err, end)
	}
	if err := w.Append(ctx, "", []byte("late")); err != nil {
		t.Fatal(err) // queued; the fence shows when it is sent
	}
	if err := w.End(ctx, journal.EndCompleted); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("the writer after Seal: End = %v, want ErrFenced", err)
	}
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := readN(t, r, 6)
	for i, ev := range got[:5] {
		checkEvent(t, ev, i+1)
	}
	if !sameEvent(got[5], end) {
		t.Fatalf("read %+v after the events, want the sealed end %+v", got[5], end)
	}
	if last, err := j.Last(ctx, ref); err != nil || !sameEvent(last, end) {
		t.Fatalf("Last = %+v, %v; want %+v", last, err, end)
	}
	if first, err := j.First(ctx, ref); err != nil || first.Offset != 1 || string(first.Data) != eventData(1) {
		t.Fatalf("First = %+v, %v", first, err)
	}
}

// endAs is a Seal ending that appends only an end marker with state.
func endAs(state string) func(journal.Event, bool) []journal.Event {
	return func(journal.Event, bool) []journal.Event { return []journal.Event{{End: state}} }
}

// TestSealFences: a generation sealed with an error before its writer
// stored anything, or while it is running, keeps the seal; the writer is
// fenced at its next message, and the ending sees what was stored.
func TestSealFences(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	lost := func(last journal.Event, found bool) []journal.Event {
		return []journal.Event{{Type: "error", Data: []byte(fmt.Sprintf("lost after %d (found %v)", last.Offset, found))}, {End: journal.EndFailed}}
	}
	for _, stored := range []int{0, 4} {
		ref := journal.Ref{ID: fmt.Sprintf("seal-fence-%d", stored), Gen: 1}
		var c collector
		w := j.NewWriter(ref, c.sink)
		for i := 1; i <= stored; i++ {
			if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
				t.Fatal(err)
			}
		}
		poll(t, waitTimeout, "events stored", func() bool { return w.Stored() == uint64(stored) })
		end, _, err := j.Seal(ctx, ref, lost)
		if err != nil || end.Offset != uint64(stored)+2 || end.End != journal.EndFailed {
			t.Fatalf("stored %d: Seal = %+v, %v; want the failed end marker at %d", stored, end, err, stored+2)
		}
		_ = w.Append(ctx, "", []byte("late"))
		if err := w.End(ctx, journal.EndCompleted); !errors.Is(err, journal.ErrFenced) {
			t.Fatalf("stored %d: the writer after Seal: End = %v, want ErrFenced", stored, err)
		}
		r, err := j.Read(ctx, ref, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		got := readN(t, r, stored+2)
		r.Close()
		for i, ev := range got[:stored] {
			checkEvent(t, ev, i+1)
		}
		want := fmt.Sprintf("lost after %d (found %v)", stored, stored > 0)
		if e := got[stored]; e.Type != "error" || string(e.Data) != want || e.Offset != uint64(stored)+1 {
			t.Fatalf("stored %d: read %+v after the events, want the seal's error %q", stored, e, want)
		}
		if !sameEvent(got[stored+1], end) {
			t.Fatalf("stored %d: read %+v, want the end %+v", stored, got[stored+1], end)
		}
	}
}

// sameEvent compares two events field by field.
func sameEvent(a, b journal.Event) bool {
	return a.Offset == b.Offset && a.Seq == b.Seq && a.Type == b.Type && string(a.Data) == string(b.Data) && a.End == b.End
}

// TestOnAppend: every stored message is reported with how long it took,
// and a calm journal counts no append errors.
func TestOnAppend(t *testing.T) {
	nc := connect(t, startServer(t, t.TempDir()))
	var mu sync.Mutex
	var took []time.Duration
	j := openJournal(t, nc, journal.Config{Memory: true, OnAppend: func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		took = append(took, d)
	}})
	writeGen(t, j, journal.Ref{ID: "on-append", Gen: 1}, 3, journal.EndCompleted)
	mu.Lock()
	defer mu.Unlock()
	if len(took) == 0 {
		t.Fatal("OnAppend never called")
	}
	for _, d := range took {
		if d <= 0 {
			t.Errorf("append took %s", d)
		}
	}
	if s := j.Stats(); s.AppendErrors != 0 {
		t.Errorf("AppendErrors = %d, want 0", s.AppendErrors)
	}
}

// TestProgress: Progress counts the events stored so far, before the
// generation ends and after, and says when the last was stored.
func TestProgress(t *testing.T) {
	t.Parallel()
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	ref := journal.Ref{ID: "progress", Gen: 1}
	if p, err := j.Progress(ctx, ref); err != nil || p != (journal.Progress{}) {
		t.Fatalf("Progress of nothing stored = %+v, %v; want zero", p, err)
	}
	acked := make(chan journal.Event, 8)
	w := j.NewWriter(ref, func(ev journal.Event) { acked <- ev })
	before := time.Now().Add(-time.Second) // JetStream's clock is this machine's
	for i := 1; i <= 3; i++ {
		if err := w.Append(ctx, eventType(i), []byte(eventData(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 3; i++ {
		select {
		case <-acked:
		case <-ctx.Done():
			t.Fatalf("waiting for event %d to be acknowledged: %v", i, ctx.Err())
		}
	}
	p, err := j.Progress(ctx, ref)
	if err != nil || p.Events != 3 || p.Ended || p.At.Before(before) || p.At.After(time.Now().Add(time.Second)) {
		t.Fatalf("Progress after 3 events = %+v, %v; want 3 events, not ended, stored just now", p, err)
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	if p, err := j.Progress(ctx, ref); err != nil || p.Events != 3 || !p.Ended {
		t.Fatalf("Progress after the end = %+v, %v; want 3 events, ended", p, err)
	}
}

// TestWriterLingers: events shown before they are stored (AppendShown), a
// few milliseconds apart like a live stream's tokens, share messages while
// they linger; an event a caller waits to see stored (Append) goes at once,
// with what lingers before it; without a linger each goes on its own.
func TestWriterLingers(t *testing.T) {
	const n = 20
	for _, c := range []struct {
		name    string
		linger  time.Duration
		maxMsgs uint64 // messages for the n shown events, the fence's included
	}{
		{"linger", 500 * time.Millisecond, 3},
		{"none", -1, n},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc := connect(t, startServer(t, t.TempDir()))
			j := openJournal(t, nc, journal.Config{Memory: true, Linger: c.linger, LingerAlone: c.linger})
			ctx := waitCtx(t, waitTimeout)
			ref := journal.Ref{ID: "linger", Gen: 1}
			stored := make(chan journal.Event, n+2)
			w := j.NewWriter(ref, func(ev journal.Event) { stored <- ev })
			var shown int
			for range n {
				if err := w.AppendShown(ctx, "", []byte("tok"), func(journal.Event) { shown++ }); err != nil {
					t.Fatal(err)
				}
				if c.linger < 0 {
					// Without a linger each is sent as soon as the writer is
					// idle: wait for it to be stored, so the next does not
					// share a message by coming during a send (on a loaded
					// machine a send outlasts any fixed pause).
					<-stored
					continue
				}
				time.Sleep(2 * time.Millisecond)
			}
			msgs := storedCount(t, nc, ref)
			if lag := j.Lag(); c.linger > 0 && lag != 0 {
				t.Fatalf("lag %s while events linger within Linger: only what waits past it is behind", lag)
			}
			if shown != n { // the fence too: it is sent at once, and shown
				t.Fatalf("shown %d events at once, want %d", shown, n)
			}
			// An urgent event does not wait for the linger, nor do those before it.
			t0 := time.Now()
			if err := w.Append(ctx, "", []byte("[DONE]")); err != nil {
				t.Fatal(err)
			}
			for {
				ev := <-stored
				if ev.Offset == n+1 {
					break
				}
			}
			if d := time.Since(t0); c.linger > 0 && d >= c.linger {
				t.Fatalf("the urgent event was stored %s after its append: it lingered", d)
			}
			if err := w.End(ctx, journal.EndCompleted); err != nil {
				t.Fatal(err)
			}
			checkNoRepeats(t, nc, ref)
			if c.linger > 0 && msgs > c.maxMsgs {
				t.Fatalf("%d messages stored for %d lingering events before the urgent one, want at most %d", msgs, n, c.maxMsgs)
			}
			if c.linger < 0 && msgs != n {
				t.Fatalf("%d messages for %d events without a linger, want one each", msgs, n)
			}
			t.Logf("%d events shown before they were stored: %d messages", n, msgs)
		})
	}
}

// TestWriterWatched: a writer whose shown events may linger far longer than
// anyone would wait (Config.LingerAlone) while only its owner's readers
// follow it lingers Config.Linger once a reader on another instance
// follows the generation from the journal: that reader gets the events
// lingering when it joined, and those appended after, long before
// LingerAlone; the owner's journal, meanwhile, lags nothing.
func TestWriterWatched(t *testing.T) {
	const n = 10
	srv := startServer(t, t.TempDir())
	owner := openJournal(t, connect(t, srv), journal.Config{Memory: true, Linger: 5 * time.Millisecond, LingerAlone: time.Hour})
	other := openJournal(t, connect(t, srv), journal.Config{Memory: true})
	ctx := waitCtx(t, waitTimeout)
	ref := journal.Ref{ID: "watched", Gen: 1}
	stored := make(chan journal.Event, 2*n+1)
	w := owner.NewWriter(ref, func(ev journal.Event) { stored <- ev })
	show := func(journal.Event) {}
	// The fence is sent at once, alone: it is stored before the others come.
	if err := w.AppendShown(ctx, "", []byte(eventData(0)), show); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-stored:
		if ev.Offset != 1 {
			t.Fatalf("stored offset %d first, want the fence (1)", ev.Offset)
		}
	case <-ctx.Done():
		t.Fatal("the fence was not stored")
	}
	// The sink hears of a store before the writer drops the stored events
	// from its queue (and from its lag): wait for that too.
	poll(t, waitTimeout, "the fence out of the writer's queue", func() bool { return w.Stored() == 1 })
	for i := 1; i < n; i++ {
		if err := w.AppendShown(ctx, "", []byte(eventData(i)), show); err != nil {
			t.Fatal(err)
		}
	}
	if lag := owner.Lag(); lag != 0 {
		t.Fatalf("lag %s while unwatched events linger within LingerAlone", lag)
	}
	if got := w.Stored(); got != 1 {
		t.Fatalf("stored through offset %d before anyone watched, want only the fence (1)", got)
	}
	rd, err := other.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// The reader catches up with what is stored (the fence), joins the
	// live topic, and so watches: the lingering events come.
	got := readN(t, rd, n)
	for i := n; i < 2*n; i++ {
		if err := w.AppendShown(ctx, "", []byte(eventData(i)), show); err != nil {
			t.Fatal(err)
		}
	}
	got = append(got, readN(t, rd, n)...)
	for i, ev := range got {
		if string(ev.Data) != eventData(i) {
			t.Fatalf("event %d: %q, want %q", i, ev.Data, eventData(i))
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
}

// TestRecordsOnTheirOwnConnection: with Config.Records, the key records
// go over that connection and nothing else does: the events' connection
// carries none of them (so a lease renewal never queues behind events),
// and a record is read and written even while the events' connection is
// closed.
func TestRecordsOnTheirOwnConnection(t *testing.T) {
	srv := startServer(t, t.TempDir())
	nc, rc := connect(t, srv), connect(t, srv)
	j := openJournal(t, nc, journal.Config{Memory: true, Records: rc})
	ctx := waitCtx(t, waitTimeout)
	events, records := nc.Stats().OutMsgs, rc.Stats().OutMsgs
	rev, created, err := j.Create(ctx, "rec", []byte("a"))
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	if _, ok, err := j.Update(ctx, "rec", []byte("b"), rev); err != nil || !ok {
		t.Fatalf("update: %v %v", ok, err)
	}
	if got := nc.Stats().OutMsgs - events; got != 0 {
		t.Fatalf("%d record messages went over the events' connection", got)
	}
	if got := rc.Stats().OutMsgs - records; got < 2 {
		t.Fatalf("%d record messages went over the records' connection, want 2", got)
	}
	nc.Close()
	if v, _, found, err := j.Get(ctx, "rec"); err != nil || !found || string(v) != "b" {
		t.Fatalf("get with the events' connection closed: %q %v %v", v, found, err)
	}
}

// TestWriterShowsTheFence: a generation's first event appended by
// AppendShown is shown at once, like any other, with the start hint (its
// message is not stored yet), and sent without lingering; every reader
// then gives each event the id the owner showed, and a cursor on the
// fence or an event after it seeks right. A writer whose generation
// another instance sealed first shows its fence and stores nothing:
// ErrFenced, as when its first append waited.
func TestWriterShowsTheFence(t *testing.T) {
	srv := startServer(t, t.TempDir())
	j := openJournal(t, connect(t, srv), journal.Config{Memory: true, LingerAlone: time.Hour})
	other := openJournal(t, connect(t, srv), journal.Config{Memory: true})
	ctx := waitCtx(t, waitTimeout)
	writeGen(t, j, journal.Ref{ID: "before", Gen: 1}, 2, journal.EndCompleted) // the stream is not empty

	ref := journal.Ref{ID: "shown-fence", Gen: 1}
	var stored collector
	w := j.NewWriter(ref, stored.sink)
	defer w.Abort()
	var shown []journal.Event
	show := func(ev journal.Event) { shown = append(shown, ev) }
	for i := 1; i <= 3; i++ {
		if err := w.AppendShown(ctx, eventType(i), []byte(eventData(i)), show); err != nil {
			t.Fatal(err)
		}
	}
	if len(shown) != 3 || shown[0].Offset != 1 || shown[0].Seq != 1 {
		t.Fatalf("shown %+v at once, want 3 events from offset 1, the first with the start hint (1)", shown)
	}
	// Sent at once: a reader elsewhere gets it, though the rest may linger an hour.
	r, err := other.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ev := readN(t, r, 1)[0]; ev.Offset != 1 || ev.Seq != shown[0].Seq {
		t.Fatalf("read %+v first, the owner showed %+v", ev, shown[0])
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	for i, ev := range readN(t, r, 3)[:2] {
		if want := shown[i+1]; ev.Offset != want.Offset || ev.Seq != want.Seq {
			t.Fatalf("read {Offset:%d Seq:%d}, the owner showed {Offset:%d Seq:%d}", ev.Offset, ev.Seq, want.Offset, want.Seq)
		}
	}
	for i, ev := range stored.events()[:3] {
		if ev.Offset != shown[i].Offset || ev.Seq != shown[i].Seq {
			t.Fatalf("stored {Offset:%d Seq:%d}, shown {Offset:%d Seq:%d}", ev.Offset, ev.Seq, shown[i].Offset, shown[i].Seq)
		}
	}
	for _, cur := range shown {
		rc, err := other.Read(ctx, ref, cur.Offset, cur.Seq)
		if err != nil {
			t.Fatal(err)
		}
		next := readN(t, rc, 1)[0]
		rc.Close()
		if next.Offset != cur.Offset+1 {
			t.Fatalf("resumed after %d (hint %d) at %d", cur.Offset, cur.Seq, next.Offset)
		}
	}

	sealed := journal.Ref{ID: "shown-fence-sealed", Gen: 1}
	if _, ok, err := j.Seal(ctx, sealed, endAs(journal.EndFailed)); err != nil || !ok {
		t.Fatalf("Seal = %v, %v", ok, err)
	}
	var late collector
	w2 := j.NewWriter(sealed, late.sink)
	shown = nil
	if err := w2.AppendShown(ctx, "", []byte("late"), show); err != nil {
		t.Fatal(err) // queued: the fence's answer comes later
	}
	if err := w2.End(ctx, journal.EndCompleted); !errors.Is(err, journal.ErrFenced) {
		t.Fatalf("a writer of a sealed generation: End = %v, want ErrFenced", err)
	}
	if len(shown) != 1 || len(late.events()) != 0 {
		t.Fatalf("fenced writer: shown %d, stored %d; want its fence shown, nothing stored", len(shown), len(late.events()))
	}
	if last, err := j.Last(ctx, sealed); err != nil || last.Offset != 1 || last.End != journal.EndFailed {
		t.Fatalf("Last = %+v, %v; want only the seal's end marker", last, err)
	}
}

// TestAppendNoted: a noted event's note is stored with it and read back
// from the generation's last message — its own, the writer's end marker's
// sent after it, or a seal's after it — never before the event is stored;
// a later note replaces it, readers see no trace of it, and a note that is
// no header value is refused.
func TestAppendNoted(t *testing.T) {
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	if _, err := j.Note(ctx, journal.Ref{ID: "note-none", Gen: 1}); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("Note of an empty generation: %v, want ErrNotFound", err)
	}
	stored := func(w *journal.Writer, off uint64) {
		t.Helper()
		poll(t, waitTimeout, fmt.Sprintf("event %d stored", off), func() bool { return w.Stored() >= off })
	}
	note := func(ref journal.Ref, want string) {
		t.Helper()
		if got, err := j.Note(ctx, ref); err != nil || got != want {
			t.Fatalf("Note(%s) = %q, %v; want %q", ref.ID, got, err, want)
		}
	}

	// Ended by its writer, the end marker in a message of its own.
	ref := journal.Ref{ID: "note-end", Gen: 1}
	w := j.NewWriter(ref, func(journal.Event) {})
	if err := w.Append(ctx, "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	stored(w, 1)
	note(ref, "")
	if err := w.AppendNoted(ctx, "t", []byte("2"), `{"n":1}`); err != nil {
		t.Fatal(err)
	}
	stored(w, 2)
	note(ref, `{"n":1}`)
	if err := w.AppendNoted(ctx, "t", []byte("3"), `{"n":2}`); err != nil {
		t.Fatal(err)
	}
	stored(w, 3)
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		t.Fatal(err)
	}
	note(ref, `{"n":2}`)
	if last, err := j.Last(ctx, ref); err != nil || !last.IsEnd() || last.Offset != 4 {
		t.Fatalf("Last = %+v, %v; want the end marker at 4", last, err)
	}
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, ev := range readN(t, r, 4) {
		want := []string{"a:1", "t:2", "t:3", ":"}[i]
		if got := ev.Type + ":" + string(ev.Data); got != want {
			t.Errorf("event %d = %q, want %q", i+1, got, want)
		}
	}

	// Sealed after the noted event: the seal keeps the note.
	ref = journal.Ref{ID: "note-seal", Gen: 1}
	w = j.NewWriter(ref, func(journal.Event) {})
	if err := w.AppendNoted(ctx, "t", []byte("1"), "usage"); err != nil { // the first event, the fence
		t.Fatal(err)
	}
	w.Abort()
	if _, sealed, err := j.Seal(ctx, ref, endAs(journal.EndCompleted)); err != nil || !sealed {
		t.Fatalf("Seal: %v, %v", sealed, err)
	}
	note(ref, "usage")

	for _, bad := range []string{"a\nb", "a\rb", " a", "a ", strings.Repeat("x", journal.MaxNote+1)} {
		w := j.NewWriter(journal.Ref{ID: "note-bad", Gen: 1}, func(journal.Event) {})
		if err := w.AppendNoted(ctx, "t", []byte("1"), bad); !errors.Is(err, journal.ErrInvalidOption) {
			t.Errorf("AppendNoted(%q) = %v, want ErrInvalidOption", bad, err)
		}
		w.Abort()
	}
}
