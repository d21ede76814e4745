package tests

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestFullStore: JetStream's store fills up (its max store reached). The
// generation that cannot be stored ends at once with journal_full, not
// after the journal timeout; its key is no result — a re-POST is not
// attached to the dead generation, whose record could not be finished —;
// new requests get 503 journal_full with Retry-After; /readyz says the
// journal is full. Once space is freed, /readyz is ready again and the key
// generates afresh.
func TestFullStore(t *testing.T) {
	t.Parallel()
	// A long journal timeout: a refused write must not wait it out.
	e := newEnv(t, withMaxStore(256<<10), withJournal(func(c *journal.Config) { c.AppendTimeout = time.Minute }))
	prompt := uniquePrompt(t, "[tokens=5000] [delay=0ms]")
	body := chatBody(prompt, true)
	start := time.Now()
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-full"), -1)
	last := lastEvent(t, evs)
	if last.Type != "error" || !strings.Contains(last.Data, `"journal_full"`) {
		t.Fatalf("the stream ended with %s %s, want event: error journal_full", last.Type, last.Data)
	}
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("the refused generation took %s to end: it waited out the journal timeout", took)
	}

	ready := do(t, "GET", e.URL+"/readyz", "")
	testutil.ExpectAPIError(t, ready, http.StatusServiceUnavailable, "journal_full")

	// The same key again: the generation is no result, and nothing new can
	// be stored — not an attach to a generation nobody writes to.
	again := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-full")
	if again.Header.Get("Reprise-Attached") != "" {
		t.Errorf("the re-POST was attached to the dead generation")
	}
	testutil.ExpectAPIError(t, again, http.StatusServiceUnavailable, "journal_full")
	fresh := do(t, "POST", e.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=5]"), true), "Idempotency-Key", "k-full-new")
	if fresh.Header.Get("Retry-After") == "" {
		t.Errorf("a new key's 503 has no Retry-After")
	}
	testutil.ExpectAPIError(t, fresh, http.StatusServiceUnavailable, "journal_full")
	// Both were refused at their decision (the record could not be
	// written), which the requests counter names.
	if got := metric(t, e, "reprise_requests_total", "unavailable"); got != 2 {
		t.Errorf("reprise_requests_total{decision=\"unavailable\"} = %v, want 2", got)
	}

	// Space freed (as the TTL would): ready again, and the key generates.
	ctx := waitCtx(t, 30*time.Second)
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if resp := do(t, "GET", e.URL+"/readyz", ""); resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz after space was freed: %d %s", resp.StatusCode, readBody(t, resp))
	}
	short := chatBody(uniquePrompt(t, "[tokens=20]"), true)
	if evs := readEvents(t, do(t, "POST", e.URL+chatPath, short, "Idempotency-Key", "k-full-after"), -1); lastEvent(t, evs).Data != "[DONE]" {
		t.Fatalf("after space was freed a generation ended with %+v", lastEvent(t, evs))
	}
	// The full key's next request is a new generation (its prompt fills the
	// store again: a few events are enough).
	evs = readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-full"), 3)
	if pos, err := resume.ParsePosition(evs[0].ID); err != nil || pos.Gen != 2 {
		t.Fatalf("the full key's next request got event %s (%v), want generation 2", evs[0].ID, err)
	}
}

// TestDataMaxFlag: --data-max caps the embedded JetStream's store; past it
// a generation ends with journal_full and /readyz says so.
func TestDataMaxFlag(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and runs a reprise binary")
	}
	llm := httptest.NewServer(mockllm.New(mockllm.Config{}))
	t.Cleanup(llm.Close)
	p := startReprise(t, "--upstream", llm.URL, "--data", t.TempDir(), "--data-max", "1048576")
	evs := readEvents(t, do(t, "POST", p.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=12000] [delay=0ms]"), true), "Idempotency-Key", "k-data-max"), -1)
	if last := lastEvent(t, evs); last.Type != "error" || !strings.Contains(last.Data, `"journal_full"`) {
		t.Fatalf("the stream ended with %s %s, want event: error journal_full", last.Type, last.Data)
	}
	testutil.ExpectAPIError(t, do(t, "GET", p.URL+"/readyz", ""), http.StatusServiceUnavailable, "journal_full")
}
