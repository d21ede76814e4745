package tests

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestCostSalvaged: an owner that dies after storing its generation's
// terminal event but before recording the result leaves the generation to
// the instance that finds its lease run out, which completes it (salvage)
// — and bills it, once, by the usage the owner stored with the terminal
// event (in its journal message's note): for chat the usage is in no journaled event
// (the usage chunk reprise asked for is kept from a client that did not
// ask). The survivor's status JSON (usage, cost, billed), its attempt log
// and its /metrics tokens and cost equal the fake upstream's ledger; a
// second look and a replay add nothing.
func TestCostSalvaged(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease")
	}
	t.Parallel()
	for _, tc := range []struct {
		name, path string
		body       func(prompt string) string
	}{
		{"chat", chatPath, func(p string) string { return chatBody(p, true) }},
		{"messages", messagesPath, func(p string) string {
			return `{"model":"mock-1","max_tokens":256,"stream":true,"messages":[{"role":"user","content":` + quote(p) + `}]}`
		}},
		{"responses", responsesPath, func(p string) string { return responsesBody(p, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withNATSPort(), withLease(time.Second), withPrices(t))
			prompt := uniquePrompt(t, "[tokens=8]")
			body := tc.body(prompt)
			key := "k-salvaged-" + tc.name
			ref := journal.Ref{ID: resume.StreamID("anonymous", key), Gen: 1}
			proto, _ := engine.ProtocolOf(tc.path)
			ctx := waitCtx(t, 30*time.Second)
			j, err := journal.Open(ctx, e.nc, journal.Config{})
			if err != nil {
				t.Fatal(err)
			}

			// The owner dies (its NATS connection closes) as soon as the
			// terminal event is stored: before its end marker, or with it,
			// and before it records the result.
			var doomed atomic.Pointer[instance]
			var died atomic.Bool
			owner := startInstance(t, "doomed", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{
				lease: time.Second, replicas: 1, grace: 100 * time.Millisecond, lenient: true,
				configure: func(c *proxy.Config) {
					c.Prices = testPrices(t)
					c.Logger = slog.New(slog.DiscardHandler) // its failures after its death are expected
					c.Journal.AppendTimeout = time.Second
					c.Journal.OnAppend = func(time.Duration) {
						last, err := j.Last(ctx, ref)
						if err != nil || died.Load() || !last.IsEnd() && !proto.Inspect(last.Type, last.Data).Terminal {
							return
						}
						died.Store(true)
						doomed.Load().nc.Close()
						doomed.Load().rc.Close() // the records too, or its lease lives on
					}
				},
			})
			doomed.Store(owner)
			resp := do(t, "POST", owner.URL+tc.path, body, "Idempotency-Key", key)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			pollUntil(t, 10*time.Second, "the owner's death", died.Load)

			st := waitState(t, e, key, "completed") // salvaged by the survivor
			gens := e.LLM.Ledger().Generations(prompt)
			if len(gens) != 1 || !gens[0].Completed || gens[0].Tokens != 8 {
				t.Fatalf("ledger %+v, want one completed generation of 8 tokens", gens)
			}
			in, out := int64(gens[0].PromptTokens), int64(gens[0].Tokens)
			check := func(when string) float64 {
				t.Helper()
				if st, _ := getStatus(t, e, key); st.State != "completed" || st.Generation != 1 {
					t.Fatalf("%s: status %+v, want generation 1 completed", when, st)
				}
				return checkBilledOnce(t, e, key, gens[0], when)
			}
			price := check("salvaged")
			if st.Events == 0 {
				t.Errorf("salvaged status %+v, want its events", st)
			}
			// The attempt log's last record has the usage and cost too.
			testutil.Eventually(t, 10*time.Second, "the usage in the attempt log", func() bool {
				r := do(t, "GET", e.URL+"/v1/streams/"+key+"/attempts", "")
				defer r.Body.Close()
				var got struct {
					Attempts []attemptRecord `json:"attempts"`
				}
				if r.StatusCode != http.StatusOK || json.NewDecoder(r.Body).Decode(&got) != nil || len(got.Attempts) == 0 {
					return false
				}
				a := got.Attempts[len(got.Attempts)-1]
				return a.PromptTokens != nil && *a.PromptTokens == in && *a.CompletionTokens == out && a.Cost != nil && *a.Cost == price
			})
			replay := do(t, "POST", e.URL+tc.path, body, "Idempotency-Key", key)
			_, _ = io.Copy(io.Discard, replay.Body)
			replay.Body.Close()
			if replay.Header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("a duplicate of the salvaged key was not replayed")
			}
			check("after a replay")
			if g := e.LLM.Ledger().Get(prompt); g.Generations != 1 {
				t.Errorf("ledger %+v, want 1 generation", g)
			}
		})
	}
}
