package tests

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// TestScaleLongReplaysQueue: a thousand concurrent replays of long
// completed keys on one instance all complete, every event in order, none
// ending with journal_unavailable: the journal's batched reads queue for
// their turn instead of flooding the connection's reply inbox (whose
// dropped messages the readers once gave up on). Another tenant's small
// replay, beside them, completes too; its latency alone and beside them
// is logged, with the replays' overall rate.
//
// 1,100 replays of 2,000-event keys (300 of 800 under -race, whose
// detector allows 8,128 goroutines: a replay costs about seven).
func TestScaleLongReplaysQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("a thousand long replays")
	}
	replays, events := 1100, 2000
	if raceEnabled {
		replays, events = 300, 800
	}
	const perKey = 25 // under the default per-key reader limit (32)
	keys := (replays + perKey - 1) / perKey
	e := newEnv(t, withTokenDelay(0))
	ctx := waitCtx(t, 3*time.Minute)

	// The bulk tenant's completed long keys, written a few at a time (a
	// generation the journal sheds for being behind, 429, is asked again,
	// as clients do).
	bulk := secBearer("bulk-tenant")
	prompts := make([]string, keys)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for k := range keys {
		prompts[k] = uniquePrompt(t, fmt.Sprintf("[tokens=%d] key %d", events, k))
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var n int
			var err error
			for try := 0; try < 20; try++ {
				n, err = replayStream(ctx, "POST", e.URL+chatPath, chatBody(prompts[k], true), prompts[k], events,
					secHeaders([]string{"Idempotency-Key", fmt.Sprintf("k-long-%d", k)}, bulk)...)
				if err == nil || !strings.Contains(err.Error(), ": 429 ") {
					break
				}
				time.Sleep(500 * time.Millisecond)
			}
			if err != nil {
				t.Errorf("writing key %d: %v (%d events)", k, err, n)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The other tenant's small completed key, and its replay alone.
	small := secBearer("small-tenant")
	smallPrompt := uniquePrompt(t, "[tokens=50]")
	checkComplete(t, readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(smallPrompt, true), secHeaders([]string{"Idempotency-Key", "k-small"}, small)...), -1), smallPrompt, 50)
	smallReplay := func() time.Duration {
		start := time.Now()
		if n, err := replayStream(ctx, "GET", e.URL+"/v1/streams/k-small", "", smallPrompt, 50, small...); err != nil {
			t.Errorf("the small replay: %v (%d events)", err, n)
		}
		return time.Since(start)
	}
	var alone []time.Duration
	for range 3 {
		alone = append(alone, smallReplay())
	}

	// The long replays, all at once; the small one three times beside them
	// once every long replay has its first event.
	var started, done sync.WaitGroup
	var completed, delivered atomic.Int64
	failures := make(chan error, replays)
	begin := time.Now()
	for i := range replays {
		k := i % keys
		started.Add(1)
		done.Go(func() {
			var once sync.Once
			n, err := replayStreamAt(ctx, "GET", fmt.Sprintf("%s/v1/streams/k-long-%d", e.URL, k), "", prompts[k], events,
				func() { once.Do(started.Done) }, bulk...)
			once.Do(started.Done)
			delivered.Add(int64(n))
			if err != nil {
				failures <- fmt.Errorf("replay %d of key %d: %w", i, k, err)
				return
			}
			completed.Add(1)
		})
	}
	started.Wait()
	var beside []time.Duration
	for range 3 {
		beside = append(beside, smallReplay())
	}
	done.Wait()
	elapsed := time.Since(begin)
	close(failures)
	var failed []error
	unavailable := 0
	for err := range failures {
		failed = append(failed, err)
		if strings.Contains(err.Error(), "journal_unavailable") {
			unavailable++
		}
	}
	t.Logf("%d replays of %d-event keys: %d completed, %d failed (%d journal_unavailable) in %v, %.0f events/s; the other tenant's 50-event replay took %v alone, %v beside them (median of 3)",
		replays, events, completed.Load(), len(failed), unavailable, elapsed.Round(time.Millisecond),
		float64(delivered.Load())/elapsed.Seconds(), median(alone), median(beside))
	for i, err := range failed {
		if i == 5 {
			t.Errorf("... and %d more", len(failed)-i)
			break
		}
		t.Error(err)
	}
}

// replayStream sends a request and reads a chat stream of n tokens for
// prompt to its end without keeping it: role, the tokens in order, stop,
// [DONE]. It returns how many events it read, and what was wrong.
func replayStream(ctx context.Context, method, url, body, prompt string, n int, header ...string) (int, error) {
	return replayStreamAt(ctx, method, url, body, prompt, n, nil, header...)
}

// replayStreamAt is replayStream calling first (when set) after the first event.
func replayStreamAt(ctx context.Context, method, url, body, prompt string, n int, first func(), header ...string) (int, error) {
	resp, err := send(ctx, method, url, body, header...)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		return 0, fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, ct)
	}
	want := mockllm.Content(prompt, n, false)
	got, tokens := 0, 0
	var last event
	for ev, err := range sse.Read(resp.Body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
		if err != nil {
			return got, fmt.Errorf("after %d events: %w", got, err)
		}
		got++
		if got == 1 && first != nil {
			first()
		}
		last = event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data}
		if ev.Type == "error" {
			return got, fmt.Errorf("event %d: error %s", got, ev.Data)
		}
		text, err := chatText([]event{last})
		if err != nil {
			return got, err
		}
		if text == "" {
			continue
		}
		if tokens >= len(want) || text != want[tokens] {
			return got, fmt.Errorf("event %d: token %d is %q, want the %d-token content in order", got, tokens, text, n)
		}
		tokens++
	}
	if got != n+3 || last.Data != "[DONE]" || tokens != n {
		return got, fmt.Errorf("%d events (%d tokens) ending %+v, want %d ending [DONE]", got, tokens, last, n+3)
	}
	return got, nil
}
