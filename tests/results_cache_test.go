package tests

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestCompletedResultReadFromMemory: a streamed result that completed on
// an instance is read there from memory (--results-cache): with NATS not
// answering at all, a client resuming it on that instance, or replaying
// it whole, gets the same events under the same ids and its [DONE]. On an
// instance that did not run it, and on one that keeps no results
// (--results-cache 0), the same resume needs the key's record: it gets 503
// once the record's reads give up, and nothing of the result; with NATS
// back, it gets the same events from the journal.
func TestCompletedResultReadFromMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for record reads to give up (10 s)")
	}
	t.Parallel()
	natsURL, g := pausableNATS(t)
	llm := mockllm.New(mockllm.Config{})
	srv := httptest.NewServer(llm)
	t.Cleanup(srv.Close)
	opts := instanceOptions{lease: 10 * time.Second, replicas: 1, lenient: true}
	a := startInstance(t, "A", []string{natsURL}, srv.URL, opts)
	opts.configure = func(c *proxy.Config) { c.ResultsCache = -1 }
	b := startInstance(t, "B", []string{natsURL}, srv.URL, opts)

	full := map[string][]event{}
	for _, c := range []struct {
		in  *instance
		key string
	}{{a, "k-result-a"}, {b, "k-result-b"}} {
		evs := readEvents(t, do(t, "POST", c.in.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=20]"), true), "Idempotency-Key", c.key), -1)
		if len(evs) < 10 || !hasDone(evs) {
			t.Fatalf("%s on %s: %d events, [DONE] %v; want a whole stream", c.key, c.in.name, len(evs), hasDone(evs))
		}
		pollUntil(t, testutil.WaitTimeout, c.key+" completed", func() bool {
			st, _ := testutil.GetStatus(t, c.in.URL, c.key)
			return st.State == "completed"
		})
		full[c.key] = evs
	}
	resume := func(ctx context.Context, in *instance, key string, after int) (*http.Response, error) {
		return send(ctx, "GET", in.URL+"/v1/streams/"+key, "", "Accept", "text/event-stream", "Last-Event-ID", full[key][after].ID)
	}
	same := func(what string, got, want []event) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: event %d is %+v, want %+v", what, i, got[i], want[i])
			}
		}
	}

	g.hold()
	held := true
	defer func() {
		if held {
			g.release()
		}
	}()
	// The resumes that need the journal, started first: they wait on it.
	type answer struct {
		who    string
		status int
		body   string
		err    error
	}
	journalOnly := make(chan answer, 2)
	for _, c := range []struct {
		in  *instance
		key string
	}{{b, "k-result-a"}, {b, "k-result-b"}} {
		go func() {
			resp, err := resume(t.Context(), c.in, c.key, 3)
			if err != nil {
				journalOnly <- answer{who: c.key + " on " + c.in.name, err: err}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			journalOnly <- answer{who: c.key + " on " + c.in.name, status: resp.StatusCode, body: string(body)}
		}()
	}
	ctx := waitCtx(t, testutil.WaitTimeout)
	for _, after := range []int{0, 3, len(full["k-result-a"]) - 3} {
		resp, err := resume(ctx, a, "k-result-a", after)
		if err != nil {
			t.Fatal(err)
		}
		same(fmt.Sprintf("resume on A after event %d, NATS held", after+1), readEvents(t, resp, -1), full["k-result-a"][after+1:])
	}
	whole := readEvents(t, do(t, "GET", a.URL+"/v1/streams/k-result-a", "", "Accept", "text/event-stream"), -1)
	same("replay on A, NATS held", whole, full["k-result-a"])
	for range 2 {
		ans := <-journalOnly
		if ans.err != nil || ans.status != http.StatusServiceUnavailable {
			t.Fatalf("resume of %s, NATS held: %d %s (%v); want 503 once the record's reads gave up", ans.who, ans.status, ans.body, ans.err)
		}
	}

	g.release()
	held = false
	// From the journal, on B, the same events under the same ids.
	for _, key := range []string{"k-result-a", "k-result-b"} {
		resp, err := resume(ctx, b, key, 3)
		if err != nil {
			t.Fatal(err)
		}
		same("resume of "+key+" on B, NATS back", readEvents(t, resp, -1), full[key][4:])
	}
}
