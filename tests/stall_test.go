package tests

import (
	"context"
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

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestNATSStallSettlesLateAppends: NATS stops answering (every byte held,
// as when its server is paused) while a generation's last message is on
// its way — its content and the upstream's [DONE] — for longer than the
// journal's append timeout. The writer stalls and holds on to what it was
// given; when NATS answers again, all of it is stored. The journal and the
// record must then agree: a journal whose readers get [DONE] belongs to a
// completed key, which replays instead of generating again, and a failed
// key's journal holds no [DONE] (a key recorded failed while its journal
// replays [DONE] would generate, and bill, a second answer at its next
// request). Here the upstream had sent everything before the stall: the
// key completes.
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
	if st.State != "completed" || len(replay) != tokens+2 {
		t.Fatalf("the key is %s (%s) and replays %d events; want completed, with all %d", st.State, st.Error, len(replay), tokens+2)
	}
	again := do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key)
	evs := readEvents(t, again, -1)
	if again.Header.Get("Idempotent-Replayed") != "true" || !hasDone(evs) || calls.Load() != 1 {
		t.Errorf("the completed key's duplicate: replayed %q, [DONE] %v, upstream calls %d; want a replay and 1 call",
			again.Header.Get("Idempotent-Replayed"), hasDone(evs), calls.Load())
	}
}

// settleAfterGiveUp waits for url's writer to stall on the journal, lets
// NATS answer again (g), and returns key's status once it settled:
// completed or failed.
func settleAfterGiveUp(t *testing.T, url, key string, g *pauseGate) keyStatus {
	t.Helper()
	pollUntil(t, 20*time.Second, "the writer to stall on the journal", func() bool {
		return metricValue(t, url, "reprise_journal_stalls_total ") >= 1
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

// metricValue is the value of series (its name and labels, then a space) on
// url's /metrics.
func metricValue(tb testing.TB, url, series string) float64 {
	tb.Helper()
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
// nobody writes, rather than waiting for the lease to lapse (a lapse every
// attach would put off).
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
// [DONE] comes after, queued behind it, before the append timeout. The
// writer stalls and holds both; when NATS answers again the held message,
// then [DONE] and the end marker are stored: the key is completed, the
// owner's reader gets [DONE] only then, and every id names one event for
// the reader and the replay alike: no seal stores a journal_failure reason
// at [DONE]'s offset, and no reader gets [DONE] while replays end with
// journal_failure.
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
	if !hasDone(shown) || !hasDone(replay) || st.State != "completed" {
		t.Fatalf("the key is %s (%s), its reader got [DONE]: %v, its journal replays [DONE]: %v; want completed, [DONE] for both", st.State, st.Error, hasDone(shown), hasDone(replay))
	}
	byID := map[string]event{}
	for _, ev := range append(shown, replay...) {
		if prev, ok := byID[ev.ID]; ok && ev.ID != "" && (prev.Type != ev.Type || prev.Data != ev.Data) {
			t.Errorf("id %s names two events: %s %q and %s %q", ev.ID, prev.Type, prev.Data, ev.Type, ev.Data)
		}
		byID[ev.ID] = ev
	}
}

// TestNATSStallCutsTheUpstreamAndHoldsReaders: NATS stops answering after
// a generation's first event was shown, for longer than the journal's
// append timeout, and the upstream goes on streaming. The writer stalls:
// the upstream call is cut at its next event (it can no longer be
// journaled) and the generation fails with journal_failure — but its
// reader is told nothing it would have to take back: it waits, and once
// NATS answers again it gets the failure under the id the journal stored
// it at, after every event it was shown, which the journal holds too. A
// replay gives the same events under the same ids; the key is failed, and
// its next request generates afresh. The owner's reader is not told
// journal_failure while the journal's outcome is unknown: a key so failed
// could be found completed later, its [DONE] stored at the reason's id.
func TestNATSStallCutsTheUpstreamAndHoldsReaders(t *testing.T) {
	t.Parallel()
	natsURL, g := pausableNATS(t)
	more, cut := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		n := calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		chunk := func(s string) string {
			return `data: {"id":"c` + strconv.Itoa(int(n)) + `","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + s + `"}}]}` + "\n\n"
		}
		_, _ = io.WriteString(w, chunk("first"))
		_ = rc.Flush()
		if n > 1 {
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			return
		}
		select {
		case <-more:
		case <-r.Context().Done():
			return
		}
		for i := 0; ; i++ { // streams on until reprise hangs up
			if _, err := io.WriteString(w, chunk(fmt.Sprintf("more%d", i))); err != nil {
				break
			}
			if rc.Flush() != nil {
				break
			}
			select {
			case <-r.Context().Done():
				close(cut)
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		close(cut)
	}))
	t.Cleanup(up.Close)
	a := startInstance(t, "A", []string{natsURL}, up.URL, instanceOptions{
		lease: 10 * time.Second, replicas: 1, lenient: true,
		configure: func(c *proxy.Config) { c.Journal.AppendTimeout = time.Second },
	})
	t.Cleanup(g.release)
	key := "k-stall-cut"
	body := chatBody(uniquePrompt(t, ""), true)
	resp := do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key)
	first, evs := make(chan struct{}), make(chan []event, 1)
	go func() {
		defer resp.Body.Close()
		var got []event
		for ev, err := range sse.Read(resp.Body, nil) {
			if err != nil {
				break
			}
			if got = append(got, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data}); len(got) == 1 {
				close(first)
			}
		}
		evs <- got
	}()
	select {
	case <-first:
	case <-time.After(testutil.WaitTimeout):
		t.Fatal("no first event")
	}
	pollUntil(t, testutil.WaitTimeout, "the first event stored", func() bool {
		st, _ := testutil.GetStatus(t, a.URL, key)
		return st.Events >= 1
	})
	g.hold()
	close(more)
	select {
	case <-cut:
	case <-time.After(time.Minute):
		t.Fatal("the upstream call was not cut once the journal stalled")
	}
	select {
	case got := <-evs:
		t.Fatalf("the owner's reader ended while NATS was held: %+v", got)
	default:
	}
	g.release()
	var got []event
	select {
	case got = <-evs:
	case <-time.After(time.Minute):
		t.Fatal("the owner's reader got no end once NATS answered again")
	}
	last := got[len(got)-1]
	if last.Type != "error" || !strings.Contains(last.Data, "journal_failure") || last.ID == "" {
		t.Fatalf("the owner's reader ended with %+v; want the stored error event, journal_failure, with its id", last)
	}
	st := testutil.WaitState(t, a.URL, key, "failed")
	replay := readEvents(t, do(t, "GET", a.URL+"/v1/streams/"+key, "", "Accept", "text/event-stream"), -1)
	if len(replay) != len(got) {
		t.Fatalf("the reader got %d events, the replay %d: every event shown is stored", len(got), len(replay))
	}
	for i := range got {
		if got[i] != replay[i] {
			t.Fatalf("event %d: the reader got %+v, the replay %+v", i+1, got[i], replay[i])
		}
	}
	if st.Error != "journal_failure" || st.Events != len(replay) {
		t.Errorf("record %+v; want failed journal_failure with the %d events stored", st, len(replay))
	}
	again := readEvents(t, do(t, "POST", a.URL+chatPath, body, "Idempotency-Key", key), -1)
	if !hasDone(again) || calls.Load() != 2 {
		t.Errorf("the failed key's next request: [DONE] %v, upstream calls %d; want a generation of its own", hasDone(again), calls.Load())
	}
}

// TestReadyzAroundNATSPause: two instances on one NATS; while NATS answers
// nothing (every byte held, as when its server is paused) both answer
// /readyz 503 — the balancer takes them out — and 200 again once it
// answers.
func TestReadyzAroundNATSPause(t *testing.T) {
	t.Parallel()
	natsURL, g := pausableNATS(t)
	var urls []string
	for _, name := range []string{"A", "B"} {
		in := startInstance(t, name, []string{natsURL}, "http://127.0.0.1:1", instanceOptions{lease: 10 * time.Second, replicas: 1, lenient: true})
		urls = append(urls, in.URL)
	}
	ready := func(url string) int {
		resp, err := testutil.Send(context.Background(), http.MethodGet, url+"/readyz", "")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, u := range urls {
		if code := ready(u); code != http.StatusOK {
			t.Fatalf("%s/readyz before the pause: %d", u, code)
		}
	}
	g.hold()
	for _, u := range urls {
		pollUntil(t, 30*time.Second, u+"/readyz to answer 503 while NATS answers nothing", func() bool { return ready(u) == http.StatusServiceUnavailable })
	}
	g.release()
	for _, u := range urls {
		pollUntil(t, 30*time.Second, u+"/readyz to answer 200 once NATS answers", func() bool { return ready(u) == http.StatusOK })
	}
}
