package tests

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/resume"
)

// responsesEvent is what these tests read of a Responses event.
type responsesEvent struct {
	Seq      *int `json:"sequence_number"`
	Response *struct {
		ID string `json:"id"`
	} `json:"response"`
}

func decodeResponsesEvent(tb testing.TB, data string) responsesEvent {
	tb.Helper()
	var v responsesEvent
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		tb.Fatalf("event %q: %v", data, err)
	}
	return v
}

// TestOwnerKilledReattach: with --upstream-background, an instance killed
// mid-stream costs no generation: the instance that takes its lease over
// reattaches to the upstream's background response after the last
// journaled sequence_number and journals on in the same generation. The
// client resuming there gets the rest — every event byte-exact as the
// upstream sent it, once, no reset — and the upstream generated once.
func TestOwnerKilledReattach(t *testing.T) {
	// Not parallel: it SIGKILLs a reprise process and waits for its 1 s lease.
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	// The fake in background mode, behind a recorder of the credential each
	// resume comes with: the caller's (passthrough auth), not the dead
	// owner's caller's, gone with it.
	fake := mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond, Background: true})
	var mu sync.Mutex
	var resumedWith []string
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			resumedWith = append(resumedWith, r.Header.Get("Authorization"))
			mu.Unlock()
		}
		fake.ServeHTTP(w, r)
	})
	e := newEnv(t, withNATSPort(), withLease(time.Second), withUpstream(upstream), withConfig(func(c *proxy.Config) {
		c.UpstreamBackground = true
		c.Prices = testPrices(t)
	}))
	a := startProcess(t, e, "--upstream-background")
	prompt := uniquePrompt(t, "[tokens=300] [delay=10ms]")
	const bearer = "Bearer sk-reattach-caller"
	first := readEvents(t, do(t, "POST", a.URL+responsesPath, responsesBody(prompt, true), "Idempotency-Key", "k-reattach", "Authorization", bearer), 5)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-reattach", "", "Last-Event-ID", lastID(first), "Authorization", bearer), -1)
	all := append(first, rest...)
	checkUnique(t, all)

	// What the upstream generated, straight from it: the client got each
	// event as it was, in order, once.
	id := decodeResponsesEvent(t, all[0].Data).Response.ID
	sent := readEvents(t, do(t, "GET", e.llmSrv.URL+responsesPath+"/"+id+"?stream=true", ""), -1)
	if len(all) != len(sent) {
		t.Fatalf("the client got %d events, the upstream sent %d", len(all), len(sent))
	}
	for i := range all {
		if all[i].Type != sent[i].Type || all[i].Data != sent[i].Data {
			t.Fatalf("event %d: got %s %q, want %s %q", i, all[i].Type, all[i].Data, sent[i].Type, sent[i].Data)
		}
		if ev := decodeResponsesEvent(t, all[i].Data); ev.Seq == nil || *ev.Seq != i {
			t.Fatalf("event %d has sequence_number %v", i, ev.Seq)
		}
		// The same generation, its offsets without a gap across the takeover.
		if pos, err := resume.ParsePosition(all[i].ID); err != nil || pos.Gen != 1 || pos.Offset != uint64(i+1) {
			t.Fatalf("event %d has id %s (%v), want generation 1 offset %d", i, all[i].ID, err, i+1)
		}
	}
	if last := lastEvent(t, all); last.Type != "response.completed" {
		t.Fatalf("last event %s, want response.completed", last.Type)
	}
	var text strings.Builder
	for _, ev := range all {
		if ev.Type == "response.output_text.delta" {
			text.WriteString(deltaOf(t, ev.Data))
		}
	}
	if want := strings.Join(mockllm.Content(prompt, 300, false), ""); text.String() != want {
		t.Fatalf("text differs from what the upstream generated")
	}
	st := testutil.WaitState(t, e.URL, "k-reattach", "completed", "Authorization", bearer)
	if st.Generation != 1 {
		t.Errorf("completed in generation %d, want 1", st.Generation)
	}
	if g := testutil.Settled(t, fake.Ledger(), prompt, 1); g.Generations != 1 || g.Completed != 1 {
		t.Fatalf("ledger %+v, want one generation, completed", g)
	}
	// The adopter knows the generation's tenant and model from the record:
	// its attempts are logged as the owner's were (the tenant's hash, the
	// model, numbered on from the owner's), and it prices the generation.
	gens := fake.Ledger().Generations(prompt)
	price := float64(gens[0].PromptTokens)*costPrompt + float64(gens[0].Tokens)*costCompletion
	if st.Cost == nil || *st.Cost != price {
		t.Errorf("the adopted generation cost %v, want %v", st.Cost, price)
	}
	var recs []attemptRecord
	testutil.Eventually(t, 10*time.Second, "the owner's and the adopter's attempts in the log", func() bool {
		recs = attemptLog(t, e.URL, "k-reattach", "Authorization", bearer)
		return len(recs) >= 2 && recs[len(recs)-1].PromptTokens != nil
	})
	for i, r := range recs {
		if r.Tenant == "" || r.Tenant != recs[0].Tenant || r.Model != "mock-1" || r.Attempt != i+1 || r.Generation != 1 {
			t.Errorf("attempt record %d = %+v, want attempt %d of generation 1, the tenant's hash as the first's (%q), model mock-1", i, r, i+1, recs[0].Tenant)
		}
	}
	if r := recs[len(recs)-1]; r.Cost == nil || *r.Cost != price || r.Status != http.StatusOK {
		t.Errorf("the adopter's attempt %+v, want the resume's 200 costing %v", r, price)
	}
	mu.Lock()
	if len(resumedWith) == 0 || resumedWith[0] != bearer {
		t.Errorf("the upstream was resumed with %q, want the caller's %q first", resumedWith, bearer)
	}
	mu.Unlock()
	// A reader from the start gets the same, from the journal.
	again := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-reattach", "", "Authorization", bearer), -1)
	if len(again) != len(all) {
		t.Fatalf("a replay has %d events, want %d", len(again), len(all))
	}
}

// TestOwnerKilledReattachCapabilityReader: the first to find a background
// generation's owner dead is a reader of its Location by capability token
// — without a credential (EventSource, <audio>), or with one of another
// tenant's. The upstream is still asked for the rest with the generation's
// own caller's credential, kept sealed in its record: one generation,
// completed, billed once.
func TestOwnerKilledReattachCapabilityReader(t *testing.T) {
	// Not parallel: it SIGKILLs reprise processes and waits for their 1 s lease.
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	const bearer = "Bearer sk-reattach-owner"
	for _, tc := range []struct {
		name   string
		header []string // the reader's
	}{
		{"no credential", nil},
		{"another tenant", []string{"Authorization", "Bearer sk-someone-else"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The upstream keeps each background response for the account
			// that made it, as OpenAI does: another credential gets 404.
			fake := mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond, Background: true})
			var mu sync.Mutex
			var asked []string
			upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasPrefix(r.URL.Path, responsesPath+"/") {
					mu.Lock()
					asked = append(asked, r.Method+" "+r.Header.Get("Authorization"))
					mu.Unlock()
					if r.Header.Get("Authorization") != bearer {
						http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
						return
					}
				}
				fake.ServeHTTP(w, r)
			})
			e := newEnv(t, withNATSPort(), withLease(time.Second), withUpstream(upstream), withConfig(func(c *proxy.Config) { c.UpstreamBackground = true }))
			a := startProcess(t, e, "--upstream-background")
			prompt := uniquePrompt(t, "[tokens=300] [delay=10ms]")
			key := "k-reattach-cap-" + strings.ReplaceAll(tc.name, " ", "-")
			resp := do(t, "POST", a.URL+responsesPath, responsesBody(prompt, true), "Idempotency-Key", key, "Authorization", bearer)
			loc := resp.Header.Get("Location")
			if !strings.Contains(loc, "token=") {
				t.Fatalf("Location %q carries no capability token", loc)
			}
			first := readEvents(t, resp, 5)
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			rest := readEvents(t, do(t, "GET", e.URL+loc, "", append([]string{"Last-Event-ID", lastID(first)}, tc.header...)...), -1)
			all := append(first, rest...)
			checkUnique(t, all)
			if last := lastEvent(t, all); last.Type != "response.completed" {
				t.Fatalf("last event %s %s, want response.completed", last.Type, last.Data)
			}
			if g := testutil.Settled(t, fake.Ledger(), prompt, 1); g.Generations != 1 || g.Completed != 1 {
				t.Fatalf("ledger %+v, want one generation, completed", g)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) == 0 {
				t.Fatal("the upstream was never asked to resume")
			}
			for _, a := range asked {
				if a != "GET "+bearer {
					t.Errorf("the upstream was asked %q, want only resumes with the generation's caller's credential", asked)
					break
				}
			}
		})
	}
}

// TestOwnerKilledReattachFails: when the upstream cannot give the stream
// again — it answers the resume 404, or has no background mode at all —
// the generation ends as without --upstream-background: owner_lost, and
// the key generates afresh.
func TestOwnerKilledReattachFails(t *testing.T) {
	// Not parallel: it SIGKILLs reprise processes and waits for their 1 s lease.
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	for _, tc := range []struct {
		name       string
		background bool // the fake runs background mode, but answers every resume 404
	}{
		{"resume 404", true},
		{"no background mode", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond, Background: tc.background})
			upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, responsesPath+"/") {
					http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
					return
				}
				fake.ServeHTTP(w, r)
			})
			e := newEnv(t, withNATSPort(), withLease(time.Second), withUpstream(upstream), withConfig(func(c *proxy.Config) { c.UpstreamBackground = true }))
			a := startProcess(t, e, "--upstream-background")
			prompt := uniquePrompt(t, "[tokens=300] [delay=10ms]")
			body := responsesBody(prompt, true)
			first := readEvents(t, do(t, "POST", a.URL+responsesPath, body, "Idempotency-Key", "k-reattach-fails"), 5)
			if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-reattach-fails", "", "Last-Event-ID", lastID(first)), -1)
			all := append(first, rest...)
			checkUnique(t, all)
			last := lastEvent(t, all)
			if last.Type != "error" || !strings.Contains(last.Data, "owner_lost") {
				t.Fatalf("last event %+v, want event: error owner_lost", last)
			}
			if st := waitState(t, e, "k-reattach-fails", "failed"); st.Error != "owner_lost" {
				t.Errorf("error %q, want owner_lost", st.Error)
			}
			evs := readEvents(t, do(t, "POST", e.URL+responsesPath, body, "Idempotency-Key", "k-reattach-fails"), -1)
			if lastEvent(t, evs).Type != "response.completed" {
				t.Fatalf("regeneration ends with %s", lastEvent(t, evs).Type)
			}
			g := testutil.Settled(t, fake.Ledger(), prompt, 2)
			if g.Generations != 2 {
				t.Fatalf("ledger %+v, want the killed generation and its regeneration", g)
			}
			// A response the upstream did not give again may still run there:
			// it is cancelled before the key generates again, or it would
			// complete (and bill) beside the regeneration.
			if want := 1; tc.background && g.Completed != want {
				t.Errorf("ledger %+v: %d generations completed, want %d (the first cancelled when its resume failed)", g, g.Completed, want)
			}
		})
	}
}

// TestCancelBackground: a cancelled generation running in background mode
// is cancelled at the upstream too — closing its stream would not stop it.
func TestCancelBackground(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withBackground())
	prompt := uniquePrompt(t, "[tokens=2000] [delay=5ms]")
	resp := do(t, "POST", e.URL+responsesPath, responsesBody(prompt, true), "Idempotency-Key", "k-cancel-bg")
	readEvents(t, resp, 5)
	cancelResp := do(t, "POST", e.URL+"/v1/streams/k-cancel-bg/cancel", "")
	if body := readBody(t, cancelResp); cancelResp.StatusCode != http.StatusAccepted {
		t.Fatalf("cancel: %d %s, want 202", cancelResp.StatusCode, body)
	}
	awaitAborted(t, e, prompt, 5*time.Second)
	if st := waitState(t, e, "k-cancel-bg", "cancelled"); st.Error != "cancelled" {
		t.Errorf("status %+v", st)
	}
}

// TestPausedOwnerReattach: an owner that is not dead but paused (SIGSTOP)
// past its lease is taken over, and fenced: the instance that adopts the
// generation journals the rest from the upstream, and once the owner runs
// again it stores nothing more — the journal is the upstream's stream,
// once — and a client resuming on it with a cursor past its own tail is
// served from the journal, not refused.
func TestPausedOwnerReattach(t *testing.T) {
	// Not parallel: it stops a reprise process for longer than its 1 s lease.
	if testing.Short() {
		t.Skip("builds and pauses a reprise binary")
	}
	e := newEnv(t, withNATSPort(), withLease(time.Second), withBackground())
	a := startProcess(t, e, "--upstream-background")
	prompt := uniquePrompt(t, "[tokens=300] [delay=10ms]")
	first := readEvents(t, do(t, "POST", a.URL+responsesPath, responsesBody(prompt, true), "Idempotency-Key", "k-paused"), 5)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-paused", "", "Last-Event-ID", lastID(first)), -1)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	all := append(first, rest...)
	if last := lastEvent(t, all); last.Type != "response.completed" {
		t.Fatalf("last event %s, want response.completed", last.Type)
	}
	// The woken owner resumed by a client past its tail: served, not 400.
	resp := do(t, "GET", a.URL+"/v1/streams/k-paused", "", "Last-Event-ID", all[len(all)-10].ID)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNoContent {
		t.Fatalf("resume on the woken owner: %d %s", resp.StatusCode, readBody(t, resp))
	}
	resp.Body.Close()
	waitState(t, e, "k-paused", "completed")
	time.Sleep(2 * time.Second) // give the woken owner every chance to store what it still had: it must not
	id := decodeResponsesEvent(t, all[0].Data).Response.ID
	sent := readEvents(t, do(t, "GET", e.llmSrv.URL+responsesPath+"/"+id+"?stream=true", ""), -1)
	journaled := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-paused", ""), -1)
	if len(journaled) != len(sent) {
		t.Fatalf("the journal holds %d events, the upstream sent %d", len(journaled), len(sent))
	}
	for i := range sent {
		if journaled[i].Data != sent[i].Data {
			t.Fatalf("journaled event %d %q, the upstream's %q", i, journaled[i].Data, sent[i].Data)
		}
	}
	if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
		t.Fatalf("ledger %+v, want one generation", g)
	}
}

// TestOwnerKilledAdoptedWithoutTheLease: with --upstream-background, the
// owner A of a Responses generation is SIGKILLed under a 30 s lease; B,
// whose reader follows the key, finds A's connection gone and takes the
// generation over at once: the reader gets the whole generation, the same
// generation, long before the lease would have run out.
func TestOwnerKilledAdoptedWithoutTheLease(t *testing.T) {
	// Not parallel: it SIGKILLs a reprise process and times the takeover.
	if testing.Short() {
		t.Skip("builds and kills a reprise binary")
	}
	const lease = 30 * time.Second
	fake := mockllm.New(mockllm.Config{TokenDelay: 2 * time.Millisecond, Background: true})
	e := newEnv(t, withNATSPort(), withLease(lease), withUpstream(fake), withConfig(func(c *proxy.Config) {
		c.UpstreamBackground = true
	}))
	a := startProcess(t, e, "--upstream-background")
	prompt := uniquePrompt(t, "[tokens=100] [delay=10ms]")
	first := readEvents(t, do(t, "POST", a.URL+responsesPath, responsesBody(prompt, true), "Idempotency-Key", "k-adopt-fast"), 5)
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	rest := readEvents(t, do(t, "GET", e.URL+"/v1/streams/k-adopt-fast", "", "Last-Event-ID", lastID(first)), -1)
	took := time.Since(killed)
	all := append(first, rest...)
	checkUnique(t, all)
	if last := lastEvent(t, all); last.Type != "response.completed" {
		t.Fatalf("last event %s, want response.completed", last.Type)
	}
	t.Logf("the reader on B got the adopted generation's end %s after the kill (lease %s)", took, lease)
	if took > lease/3 {
		t.Errorf("the reader on B waited %s for the takeover (lease %s)", took, lease)
	}
	if st := testutil.WaitState(t, e.URL, "k-adopt-fast", "completed"); st.Generation != 1 {
		t.Errorf("completed in generation %d, want 1", st.Generation)
	}
	if g := testutil.Settled(t, fake.Ledger(), prompt, 1); g.Generations != 1 || g.Completed != 1 {
		t.Fatalf("ledger %+v, want one generation, completed", g)
	}
}
