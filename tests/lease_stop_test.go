package tests

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestPausedOwnerBillsOnlyItsPrefix: the owner of a generation, A, is
// paused past its lease — its NATS link and its upstream's writes held
// together, which is what a SIGSTOPped owner looks like from the store and
// from the provider — while its client gives up on it and retries on B,
// with its key or without one. B serves the retry one whole answer. When A
// wakes, it stops its upstream call at once: it finds the takeover (with a
// key), or finds that its keyless client left before its retry could find
// the generation (the retry could not: A could not tell the keyless index
// while it was paused), so that retry started the generation it needed.
// The provider bills one answer plus what A generated before it was
// paused, not two answers: the woken owner is fenced instead of running its
// upstream call to the end.
//
// The upstream's writes wait while A is paused, as a provider's do once
// the connection's buffers are full. A real SIGSTOP of a reprise process on
// loopback let the fake write a whole 3,000-token answer (15 s) into the
// socket buffers during a 17 s stop: what a provider generates while its
// client is frozen is billed whatever the client does when it wakes.
func TestPausedOwnerBillsOnlyItsPrefix(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses an instance for several leases")
	}
	t.Parallel()
	t.Run("retry with the key", func(t *testing.T) { pausedOwnerBills(t, true) })
	t.Run("keyless retry", func(t *testing.T) { pausedOwnerBills(t, false) })
}

// pausedOwnerBills is TestPausedOwnerBillsOnlyItsPrefix with a retry that
// carries the key (keyed) or none.
func pausedOwnerBills(t *testing.T, keyed bool) { //nolint:thelper // a subtest's body, not a helper
	const (
		tokens = 100
		delay  = 40 * time.Millisecond // an answer takes 4 s: 4 leases
		lease  = time.Second
		// slack is what the ledger had not booked yet when A was paused (a
		// write under way), and what the upstream may generate in the
		// moments the woken owner takes to learn its lease is gone (a store
		// round trip or two): 10 tokens, 400 ms. Without the stop, the
		// keyless case overshoots by a whole answer.
		slack = 10
	)
	ns := startNATSServer(t)
	natsA, g := gatedLink(t, ns)
	llm := mockllm.New(mockllm.Config{})
	upA := httptest.NewServer(heldWrites{h: llm, g: g})
	t.Cleanup(upA.Close)
	upB := httptest.NewServer(llm)
	t.Cleanup(upB.Close)
	opts := instanceOptions{lease: lease, replicas: 1, grace: 5 * time.Second, lenient: true}
	a := startInstance(t, "A", []string{natsA}, upA.URL, opts)
	b := startInstance(t, "B", []string{ns.Server.ClientURL()}, upB.URL, opts)
	ctx := waitCtx(t, 90*time.Second)

	prompt := uniquePrompt(t, fmt.Sprintf("[tokens=%d] [delay=%s]", tokens, delay))
	body := chatBody(prompt, true)
	var hdr []string
	if keyed {
		hdr = []string{"Idempotency-Key", "k-paused-owner"}
	}

	// The client reads ten events from A, then A is paused and the client
	// gives up on it.
	first, giveUp := context.WithCancel(ctx)
	defer giveUp()
	resp, err := send(first, http.MethodPost, a.URL+chatPath, body, hdr...)
	if err != nil {
		t.Fatal(err)
	}
	key := resp.Header.Get("Idempotency-Key")
	read := 0
	for _, err := range sse.Read(resp.Body, nil) {
		if err != nil {
			t.Fatalf("the first request on A: %v", err)
		}
		if read++; read == 10 {
			break
		}
	}
	g.hold()
	paused := time.Now()
	prefix := llm.Ledger().Generations(prompt)[0].Tokens
	giveUp()
	resp.Body.Close()

	// It retries on B until it has the whole answer.
	var evs []event
	for try := 1; ; try++ {
		evs, err = fetchEvents(ctx, http.MethodPost, b.URL+chatPath, body, 0, nil, hdr...)
		if err == nil && len(evs) > 0 && evs[len(evs)-1].Data == "[DONE]" {
			break
		}
		if try == 5 {
			t.Fatalf("no whole answer on B after %d tries; the last: %d events, %v", try, len(evs), err)
		}
	}
	if got, want := content(t, evs), strings.Join(mockllm.Content(prompt, tokens, false), ""); got != want {
		t.Errorf("the answer on B differs from the upstream's:\n got %q\nwant %q", got, want)
	}
	if d := time.Since(paused); d < 2*lease {
		t.Fatalf("A was paused for %v only, not past its lease (%v)", d, lease)
	}
	g.release()

	e := testutil.Settled(t, llm.Ledger(), prompt, 2)
	gens := llm.Ledger().Generations(prompt)
	if e.Generations != 2 || len(gens) != 2 {
		t.Fatalf("%d upstream generations, want 2 (A's, cut short, and B's)", e.Generations)
	}
	if gens[0].Completed || gens[0].Tokens > prefix+slack {
		t.Errorf("A's upstream call generated %d tokens (completed %v); it had %d when A was paused, and should stop at once when A wakes",
			gens[0].Tokens, gens[0].Completed, prefix)
	}
	if e.Tokens > tokens+prefix+slack {
		t.Errorf("the upstream generated %d tokens, want at most one answer (%d) and A's prefix (%d, +%d)", e.Tokens, tokens, prefix, slack)
	}
	t.Logf("A's prefix %d tokens when paused, %d at the end; %d tokens in all for a %d-token answer", prefix, gens[0].Tokens, e.Tokens, tokens)
	if keyed {
		if st := testutil.WaitState(t, b.URL, key, "completed"); st.Generation != 2 {
			t.Errorf("key %s: generation %d completed, want 2 (B's)", key, st.Generation)
		}
	} else {
		// The generation nobody could be waiting for ends without a
		// result, and the key generates afresh should it be claimed:
		// cancelled by A once awake (its store contact broke while paused,
		// so it judges no lease lapsed), or failed owner_lost by B's sweep
		// of lapsed leases, should it come first.
		var st keyStatus
		pollUntil(t, 30*time.Second, "the keyless generation to end without a result", func() bool {
			st, _ = testutil.GetStatus(t, a.URL, key)
			return st.State == "cancelled" || st.State == "failed" && st.Error == "owner_lost"
		})
	}
}

// TestCutOffOwnerHoldsItsGeneration: the owner of a generation, A, is cut
// off from NATS past its lease (its link held) while its upstream keeps
// answering and its client stays connected to it; a duplicate of the key
// on B finds the lease lapsed and generates the key again. From the moment
// its lease ran out A reads nothing more from its upstream — it cannot
// tell a takeover from an outage nobody could take over in, so it holds
// the generation rather than consuming the answer or ending it: its client
// is shown nothing the upstream generated after the takeover, and once A
// is back it finds the takeover and ends the stream with owner_lost.
// A cut-off owner does not read its upstream to the end, showing its client
// an answer whose key another instance generates again.
func TestCutOffOwnerHoldsItsGeneration(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts an instance off from NATS for several leases")
	}
	t.Parallel()
	const (
		tokens = 100
		delay  = 40 * time.Millisecond // an answer takes 4 s: 4 leases
		lease  = time.Second
	)
	ns := startNATSServer(t)
	natsA, g := gatedLink(t, ns)
	llm := mockllm.New(mockllm.Config{})
	up := httptest.NewServer(llm)
	t.Cleanup(up.Close)
	opts := instanceOptions{lease: lease, replicas: 1, grace: 5 * time.Second, lenient: true}
	a := startInstance(t, "A", []string{natsA}, up.URL, opts)
	b := startInstance(t, "B", []string{ns.Server.ClientURL()}, up.URL, opts)
	ctx := waitCtx(t, 90*time.Second)
	prompt := uniquePrompt(t, fmt.Sprintf("[tokens=%d] [delay=%s]", tokens, delay))
	body := chatBody(prompt, true)
	key := []string{"Idempotency-Key", "k-cut-off-owner"}

	onA := make(chan []event, 1)
	cut := make(chan struct{})
	go func() {
		evs, err := fetchEvents(ctx, http.MethodPost, a.URL+chatPath, body, 10, func() { g.hold(); close(cut) }, key...)
		if err != nil {
			t.Errorf("the client on A: %v", err)
		}
		onA <- evs
	}()
	<-cut
	// B takes the key over (the duplicate's first try ends owner_lost once
	// B judges the lease lapsed, the next generates): what A's upstream had
	// written then is all A may show.
	takeover := make(chan int, 1)
	go func() {
		if err := llm.Ledger().WaitStarted(ctx, prompt, 2); err != nil {
			t.Errorf("B's generation: %v", err)
		}
		takeover <- llm.Ledger().Generations(prompt)[0].Events
	}()
	for try := 1; ; try++ {
		evs, err := fetchEvents(ctx, http.MethodPost, b.URL+chatPath, body, 0, nil, key...)
		if err == nil && len(evs) > 0 && evs[len(evs)-1].Data == "[DONE]" {
			break
		}
		if try == 5 {
			t.Fatalf("no whole answer on B after %d tries; the last: %d events, %v", try, len(evs), err)
		}
	}
	written := <-takeover
	g.release()

	evs := <-onA
	shown := 0
	for _, ev := range evs {
		if ev.Type == "" && ev.Data != "[DONE]" {
			shown++
		}
	}
	if shown > written {
		t.Errorf("A showed its client %d events; its upstream had written %d when B took the key over, after A's lease ran out", shown, written)
	}
	if last := lastEv(evs); last.Type != "error" || !strings.Contains(last.Data, "owner_lost") {
		t.Errorf("the stream on A ended with %+v after %d events, want an owner_lost error", last, len(evs))
	}
	t.Logf("A showed %d events; its upstream had written %d at the takeover", shown, written)
}

func lastEv(evs []event) event {
	if len(evs) == 0 {
		return event{}
	}
	return evs[len(evs)-1]
}

// heldWrites serves h with its response writes held while g is held: the
// upstream of a paused owner, whose writes wait once the connection's
// buffers are full (here at once).
type heldWrites struct {
	h http.Handler
	g *pauseGate
}

func (hw heldWrites) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hw.h.ServeHTTP(&heldWriter{ResponseWriter: w, g: hw.g, ctx: r.Context()}, r)
}

type heldWriter struct {
	http.ResponseWriter
	g   *pauseGate
	ctx context.Context
}

// wait returns once the gate lets data pass, or the request ended.
func (w *heldWriter) wait() error {
	w.g.mu.Lock()
	open := w.g.open
	w.g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-w.ctx.Done():
		return w.ctx.Err()
	}
}

func (w *heldWriter) Write(b []byte) (int, error) {
	if err := w.wait(); err != nil {
		return 0, err
	}
	return w.ResponseWriter.Write(b)
}

func (w *heldWriter) FlushError() error {
	if err := w.wait(); err != nil {
		return err
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
