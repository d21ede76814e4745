package tests

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Edges of time and ownership: keys near their TTL, owners that died.

// TestExpiringKeyIsGone: near its TTL a completed key's record outlives the
// first events of its journal (the stream's MaxAge counts from each event,
// the record's TTL from its last write, at the generation's end). Such a
// key is gone: a reader gets 404, the same request a fresh generation,
// whole. (Readers got event: error journal_failure for every try: the gap
// where the answer began.) The TTL's minimum (MinTTL) is far above a
// test's patience, so the test ages the key by hand, as the TTL would: its
// record created a TTL ago, its generation's first message removed. A
// result kept in memory (--results-cache) ages by the clock alone, and
// serves only for the TTL's first half, before any key is gone: none is
// kept here, where the key is aged by hand.
func TestExpiringKeyIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withConfig(func(c *proxy.Config) { c.ResultsCache = -1 }))
	prompt := uniquePrompt(t, "[tokens=20]")
	body := chatBody(prompt, true)
	key := "k-expiring"
	ref := journal.Ref{ID: resume.StreamID("anonymous", key), Gen: 1}
	if evs := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key), -1); !hasDone(evs) {
		t.Fatalf("the generation got %d events without [DONE]", len(evs))
	}
	waitState(t, e, key, "completed")
	j := e.p.Journal()
	ctx := waitCtx(t, 10*time.Second)
	val, rev, found, err := j.Get(ctx, ref.ID)
	if err != nil || !found {
		t.Fatalf("the record: found %v, %v", found, err)
	}
	var rec map[string]any
	if err := json.Unmarshal(val, &rec); err != nil {
		t.Fatal(err)
	}
	rec["created_at"] = time.Now().Add(-j.TTL()).UTC().Format(time.RFC3339Nano)
	aged, _ := json.Marshal(rec)
	if _, ok, err := j.Update(ctx, ref.ID, aged, rev); err != nil || !ok {
		t.Fatalf("ageing the record: %v, %v", ok, err)
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	// The generation's first message (an event's Seq is a seek hint, at or
	// before its message: not the message's own sequence).
	first, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject("reprise.ev."+ref.ID+".1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, first.Sequence); err != nil {
		t.Fatal(err)
	}
	if ev, err := j.First(ctx, ref); err == nil && ev.Offset == 1 {
		t.Fatalf("the generation's first event is still stored: %+v", ev)
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

// TestDeadOwnerNonStreamedAnswersAtOnce: the owner of a non-streamed
// generation dies before its answer (here: an owner outside the proxy
// begins the key on its own NATS connection, then loses it; a
// non-streamed answer is neither salvaged nor sealed). Once its lease ran
// out, a reader of the Location and a duplicate POST are answered the
// key's state at once — 502 owner_lost — and the next request generates
// afresh. (They waited 10 s for an end marker the dead owner would never
// store, then got 503 journal_unavailable, which they retried.)
func TestDeadOwnerNonStreamedAnswersAtOnce(t *testing.T) {
	t.Parallel()
	const lease = 500 * time.Millisecond
	e := newEnv(t, withNATSPort(), withLease(lease))
	prompt := uniquePrompt(t, "[tokens=3]")
	body := chatBody(prompt, false)
	key := "k-dead-owner-json"
	ctx := waitCtx(t, 30*time.Second)
	nc, err := nats.Connect(e.natsURL())
	if err != nil {
		t.Fatal(err)
	}
	j, err := journal.Open(ctx, nc, journal.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ghost, err := resume.New(resume.Config{Store: j, Owner: "ghost", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ghost.Begin(ctx, resume.Request{ID: resume.StreamID("anonymous", key), Key: key, Path: chatPath,
		Fingerprint: resume.Fingerprint(chatPath, []byte(body)), Stream: false})
	if err != nil || out.Decision != resume.Start {
		t.Fatalf("the ghost's Begin: %v, %v", out.Decision, err)
	}
	nc.Close() // the owner dies: its lease is not renewed, its generation never ends

	// A duplicate in the lease attaches and waits (bounded) for the
	// result; a reader after the lease ran out finds the key failed.
	for _, r := range []struct{ name, method, url, body string }{
		{"a duplicate POST", "POST", e.URL + chatPath, body},
		{"a reader of the Location", "GET", e.URL + "/v1/streams/" + key, ""},
	} {
		start := time.Now()
		resp := do(t, r.method, r.url, r.body, "Idempotency-Key", key)
		took := time.Since(start)
		testutil.ExpectAPIError(t, resp, http.StatusBadGateway, resume.OwnerLost)
		// Not after the 10 s wait for an end marker (its status alone tells
		// that one apart; so does its time, here with room for a busy box:
		// the lease is judged lapsed only after this instance watched the
		// bucket for one, 2.9 s once under -race beside other tests).
		if took > lease+5*time.Second {
			t.Errorf("%s was answered after %s, with a %s lease", r.name, took.Round(time.Millisecond), lease)
		}
	}
	resp := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key)
	if b := readBody(t, resp); resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("the next request: %d %s, replayed %q; want a fresh generation", resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed"))
	}
}
