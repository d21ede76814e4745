package tests

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestChaosOwnerLostResumeAfterCursor: a reprise binary is SIGKILLed a few
// events into a generation (before its first lease heartbeat stored an
// event count); once the lease expired, the client resumes through the
// surviving instance with its Last-Event-ID. It must get the rest of the
// journaled generation and event: error owner_lost, exactly what a reader
// from the start gets after that point — not 204, which tells an
// EventSource the stream is over (stream/get.go finalEvents). With the
// journal's linger off the
// journal holds more than the client saw; with the defaults (the events
// shown linger --journal-linger-alone, 1 s) it holds less: the events the
// client saw past it were never stored, and its cursor gets the reason the
// generation failed, and the end (docs/live-path.md, guarantee 4).
func TestChaosOwnerLostResumeAfterCursor(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"stored at once", []string{"--journal-linger", "0", "--journal-linger-alone", "0"}},
		{"lingering", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, withNATSPort(), withLease(time.Second))
			a := startProcess(t, e, c.flags...)
			prompt := uniquePrompt(t, "[tokens=400] [delay=10ms]")
			first := readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-stale"), 5)
			// The generation goes on without its client; kill its owner a few events
			// later, still before its first heartbeat (lease/3) stored a count.
			if err := e.LLM.Ledger().WaitEvents(waitCtx(t, 10*time.Second), prompt, 12); err != nil {
				t.Fatal(err)
			}
			sigkill(t, a)
			st := waitState(t, e, "k-stale", "failed")
			full := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-stale", ""), -1)
			t.Logf("record: %+v; the journal holds %d events, the client saw %d", st, len(full)-1, len(first))
			last := full[len(full)-1]
			if last.Type != "error" || !strings.Contains(last.Data, "owner_lost") {
				t.Fatalf("a reader from the start ends with %+v, want event: error owner_lost", last)
			}
			want := []event{last} // the client saw past what was stored: only the reason
			if len(full) > len(first) {
				want = full[len(first):]
			} else if c.flags != nil {
				t.Fatalf("the journal holds %d events with its linger off, the client saw %d before the owner went on for 7 more", len(full)-1, len(first))
			}
			resp := do(t, "GET", e.URL+"/v1/streams/k-stale", "", "Last-Event-ID", lastID(first))
			if resp.StatusCode == http.StatusNoContent {
				resp.Body.Close()
				t.Fatalf("cursor %s into a generation whose owner died: 204, though the journal holds %d events and the owner_lost error after it (record events=%d)",
					lastID(first), len(full)-1, st.Events)
			}
			if rest := readEvents(t, resp, -1); !slices.Equal(rest, want) {
				t.Fatalf("resumed after %s: %+v, want %+v", lastID(first), rest, want)
			}
			// At the owner_lost error itself the stream is over (no endless
			// EventSource reconnects, each getting another error).
			end := do(t, "GET", e.URL+"/v1/streams/k-stale", "", "Last-Event-ID", lastID(full))
			end.Body.Close()
			if end.StatusCode != http.StatusNoContent {
				t.Errorf("cursor at the owner_lost error %s: HTTP %d, want 204", lastID(full), end.StatusCode)
			}
		})
	}
}

// pinFirstAppend is what TestChaosFirstAppendCutEndsInAckTimeout pins.
const pinFirstAppend = "a generation's first append (journal/writer.go first: a synchronous, fenced publish) is bounded " +
	"by the journal's ack timeout (journal.DefaultAckTimeout), not by the generation's own deadline " +
	"(MaxGeneration, 30 min): nats.go applies its request timeout only to contexts without a deadline, and " +
	"a request in flight when the connection drops gets no reply after the reconnect. Unbounded, the generation " +
	"would hang (key in_progress, 0 events, clients getting only pings, graceful shutdown timing out) while its " +
	"upstream generation completed and was billed"

// TestChaosFirstAppendCutEndsInAckTimeout: the link between reprise and NATS (a
// toxiproxy link) is cut exactly when a generation's first append goes
// out: the upstream answers 503 with retry-after-ms=400 first, and during
// that wait the link gets a limit_data of 0 bytes toward NATS. reprise
// reconnects to NATS directly. The client must hear how the generation
// ended within the journal's ack timeout (10s): [DONE] or an error event.
func TestChaosFirstAppendCutEndsInAckTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the journal's 10s ack timeout")
	}
	e := newEnv(t, withNATSPort())
	l, err := newToxi().link(strings.TrimPrefix(e.natsURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	a := startInstance(t, "A", []string{"nats://" + l.addr, e.natsURL()}, e.llmSrv.URL,
		instanceOptions{replicas: 1, lease: 30 * time.Second, grace: 100 * time.Millisecond, lenient: true})
	prompt := uniquePrompt(t, "[tokens=20] [status=503] [retry_after_ms=400]")
	type result struct {
		evs []event
		err error
	}
	done := make(chan result, 1)
	go func() {
		evs, err := fetchEvents(waitCtx(t, 30*time.Second), "POST", a.URL+chatPath, chatBody(prompt, true), 0, nil, "Idempotency-Key", "k-first")
		done <- result{evs, err}
	}()
	pollUntil(t, 10*time.Second, "the upstream's 503", func() bool { return e.LLM.Ledger().Get(prompt).Requests >= 1 })
	if err := l.addCloser("cut", "limit_data", "upstream", map[string]any{"bytes": 0}); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		last := r.evs[len(r.evs)-1]
		t.Logf("%s after the cut the client got %d events, the last %+v", time.Since(cut).Round(time.Millisecond), len(r.evs), last)
		if last.Data != "[DONE]" && last.Type != "error" {
			t.Fatalf("the stream ended with %+v", last)
		}
	case <-time.After(14 * time.Second):
		st, _ := getStatus(t, e, "k-first")
		t.Fatalf("%s (here: 14s after the cut the key is %s with %d events, the upstream %+v)", pinFirstAppend, st.State, st.Events, e.LLM.Ledger().Get(prompt))
	}
}

// pinCompletedNotLost is what TestChaosSlowJournalReadsCompletedKeyWhole pins.
const pinCompletedNotLost = "a reader of a completed generation reads it to its end however slow each journal read is " +
	"(a loaded or failing-over JetStream): a Completed record is never taken for a lost owner (stream/follow.go " +
	"ownerLost: only OwnerLost, a newer generation, or a failure whose end marker could not be stored, " +
	"journal_failure, are), and the idle tick (min(Heartbeat, Lease/2)) does not cancel a read in flight (with a " +
	"round trip above the idle interval every read would be cancelled and the reader make no progress)"

// TestChaosSlowJournalReadsCompletedKeyWhole: instance B's link to NATS gets
// 1.2s of latency (toxiproxy); a key completed earlier is read through B.
// The client must get the whole stream and [DONE], however slowly.
func TestChaosSlowJournalReadsCompletedKeyWhole(t *testing.T) {
	if testing.Short() {
		t.Skip("reads through a slow link")
	}
	e := newEnv(t, withNATSPort())
	prompt := uniquePrompt(t, "[tokens=0]")
	want := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-slow"), -1)
	l, err := newToxi().link(strings.TrimPrefix(e.natsURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	b := startInstance(t, "B", []string{"nats://" + l.addr}, e.llmSrv.URL, instanceOptions{replicas: 1, lease: 2 * time.Second, grace: time.Second, lenient: true})
	if err := l.add("slow", "latency", "downstream", map[string]any{"latency": 1200}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := fetchEvents(waitCtx(t, 40*time.Second), "GET", b.URL+"/v1/streams/k-slow", "", 0, nil)
	t.Logf("read through the slow link in %s: %d events, %v", time.Since(start).Round(time.Millisecond), len(got), err)
	if len(got) > 0 {
		if last := got[len(got)-1]; last.Type == "error" && strings.Contains(last.Data, "owner_lost") {
			// Its id takes the offset of a real event: a client resuming
			// after it (as EventSource does), even on a fast instance, never
			// gets that event.
			rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-slow", "", "Last-Event-ID", last.ID), -1)
			t.Fatalf("%s (here: %d of %d events, then %s; a client resuming after it gets %v: the real event at that offset is lost to it)",
				pinCompletedNotLost, len(got)-1, len(want), last.ID, ids(rest))
		}
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("a completed key read through a slow link: %d events (%v), want the %d it completed with", len(got), err, len(want))
	}
}

// pinDoneStaysCompleted is what TestChaosOwnerDiedAfterDoneStaysCompleted pins.
const pinDoneStaysCompleted = "an owner that dies after journaling its generation's terminal event ([DONE], or the " +
	"completed end marker too) but before finishing its record leaves the key completed: before a generation is " +
	"marked owner_lost, the journal's last event is read (journal.Last), and a completed end marker or a terminal " +
	"event finishes the record as completed with that event count (the salvage: resume.Salvager, engine Salvage, " +
	"journal.Seal). Otherwise clients that got [DONE] would hold a result the key lacks: the next request with " +
	"the key would generate again (billed twice) and replays would serve another answer"

// sameContent reports whether two event streams carry the same types and
// data (ids aside).
func sameContent(a, b []event) bool {
	return slices.EqualFunc(a, b, func(x, y event) bool { return x.Type == y.Type && x.Data == y.Data })
}

// TestChaosOwnerDiedAfterDoneStaysCompleted plays what a reprise instance killed
// between its last journal append and its record update leaves behind,
// with the real journal and resume packages: a "ghost" owner on its own
// NATS connection begins the key, journals the upstream's whole stream
// (and, in one case, the completed end marker), then loses its connection
// before finishing the record. The surviving instance must treat the key
// as the completed generation it is: replay it, not generate again.
func TestChaosOwnerDiedAfterDoneStaysCompleted(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease")
	}
	for _, withEnd := range []bool{true, false} {
		name := map[bool]string{true: "end marker stored", false: "[DONE] stored, no end marker"}[withEnd]
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, withNATSPort(), withLease(time.Second))
			prompt := uniquePrompt(t, "[tokens=6]")
			body := chatBody(prompt, true)
			key := "k-ghost"
			id := resume.StreamID("anonymous", key)
			ctx := waitCtx(t, 30*time.Second)

			ghost, j := beginOutside(t, e, "ghost", key, body, nil)
			// The upstream's stream, journaled event by event.
			upstream := readEvents(t, do(t, "POST", e.llmSrv.URL+chatPath, body), -1)
			var acked atomic.Int64
			w := j.NewWriter(journal.Ref{ID: id, Gen: 1}, func(journal.Event) { acked.Add(1) })
			for _, ev := range upstream {
				if err := w.Append(ctx, ev.Type, []byte(ev.Data)); err != nil {
					t.Fatal(err)
				}
			}
			if withEnd {
				if err := w.End(ctx, journal.EndCompleted); err != nil {
					t.Fatal(err)
				}
			} else {
				pollUntil(t, 10*time.Second, "the appends' acks", func() bool { return acked.Load() == int64(len(upstream)) })
				w.Abort()
			}
			last, err := j.Last(ctx, journal.Ref{ID: id, Gen: 1})
			if err != nil {
				t.Fatal(err)
			}
			ghost.Close()                       // the owner dies here: no lease.Finish
			time.Sleep(1500 * time.Millisecond) // the lease (1s) runs out
			replay := readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, ""), -1)
			st := waitState(t, e, key, "completed")
			resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
			again := readEvents(t, resp, -1)
			gens := e.LLM.Ledger().Get(prompt).Generations
			t.Logf("journal: %d events, last offset %d (end %q); record %+v; a reader got %d events ending %s %.40q; a POST got %q replayed=%q ending %.20q; upstream generations %d",
				len(upstream), last.Offset, last.End, st, len(replay), replay[len(replay)-1].Type, replay[len(replay)-1].Data,
				again[0].ID, resp.Header.Get("Idempotent-Replayed"), again[len(again)-1].Data, gens)
			if st.Error == resume.OwnerLost || gens > 1 {
				t.Fatalf("%s (here: the journal holds all %d events and [DONE]; the key became %s %s, %d generations)", pinDoneStaysCompleted, len(upstream), st.State, st.Error, gens)
			}
			if st.Events != len(upstream) || !sameContent(replay, upstream) {
				t.Fatalf("record events %d, a reader got %d events; the upstream sent %d", st.Events, len(replay), len(upstream))
			}
			if gens != 1 || resp.Header.Get("Idempotent-Replayed") != "true" || !slices.Equal(again[:len(upstream)], replay[:len(upstream)]) {
				t.Fatalf("the key did not replay its complete generation")
			}
		})
	}
}

// lapsingStore is a record store whose updates fail while lapsed is set:
// an owner cut off from the records bucket (a NATS outage) whose journal
// appends still go through.
type lapsingStore struct {
	*journal.Journal
	lapsed atomic.Bool
}

var errLapsed = errors.New("records unreachable (test)")

func (s *lapsingStore) Update(ctx context.Context, id string, value []byte, rev uint64) (uint64, bool, error) {
	if s.lapsed.Load() {
		return 0, false, errLapsed
	}
	return s.Journal.Update(ctx, id, value, rev)
}

// TestChaosOwnerOutlivedLeaseIsFenced: an owner that cannot renew its lease but
// can still journal (the records' RAFT group recovers after the stream's)
// keeps generating after its lease ran out. The instance that finds the
// lease expired records owner_lost; the owner must not then store the
// upstream's [DONE], which its readers (and every journal reader) would
// take for a result the record denies — the key would replay another
// generation than the one they got (reprise-chaos meets this during a NATS
// quorum loss). The generation is sealed with owner_lost right after its
// last stored event, fencing the owner.
func TestChaosOwnerOutlivedLeaseIsFenced(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease")
	}
	e := newEnv(t, withNATSPort(), withLease(time.Second))
	prompt := uniquePrompt(t, "[tokens=5]")
	body := chatBody(prompt, true)
	key := "k-outlived"
	id := resume.StreamID("anonymous", key)
	ref := journal.Ref{ID: id, Gen: 1}
	ctx := waitCtx(t, 30*time.Second)

	var store *lapsingStore
	_, j := beginOutside(t, e, "cut-off", key, body, func(j *journal.Journal) resume.Store {
		store = &lapsingStore{Journal: j}
		return store
	})
	store.lapsed.Store(true) // renewals fail from now on; appends do not
	upstream := readEvents(t, do(t, "POST", e.llmSrv.URL+chatPath, body), -1)
	var acked atomic.Int64
	w := j.NewWriter(ref, func(journal.Event) { acked.Add(1) })
	defer w.Abort()
	for _, ev := range upstream[:3] {
		if err := w.Append(ctx, ev.Type, []byte(ev.Data)); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, 10*time.Second, "3 appends acknowledged", func() bool { return acked.Load() == 3 })

	// A reader on the instance waits; the lease runs out; it ends with owner_lost.
	got := readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, ""), -1)
	st := waitState(t, e, key, "failed")
	if last := got[len(got)-1]; len(got) != 4 || last.Type != "error" || !strings.Contains(last.Data, "owner_lost") {
		t.Fatalf("reader got %d events ending %+v, want the 3 stored and owner_lost", len(got), last)
	}
	// The owner, still running, journals the rest and [DONE]: fenced.
	for _, ev := range upstream[3:] {
		_ = w.Append(ctx, ev.Type, []byte(ev.Data))
	}
	if err := w.End(ctx, journal.EndCompleted); !errors.Is(err, journal.ErrFenced) {
		last, _ := j.Last(ctx, ref)
		t.Fatalf("the owner's end after its lease was declared lost: %v (journal ends %+v; record %+v), want ErrFenced — %s",
			err, last, st, "a [DONE] stored after owner_lost")
	}
	// Every reader of generation 1 sees what the first one saw.
	again := readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", got[0].ID), -1)
	if !slices.Equal(again, got[1:]) {
		t.Fatalf("a later reader got %+v, want %+v", again, got[1:])
	}
	// The key regenerates, once.
	fresh := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key), -1)
	if fresh[len(fresh)-1].Data != "[DONE]" || !strings.HasPrefix(fresh[0].ID, "2-") {
		t.Fatalf("the key did not regenerate as generation 2: %+v … %+v", fresh[0], fresh[len(fresh)-1])
	}
}

// beginOutside begins generation 1 of key (a streamed chat of body, in the
// anonymous tenant) as an owner outside the instances under test: its own
// NATS connection, journal and resume manager (lease 1 s), whose record
// store wrap may replace (nil: the journal's). The connection closes with
// the test; closing it earlier is the owner's death.
func beginOutside(t *testing.T, e *env, owner, key, body string, wrap func(*journal.Journal) resume.Store) (*nats.Conn, *journal.Journal) {
	t.Helper()
	ctx := waitCtx(t, 30*time.Second)
	nc, err := nats.Connect(e.natsURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := journal.Open(ctx, nc, journal.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var store resume.Store = j
	if wrap != nil {
		store = wrap(j)
	}
	rm, err := resume.New(resume.Config{Store: store, Owner: owner, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	id := resume.StreamID("anonymous", key)
	out, err := rm.Begin(ctx, resume.Request{ID: id, Key: key, Path: chatPath, Fingerprint: resume.Fingerprint(chatPath, []byte(body)), Stream: true})
	if err != nil || out.Decision != resume.Start {
		t.Fatalf("%s Begin: %+v, %v", owner, out.Decision, err)
	}
	return nc, j
}

// pinReaderOwnError is what TestChaosNodeDeathUnderReaderKeepsOwnError pins.
const pinReaderOwnError = "a reader following a generation from the journal on another instance than its owner ends " +
	"with the generation's own error event when the (alive) owner fails the generation while a NATS node dies " +
	"under the reader, never with a made-up owner_lost: a Failed record whose error is not journal_failure has " +
	"its end marker stored (the pump's end, or the salvage's seal, comes first), so the reader keeps reading like " +
	"for a Completed one (journal.Reader gives up after readRetry with an error of its own); only journal_failure, " +
	"a vanished key and a newer generation whose predecessor may lack an end marker leave nothing to wait for"

// TestChaosNodeDeathUnderReaderKeepsOwnError: instances A and B on node n0 of
// a 3-node cluster; A runs a generation whose upstream writes 5 events and
// stalls (A's idle timeout fails it, upstream_interrupted, 2 s later); B
// follows it from the journal, and once B's reader has caught up, a node
// other than n0 — the stream's leader, which republishes what the stream
// stores to the readers' topics, when it is not n0 — is shut down. B's
// reader must end exactly as a reader from the start does afterwards: the
// 5 events, then the generation's own error event.
func TestChaosNodeDeathUnderReaderKeepsOwnError(t *testing.T) {
	cw := newClusterWorld(t)
	idle := func(cfg *proxy.Config) { cfg.Limits.IdleTimeout = 2 * time.Second }
	a := startInstance(t, "A", cw.c.urlsFrom(0), cw.llmURL, instanceOptions{lease: 4 * time.Second, configure: idle})
	b := startInstance(t, "B", cw.c.urlsFrom(0), cw.llmURL, instanceOptions{lease: 4 * time.Second})
	ctx := waitCtx(t, 60*time.Second)
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}

	prompt := uniquePrompt(t, "[tokens=40] [hang_after=5]")
	const key = "k-stalled-reader"
	readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key), 5)

	type result struct {
		evs []event
		err error
	}
	done := make(chan result, 1)
	caughtUp := make(chan struct{})
	go func() {
		evs, err := fetchEvents(ctx, "GET", b.URL+"/v1/streams/"+key, "", 5, func() { close(caughtUp) })
		done <- result{evs, err}
	}()
	select {
	case <-caughtUp:
	case r := <-done:
		t.Fatalf("B's reader ended before its 5 events: %+v, %v", r.evs, r.err)
	}
	st, err := js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %+v, %v", info, err)
	}
	victim := 1
	if info.Cluster.Leader != cw.c.names[0] {
		victim = cw.c.index(info.Cluster.Leader)
	}
	kill := time.Now()
	cw.c.kill(victim)
	t.Logf("killed %s (the stream's leader: %s)", cw.c.names[victim], info.Cluster.Leader)
	r := <-done
	took := time.Since(kill).Round(time.Millisecond)
	rec, _ := clusterStatus(t, a.URL, key)
	full := readEvents(t, do(t, "GET", a.URL+"/v1/streams/"+key, ""), -1)
	t.Logf("B's reader ended %s after the kill with %d events (%v), the last %+v; the record %+v; a reader from the start gets %d events, the last %+v",
		took, len(r.evs), r.err, r.evs[len(r.evs)-1], rec, len(full), full[len(full)-1])
	if last := r.evs[len(r.evs)-1]; last.Type == "error" && strings.Contains(last.Data, "owner_lost") && rec.Error != "owner_lost" {
		t.Fatalf("%s (here: B's reader got %s owner_lost %s after the kill; the record says %s %s; the journal has %+v at that offset)",
			pinReaderOwnError, last.ID, took, rec.State, rec.Error, full[len(r.evs)-1])
	}
	if r.err != nil || !slices.Equal(r.evs, full) {
		t.Fatalf("B's reader got %+v (%v), want the generation as stored: %+v", r.evs, r.err, full)
	}
}
