package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/stream/proxy"
	"github.com/reprise-dev/reprise/tests/testutil"
	"github.com/reprise-dev/reprise/web/mockllm"
)

// TestNATSStallSettlesLateAppends: NATS stops answering (every byte held,
// as when its server is paused) while a generation's last message is on
// its way — its content and the upstream's [DONE] — for longer than the
// journal's append timeout. The writer gives up; when NATS answers again,
// the held message is stored after all. The journal and the record must
// then agree: a journal whose readers get [DONE] belongs to a completed
// key, which replays instead of generating again, and a failed key's
// journal holds no [DONE]. (Before, the key was recorded failed
// journal_failure while its journal replayed [DONE]; its next request
// generated and billed a second answer.)
func TestNATSStallSettlesLateAppends(t *testing.T) {
	t.Parallel()
	natsURL, g := pausableNATS(t)
	// The upstream answers its first event, then — once the test has
	// stalled NATS — the rest and [DONE] at once.
	const tokens = 5
	release := make(chan struct{})
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(s string) string {
			return `data: {"id":"c` + strconv.Itoa(int(n)) + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
		}
		_, _ = io.WriteString(w, chunk("first "))
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		var rest strings.Builder
		for i := range tokens {
			rest.WriteString(chunk(fmt.Sprintf("t%d ", i)))
		}
		rest.WriteString("data: [DONE]\n\n")
		_, _ = io.WriteString(w, rest.String())
	}))
	t.Cleanup(up.Close)
	a := startInstance(t, "A", []string{natsURL}, up.URL, instanceOptions{
		lease: 10 * time.Second, replicas: 1, lenient: true,
		configure: func(c *proxy.Config) { c.Journal.AppendTimeout = time.Second },
	})
	key := "k-stall-late"
	body := chatBody(uniquePrompt(t, ""), true)
	resp := do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key)
	readEvents(t, resp, 1) // the first event is shown once stored: the fence is in
	g.hold()
	close(release)
	st := settleAfterGiveUp(t, a.URL, key, g)
	replay := readEvents(t, do(t, "GET", a.URL+"/v1/streams/"+key, "", "Accept", "text/event-stream"), -1)
	done := hasDone(replay)
	t.Logf("after the stall: the key is %s (%s); its journal replays %d events, [DONE]: %v", st.State, st.Error, len(replay), done)
	if done != (st.State == "completed") {
		t.Fatalf("the key is %s (%s) but its journal replays [DONE]: %v", st.State, st.Error, done)
	}
	again := do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key)
	evs := readEvents(t, again, -1)
	if st.State == "completed" {
		if again.Header.Get("Idempotent-Replayed") != "true" || !hasDone(evs) || calls.Load() != 1 {
			t.Errorf("the completed key's duplicate: replayed %q, [DONE] %v, upstream calls %d; want a replay and 1 call",
				again.Header.Get("Idempotent-Replayed"), hasDone(evs), calls.Load())
		}
	}
}

// settleAfterGiveUp waits for url's writer to give up on the stalled
// journal, lets NATS answer again (g), and returns key's status once it
// settled: completed or failed.
func settleAfterGiveUp(t *testing.T, url, key string, g *pauseGate) keyStatus {
	t.Helper()
	pollUntil(t, 20*time.Second, "the writer to give up on the stalled journal", func() bool {
		return appendErrors(t, url) >= 1
	})
	g.release()
	var st keyStatus
	pollUntil(t, 30*time.Second, "the key to settle", func() bool {
		var code int
		st, code = testutil.GetStatus(t, url, key)
		return code == http.StatusOK && (st.State == "completed" || st.State == "failed")
	})
	return st
}

// appendErrors is reprise_journal_errors_total{op="append"} on url's /metrics.
func appendErrors(tb testing.TB, url string) float64 {
	tb.Helper()
	const series = `reprise_journal_errors_total{op="append"} `
	for line := range strings.Lines(readBody(tb, do(tb, "GET", url+"/metrics", ""))) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("%q: %v", line, err)
			}
			return f
		}
	}
	tb.Fatalf("%s is not on %s/metrics", series, url)
	return 0
}

// TestNATSStallUnansweredStart: a POST sent while NATS is stalled gets 503
// (its record's create got no answer), and the create is applied when NATS
// answers again. Nothing runs the generation that record names: the key's
// next request must generate, not attach to it and wait for a first event
// nobody writes. (Before, it waited for the lease to lapse — a lapse that
// every attach put off.)
func TestNATSStallUnansweredStart(t *testing.T) {
	if testing.Short() {
		t.Skip("stalls NATS for the record operations' retries (~13 s)")
	}
	t.Parallel()
	natsURL, g := pausableNATS(t)
	llm := httptest.NewServer(mockllm.New(mockllm.Config{}))
	t.Cleanup(llm.Close)
	a := startInstance(t, "A", []string{natsURL}, llm.URL, instanceOptions{lease: 10 * time.Second, replicas: 1, lenient: true})
	key := "k-stall-start"
	body := chatBody(uniquePrompt(t, "[tokens=5]"), true)
	g.hold()
	resp := do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key)
	readBody(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a POST while NATS is stalled: %d, want 503", resp.StatusCode)
	}
	g.release()
	// The create is applied now; the instance that answered 503 fails the
	// record it did not know it wrote, well within a lease.
	var st keyStatus
	var code int
	deadline := time.Now().Add(8 * time.Second)
	for st.State != "failed" {
		if time.Now().After(deadline) {
			t.Fatalf("the late create's record: HTTP %d, %+v after 8 s; want failed", code, st)
		}
		time.Sleep(testutil.PollInterval) // polling a server's state; bounded above
		st, code = testutil.GetStatus(t, a.URL, key)
	}
	again := do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key)
	evs := readEvents(t, again, -1)
	if !hasDone(evs) || again.Header.Get("Reprise-Attached") == "true" {
		t.Errorf("the key's next request: attached %q, %d events, [DONE] %v; want a generation of its own",
			again.Header.Get("Reprise-Attached"), len(evs), hasDone(evs))
	}
}

// TestNATSStallSealAfterLastMessage: NATS stops answering while a
// generation's message before its [DONE] is on its way; the upstream's
// [DONE] comes after, queued behind it. The writer gives up; when NATS
// answers again the held message is stored, and the seal stores the
// journal_failure reason and the end marker right after it — at the very
// offsets the writer's [DONE] and end marker would have had. That end is
// the seal's, not the writer's: the key is failed, no reader is shown the
// [DONE] that was never stored, and its journal replays the failure.
// (Before, the coinciding offset was taken for the writer's own end: the
// owner's readers got [DONE] and the record said completed while every
// replay ended with journal_failure.)
func TestNATSStallSealAfterLastMessage(t *testing.T) {
	t.Parallel()
	natsURL, g := pausableNATS(t)
	const tokens = 5
	rest, done := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(s string) string {
			return `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
		}
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, chunk("first "))
		_ = rc.Flush()
		for _, step := range []chan struct{}{rest, done} {
			select {
			case <-step:
			case <-r.Context().Done():
				return
			}
			if step == rest {
				var b strings.Builder
				for i := range tokens {
					b.WriteString(chunk(fmt.Sprintf("tok%d ", i)))
				}
				_, _ = io.WriteString(w, b.String())
			} else {
				_, _ = io.WriteString(w, "data: [DONE]\n\n")
			}
			_ = rc.Flush()
		}
	}))
	t.Cleanup(up.Close)
	a := startInstance(t, "A", []string{natsURL}, up.URL, instanceOptions{
		lease: 10 * time.Second, replicas: 1, lenient: true,
		configure: func(c *proxy.Config) { c.Journal.AppendTimeout = time.Second },
	})
	key := "k-stall-seal"
	resp := do(t, "POST", a.URL+chatPath, chatBody(uniquePrompt(t, ""), true), "Idempotency-Key", key)
	shownFirst, first := make(chan struct{}), make(chan []event, 1)
	go func() {
		defer resp.Body.Close()
		var evs []event
		for ev, err := range sse.Read(resp.Body, nil) {
			if err != nil {
				break
			}
			if evs = append(evs, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data}); len(evs) == 1 {
				close(shownFirst)
			}
		}
		first <- evs
	}()
	select {
	case <-shownFirst:
	case <-time.After(testutil.WaitTimeout):
		t.Fatal("no first event")
	}
	// It is shown before it is stored: the fence is in once the key says so.
	pollUntil(t, testutil.WaitTimeout, "the first event stored", func() bool {
		st, _ := testutil.GetStatus(t, a.URL, key)
		return st.Events >= 1
	})
	g.hold()
	close(rest)
	pollUntil(t, 20*time.Second, "the message with the last token on its way, held", func() bool {
		return g.holds(fmt.Sprintf("tok%d ", tokens-1))
	})
	close(done) // [DONE] comes now, behind the held message
	st := settleAfterGiveUp(t, a.URL, key, g)
	shown := <-first
	replay := readEvents(t, do(t, "GET", a.URL+"/v1/streams/"+key, "", "Accept", "text/event-stream"), -1)
	t.Logf("the key is %s (%s); the owner's reader got %d events ([DONE] %v), the journal replays %d ([DONE] %v)",
		st.State, st.Error, len(shown), hasDone(shown), len(replay), hasDone(replay))
	if hasDone(shown) != hasDone(replay) || hasDone(replay) != (st.State == "completed") {
		t.Fatalf("the key is %s (%s), its reader got [DONE]: %v, its journal replays [DONE]: %v", st.State, st.Error, hasDone(shown), hasDone(replay))
	}
	byID := map[string]event{}
	for _, ev := range append(shown, replay...) {
		if prev, ok := byID[ev.ID]; ok && ev.ID != "" && (prev.Type != ev.Type || prev.Data != ev.Data) {
			t.Errorf("id %s names two events: %s %q and %s %q", ev.ID, prev.Type, prev.Data, ev.Type, ev.Data)
		}
		byID[ev.ID] = ev
	}
}

// TestNATSStallUnsettledReasonHasNoID: NATS stops answering before a
// generation's first event is stored, for longer than the writer and then
// the seal try. Nothing is known of the journal — the held message may
// still be stored — so the reason the owner's readers get carries no id:
// their cursor stays where it was, and a resume reads what the journal
// holds once settled. (Before, the reason took offset 1, id 1-1-0, while
// the journal, once NATS answered, held the upstream's first event there.)
// The upstream's first event is shown before it is stored (its fence): the
// reason comes after it, and leaves the reader's cursor on it.
func TestNATSStallUnsettledReasonHasNoID(t *testing.T) {
	t.Parallel()
	natsURL, g := pausableNATS(t)
	called, start := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_ = http.NewResponseController(w).Flush()
		close(called)
		select {
		case <-start:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"first"}}]}`+"\n\n"+"data: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	a := startInstance(t, "A", []string{natsURL}, up.URL, instanceOptions{
		lease: 10 * time.Second, replicas: 1, lenient: true,
		configure: func(c *proxy.Config) { c.Journal.AppendTimeout = time.Second },
	})
	t.Cleanup(g.release)
	evs := make(chan []event, 1)
	go func() {
		resp, err := send(waitCtx(t, 60*time.Second), "POST", a.URL+chatPath, chatBody(uniquePrompt(t, ""), true), "Idempotency-Key", "k-stall-unsettled")
		if err != nil {
			evs <- nil
			return
		}
		defer resp.Body.Close()
		var got []event
		for ev, err := range sse.Read(resp.Body, nil) {
			if err != nil {
				break
			}
			got = append(got, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data})
		}
		evs <- got
	}()
	select {
	case <-called:
	case <-time.After(testutil.WaitTimeout):
		t.Fatal("the upstream was not called")
	}
	g.hold()
	close(start)
	var got []event
	select {
	case got = <-evs:
	case <-time.After(time.Minute):
		t.Fatal("the owner's reader got no end")
	}
	if len(got) != 2 || got[0].Type != "" || got[1].Type != "error" || !strings.Contains(got[1].Data, "journal_failure") {
		t.Fatalf("the owner's reader got %+v, want the first event, then an error event, journal_failure", got)
	}
	// ID is the reader's last event id: an event without one leaves it.
	if got[0].ID == "" || got[1].ID != got[0].ID {
		t.Errorf("the reason for an unsettled journal moved the cursor from %q to %q: it carries an id", got[0].ID, got[1].ID)
	}
}
