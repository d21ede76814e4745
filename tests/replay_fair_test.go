package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/proxy"
)

// TestReplayFairAcrossTenants: one tenant's small replay, started while
// another tenant's many long replays run on the same instance, ends while
// most of them still run — it does not finish with the bulk: the
// instance's replays take turns by tenant (--replay-turns), at the CPU
// and for the journal's reads. Asserted by order, not by time: how many
// of the long replays running when the small one began had ended when it
// did. Read from memory (results this instance ran and keeps) and from
// the journal (none kept).
//
// 400 replays of 5,000-event keys (200 of 2,000 under -race, whose
// detector allows 8,128 goroutines).
func TestReplayFairAcrossTenants(t *testing.T) {
	if testing.Short() {
		t.Skip("hundreds of long replays")
	}
	replays, events := 400, 5000
	if raceEnabled {
		replays, events = 200, 2000
	}
	for _, tc := range []struct {
		name string
		kept bool
	}{{"kept in memory", true}, {"from the journal", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, withTokenDelay(0), withConfig(func(c *proxy.Config) {
				if !tc.kept {
					c.ResultsCache = -1
				}
			}))
			replayFairly(t, e, replays, events)
		})
	}
}

// replayFairly runs TestReplayFairAcrossTenants on e: replays of events-event keys
// of one tenant, and a 50-event replay of another's beside them.
func replayFairly(t *testing.T, e *env, replays, events int) {
	t.Helper()
	ctx := waitCtx(t, 5*time.Minute)
	const perKey = 25 // under the default per-key reader limit (32)
	keys := (replays + perKey - 1) / perKey

	bulk := secBearer("bulk-tenant")
	prompts := make([]string, keys)
	for k := range keys {
		prompts[k] = uniquePrompt(t, fmt.Sprintf("[tokens=%d] key %d", events, k))
		if n, err := replayStream(ctx, "POST", e.URL+chatPath, chatBody(prompts[k], true), prompts[k], events,
			secHeaders([]string{"Idempotency-Key", fmt.Sprintf("k-bulk-%d", k)}, bulk)...); err != nil {
			t.Fatalf("writing key %d: %v (%d events)", k, err, n)
		}
	}
	small := secBearer("small-tenant")
	smallPrompt := uniquePrompt(t, "[tokens=50]")
	if n, err := replayStream(ctx, "POST", e.URL+chatPath, chatBody(smallPrompt, true), smallPrompt, 50,
		secHeaders([]string{"Idempotency-Key", "k-small"}, small)...); err != nil {
		t.Fatalf("writing the small key: %v (%d events)", err, n)
	}

	// The long replays, all at once; the small one once every one of them
	// has its first event.
	var started, ended atomic.Int64
	running := make(chan struct{}) // closed once half the long replays have their first event
	failures := make(chan error, replays)
	var done sync.WaitGroup
	for i := range replays {
		k := i % keys
		done.Go(func() {
			first := func() {
				if started.Add(1) == int64(replays/2) {
					close(running)
				}
			}
			err := drainReplay(ctx, fmt.Sprintf("%s/v1/streams/k-bulk-%d", e.URL, k), first, bulk...)
			ended.Add(1)
			if err != nil {
				failures <- fmt.Errorf("replay %d of key %d: %w", i, k, err)
			}
		})
	}
	select {
	case <-running:
	case <-ctx.Done():
		t.Fatal("half the long replays never had their first event")
	}
	begin, endedBefore := time.Now(), ended.Load()
	if n, err := replayStream(ctx, "GET", e.URL+"/v1/streams/k-small", "", smallPrompt, 50, small...); err != nil {
		t.Errorf("the small replay: %v (%d events)", err, n)
	}
	took, endedDuring := time.Since(begin), ended.Load()-endedBefore
	done.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	still := int64(replays) - endedBefore
	t.Logf("the other tenant's 50-event replay took %v beside %d replays of %d-event keys: %d of the %d running when it began ended meanwhile; all ended %v after it began",
		took.Round(time.Millisecond), replays, events, endedDuring, still, time.Since(begin).Round(time.Millisecond))
	if endedDuring > still/4 {
		t.Errorf("%d of the %d long replays running when the other tenant's small one began ended before it: it waited for the bulk", endedDuring, still)
	}
}

// drainReplay reads a chat stream to its end as bytes, cheaply (the long
// replays' clients must not take the CPU the instance's readers share:
// parsing hundreds of streams in this process would), calling first once
// its first bytes came, and checks that it ended with [DONE].
func drainReplay(ctx context.Context, url string, first func(), header ...string) error {
	defer first() // at least once, so that the test's count is reached whatever fails
	resp, err := send(ctx, "GET", url, "", header...)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	buf := make([]byte, 64<<10)
	var tail []byte
	once := sync.OnceFunc(first)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			once()
			tail = append(tail, buf[:n]...)
			tail = tail[max(0, len(tail)-64):]
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if !bytes.HasSuffix(bytes.TrimSpace(tail), []byte("data: [DONE]")) {
		return fmt.Errorf("the stream ended with %q, not [DONE]", tail)
	}
	return nil
}
