package tests

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/tests/testutil"
)

// Edges of time and ownership: keys near their TTL, owners that died.

// TestExpiringKeyIsGone: near its TTL a completed key's record outlives the
// first events of its journal (the stream's MaxAge counts from each event,
// the record's TTL from its last write, at the generation's end). Such a
// key is gone: a reader gets 404, the same request a fresh generation,
// whole. (Readers got event: error journal_failure for every try: the gap
// where the answer began.)
func TestExpiringKeyIsGone(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	e := newEnv(t, withJournal(func(c *journal.Config) { c.TTL = ttl }))
	prompt := uniquePrompt(t, "[tokens=20] [delay=100ms]") // 2 s: its record is written ~2 s after its first event
	body := chatBody(prompt, true)
	key := "k-expiring"
	ref := journal.Ref{ID: resume.StreamID("anonymous", key), Gen: 1}
	if evs := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key), -1); !hasDone(evs) {
		t.Fatalf("the generation got %d events without [DONE]", len(evs))
	}
	waitState(t, e, key, "completed")
	j := e.p.Journal()
	testutil.Eventually(t, 3*ttl, "the TTL to remove the generation's first event", func() bool {
		first, err := j.First(waitCtx(t, time.Second), ref)
		return errors.Is(err, journal.ErrNotFound) || err == nil && first.Offset > 1
	})
	if _, _, found, err := j.Get(waitCtx(t, time.Second), ref.ID); err != nil || !found {
		t.Fatalf("the record went with the first event (found %v, %v): nothing to test", found, err)
	}

	resp := do(t, "GET", e.URL+"/v1/streams/"+key, "", "Accept", "text/event-stream")
	testutil.ExpectAPIError(t, resp, http.StatusNotFound, "key_not_found")
	resp = do(t, "GET", e.URL+"/v1/streams/"+key, "", "Accept", "application/json")
	testutil.ExpectAPIError(t, resp, http.StatusNotFound, "key_not_found")

	resp = do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		t.Error("the expiring key was replayed")
	}
	checkComplete(t, readEvents(t, resp, -1), prompt, 20)
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 2); g.Generations != 2 {
		t.Errorf("ledger %+v, want 2 generations (the gone key's and the fresh one)", g)
	}
}
