package tests

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestCursorPastTheEnd: every reader's cursor is checked against what its
// key holds, on every path — GET on the owner and on another instance,
// POST attach and POST replay: one past anything stored is 400 (it was
// never issued), one at the end of a finished generation is 204. Accepted,
// a cursor past the end would leave its reader waiting forever with pings,
// holding the generation's memory.
func TestCursorPastTheEnd(t *testing.T) {
	t.Parallel()
	ns := startNATSServer(t)
	urls := []string{ns.Server.ClientURL()}
	hs := httptest.NewServer(mockllm.New(mockllm.Config{}))
	t.Cleanup(hs.Close)
	opts := instanceOptions{lease: 10 * time.Second, replicas: 1, grace: time.Second, lenient: true}
	a := startInstance(t, "A", urls, hs.URL, opts)
	b := startInstance(t, "B", urls, hs.URL, opts)

	past := func(p resume.Position, by uint64) string { p.Offset += by; p.Seq = 0; return p.String() }
	expect := func(what string, resp *http.Response, status int) {
		t.Helper()
		if status == http.StatusBadRequest {
			testutil.ExpectAPIError(t, resp, status, "invalid_last_event_id")
			return
		}
		readBody(t, resp)
		if resp.StatusCode != status {
			t.Errorf("%s: HTTP %d, want %d", what, resp.StatusCode, status)
		}
	}

	// A live generation on A: 2 events stored, then the upstream waits.
	livePrompt := uniquePrompt(t, "[tokens=10] [hang_after=2]")
	first := do(t, "POST", a.URL+chatPath, chatBody(livePrompt, true), "Idempotency-Key", "k-live")
	defer first.Body.Close()
	evs := readEvents(t, first, 2)
	at, err := resume.ParsePosition(lastID(evs))
	if err != nil {
		t.Fatal(err)
	}
	// The owner knows what it showed; another instance knows what is
	// stored, and that the owner may have shown up to a writer's window
	// more (docs/live-path.md).
	expect("GET past what the owner showed", do(t, "GET", a.URL+"/v1/streams/k-live", "", "Last-Event-ID", past(at, 5)), 400)
	expect("POST attach past what the owner showed",
		do(t, "POST", a.URL+chatPath, chatBody(livePrompt, true), "Idempotency-Key", "k-live", "Last-Event-ID", past(at, 1)), 400)
	beyond := uint64(journal.DefaultWindow + 2)
	expect("GET on B past the owner's window", do(t, "GET", b.URL+"/v1/streams/k-live", "", "Last-Event-ID", past(at, beyond)), 400)
	expect("POST attach on B past the owner's window",
		do(t, "POST", b.URL+chatPath, chatBody(livePrompt, true), "Idempotency-Key", "k-live", "Last-Event-ID", past(at, beyond)), 400)
	// At the stored end of a live generation, or within the window past
	// it, the reader waits for more. The owner stores what it showed
	// within its linger (--journal-linger-alone while nobody else follows
	// the generation: docs/live-path.md); the window is counted from what
	// is stored, which B's status reports.
	testutil.Eventually(t, 10*time.Second, "the 2 events shown to be stored, as B sees it", func() bool {
		st, _ := clusterStatus(t, b.URL, "k-live")
		return st.Events >= 2
	})
	for _, cur := range []string{at.String(), past(at, 5), past(at, beyond-1)} {
		resp := do(t, "GET", b.URL+"/v1/streams/k-live", "", "Last-Event-ID", cur)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET at %s of a live generation (2 stored) on B: %d, want 200", cur, resp.StatusCode)
		}
	}

	// A completed generation.
	donePrompt := uniquePrompt(t, "[tokens=3]")
	all := readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(donePrompt, true), "Idempotency-Key", "k-done"), -1)
	checkComplete(t, all, donePrompt, 3)
	end, err := resume.ParsePosition(lastID(all))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "k-done to be completed", func() bool {
		st, _ := clusterStatus(t, b.URL, "k-done")
		return st.State == "completed"
	})
	for _, base := range []string{a.URL, b.URL} {
		expect("GET at the end", do(t, "GET", base+"/v1/streams/k-done", "", "Last-Event-ID", end.String()), 204)
		expect("POST replay at the end",
			do(t, "POST", base+chatPath, chatBody(donePrompt, true), "Idempotency-Key", "k-done", "Last-Event-ID", end.String()), 204)
		expect("GET past the end", do(t, "GET", base+"/v1/streams/k-done", "", "Last-Event-ID", past(end, 1)), 400)
		expect("POST replay past the end",
			do(t, "POST", base+chatPath, chatBody(donePrompt, true), "Idempotency-Key", "k-done", "Last-Event-ID", past(end, 100)), 400)
		expect("GET into a generation that does not exist",
			do(t, "GET", base+"/v1/streams/k-done", "", "Last-Event-ID", resume.Position{Gen: 2, Offset: 1}.String()), 400)
	}
	// A failed generation (its upstream broke after 2 events: the error
	// event is its third, the end marker its fourth). A cursor past it
	// names an event its owner may have shown before the journal lost it:
	// the reader is told why the generation failed, on every instance.
	failPrompt := uniquePrompt(t, "[tokens=5] [abort_after=2]")
	failed := readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(failPrompt, true), "Idempotency-Key", "k-failed"), -1)
	if len(failed) == 0 || lastEvent(t, failed).Type != "error" {
		t.Fatalf("the failing generation: %+v; want it to end with an error event", failed)
	}
	reason, err := resume.ParsePosition(lastID(failed))
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "k-failed to be failed", func() bool {
		st, _ := clusterStatus(t, b.URL, "k-failed")
		return st.State == "failed"
	})
	shown := resume.Position{Gen: reason.Gen, Offset: reason.Offset + 3, Seq: reason.Seq} // as a preview's id
	for _, base := range []string{a.URL, b.URL} {
		expect("GET at a failed generation's reason", do(t, "GET", base+"/v1/streams/k-failed", "", "Last-Event-ID", reason.String()), 204)
		// An error event an instance made itself, the journal failing
		// (ids with no journal sequence): its reader was told.
		expect("GET after an error event made by an instance", do(t, "GET", base+"/v1/streams/k-failed", "", "Last-Event-ID", past(reason, 3)), 204)
		evs := readEvents(t, do(t, "GET", base+"/v1/streams/k-failed", "", "Last-Event-ID", shown.String()), -1)
		if len(evs) != 1 || evs[0].Type != "error" || evs[0].Data != lastEvent(t, failed).Data || evs[0].ID != reason.String() {
			t.Errorf("GET on %s past a failed generation's end: %+v; want only its error event %+v", base, evs, lastEvent(t, failed))
		}
	}

	// Nothing was lost: the key replays whole.
	checkComplete(t, readEvents(t, do(t, "GET", b.URL+"/v1/streams/k-done", ""), -1), donePrompt, 3)
}

// TestCursorUnsureIsNotRefused: a cursor past what an instance knows of
// its key — past its own tail of the generation it runs, or of a
// generation its record does not know — is refused 400 only when the
// journal confirms nothing stored reaches it. While the journal cannot
// answer (here its connection is held, the records' is not: an instance
// whose view lags) the answer is 503 with Retry-After: a 4xx is final for
// EventSource, the SDKs and the helpers, and the cursor may be valid (an
// instance that took the generation over stored it). Once the journal
// answers, the same cursors are 400.
func TestCursorUnsureIsNotRefused(t *testing.T) {
	t.Parallel()
	ns := startNATSServer(t)
	gated, gate := gatedLink(t, ns)
	hs := httptest.NewServer(mockllm.New(mockllm.Config{}))
	t.Cleanup(hs.Close)
	direct, err := nats.Connect(ns.Server.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	a := startInstance(t, "A", []string{gated}, hs.URL, instanceOptions{lease: 10 * time.Second, replicas: 1, grace: time.Second, lenient: true,
		configure: func(c *proxy.Config) {
			c.Journal.Records = direct // the records answer; the journal is held
		}})
	prompt := uniquePrompt(t, "[tokens=2000] [delay=20ms]")
	resp := do(t, "POST", a.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-unsure")
	first := readEvents(t, resp, 3)
	last, err := resume.ParsePosition(lastID(first))
	if err != nil {
		t.Fatal(err)
	}
	beyond := resume.Position{Gen: 1, Offset: last.Offset + 5000, Seq: 1}.String() // past the owner's tail
	later := resume.Position{Gen: 2, Offset: 3, Seq: 1}.String()                   // a generation the record does not know
	gate.hold()
	t.Cleanup(gate.release) // a failure above must not leave the instance's shutdown waiting on it
	for _, cur := range []string{beyond, later} {
		start := time.Now()
		resp := do(t, "GET", a.URL+"/v1/streams/k-unsure", "", "Last-Event-ID", cur)
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("cursor %s with the journal held: no Retry-After", cur)
		}
		testutil.ExpectAPIError(t, resp, http.StatusServiceUnavailable, "journal_unavailable")
		t.Logf("cursor %s with the journal held: answered in %s", cur, time.Since(start))
	}
	gate.release()
	for _, cur := range []string{beyond, later} {
		testutil.ExpectAPIError(t, do(t, "GET", a.URL+"/v1/streams/k-unsure", "", "Last-Event-ID", cur), http.StatusBadRequest, "invalid_last_event_id")
	}
}
