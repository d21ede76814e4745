package tests

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestOrphanSettledUnread: a key whose owner dies mid-generation, that
// nobody reads again, is settled by a surviving instance within the lease
// and a few seconds: failed owner_lost, or completed when the terminal
// event was stored before the owner died — then billed on the survivor
// once (its status, reprise_tokens_total and reprise_cost_total equal the
// fake model's ledger). The test waits on the record itself (a watch on
// the records bucket): a look at the key through reprise would settle it.
func TestOrphanSettledUnread(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a lease")
	}
	t.Parallel()
	const lease = time.Second
	for _, tc := range []struct {
		name, directives string
		terminal         bool // the owner dies once the terminal event is stored
		state            string
	}{
		{"mid-generation", "[tokens=400] [delay=10ms]", false, "failed"},
		{"terminal stored", "[tokens=8]", true, "completed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withNATSPort(), withLease(lease), withPrices(t))
			prompt := uniquePrompt(t, tc.directives)
			body := chatBody(prompt, true)
			key := "k-orphan-" + strings.ReplaceAll(tc.name, " ", "-")
			id := resume.StreamID("anonymous", key)
			ref := journal.Ref{ID: id, Gen: 1}
			proto, _ := engine.ProtocolOf(chatPath)
			ctx := waitCtx(t, 30*time.Second)
			j, err := journal.Open(ctx, e.nc, journal.Config{})
			if err != nil {
				t.Fatal(err)
			}
			states := make(chan string, 64)
			if _, err := j.WatchRecords(ctx, func(got string, value []byte, _ uint64) {
				var rec struct {
					State string `json:"state"`
				}
				if got == id && json.Unmarshal(value, &rec) == nil {
					states <- rec.State
				}
			}); err != nil {
				t.Fatal(err)
			}

			// The owner dies (its NATS connections close): mid-stream, or
			// as soon as the terminal event is stored, before it records
			// the result.
			var doomed atomic.Pointer[instance]
			var died atomic.Bool
			var diedAt atomic.Int64 // UnixNano
			kill := func() {
				if died.CompareAndSwap(false, true) {
					diedAt.Store(time.Now().UnixNano())
					doomed.Load().nc.Close()
					doomed.Load().rc.Close()
				}
			}
			owner := startInstance(t, "doomed", []string{e.natsURL()}, e.llmSrv.URL, instanceOptions{
				lease: lease, replicas: 1, grace: 100 * time.Millisecond, lenient: true,
				configure: func(c *proxy.Config) {
					c.Prices = testPrices(t)
					c.Logger = slog.New(slog.DiscardHandler) // its failures after its death are expected
					c.Journal.AppendTimeout = time.Second
					if !tc.terminal {
						return
					}
					c.Journal.OnAppend = func(time.Duration) {
						last, err := j.Last(ctx, ref)
						if err == nil && (last.IsEnd() || proto.Inspect(last.Type, last.Data).Terminal) {
							kill()
						}
					}
				},
			})
			doomed.Store(owner)
			resp := do(t, "POST", owner.URL+chatPath, body, "Idempotency-Key", key)
			if tc.terminal {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			} else {
				readEvents(t, resp, 5) // and the client leaves
				kill()
			}
			pollUntil(t, 10*time.Second, "the owner's death", died.Load)
			at := time.Unix(0, diedAt.Load())

			bound := time.NewTimer(time.Until(at.Add(lease + 4*time.Second)))
			defer bound.Stop()
			for settled := false; !settled; {
				select {
				case s := <-states:
					settled = s != string(resume.InProgress)
					if settled && s != tc.state {
						t.Fatalf("the orphan was settled %s, want %s", s, tc.state)
					}
				case <-bound.C:
					t.Fatalf("the orphan was still in progress %s after its owner died (lease %s)", time.Since(at), lease)
				}
			}
			t.Logf("settled %s %.2f s after its owner died (lease %s)", tc.state, time.Since(at).Seconds(), lease)

			st, _ := getStatus(t, e, key)
			if st.State != tc.state || st.Generation != 1 {
				t.Fatalf("status %+v, want generation 1 %s", st, tc.state)
			}
			gens := e.LLM.Ledger().Generations(prompt)
			if len(gens) != 1 {
				t.Fatalf("ledger %+v, want one generation", gens)
			}
			if !tc.terminal {
				// Its usage is not known here: not billed (docs/cost.md).
				if st.Error != resume.OwnerLost || st.Billed != nil || metric(t, e, "reprise_tokens_total", "completion") != 0 {
					t.Errorf("status %+v, want owner_lost and nothing billed", st)
				}
				return
			}
			checkBilledOnce(t, e, key, gens[0], "swept")
		})
	}
}
