package tests

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
)

// TestScaleIdleReadersNoCliff: thousands of idle readers of a live
// generation, on its owner and on another instance of the same NATS (the
// documented topology: a balancer without stickiness), hold no JetStream
// consumer, and another tenant's long replay on the other instance
// completes meanwhile, as fast as before them (the ratio is logged). When
// each reader held a consumer, ~1,000 of them used up the stream's share
// and every other read failed with journal_unavailable after 30 s. The
// idle tenant's readers are bounded per instance (429 past its limit)
// while the other tenant still reads.
//
// 5,000 readers (1,200 under -race, whose detector allows 8,128
// goroutines: still past the old cliff, all on the non-owner).
func TestScaleIdleReadersNoCliff(t *testing.T) {
	if testing.Short() {
		t.Skip("thousands of connections")
	}
	readers, onOwner := 5000, 2500
	if raceEnabled {
		readers, onOwner = 1200, 0
	}
	ns := startNATSServer(t)
	urls := []string{ns.Server.ClientURL()}
	hs := httptest.NewServer(mockllm.New(mockllm.Config{}))
	t.Cleanup(hs.Close)
	// Each instance's limits fit its readers exactly (on A the POSTing
	// client is one too).
	opts := func(limit int) instanceOptions {
		return instanceOptions{lease: 10 * time.Second, replicas: 1, grace: 2 * time.Second, lenient: true, configure: func(cfg *proxy.Config) {
			cfg.HTTP.MaxReadersPerKey = limit
			cfg.HTTP.MaxReadersPerTenant = limit
			cfg.HTTP.Heartbeat = 15 * time.Second
			cfg.Limits.IdleTimeout = 10 * time.Minute
		}}
	}
	a := startInstance(t, "A", urls, hs.URL, opts(onOwner+1))
	b := startInstance(t, "B", urls, hs.URL, opts(readers-onOwner))
	ctx := waitCtx(t, 3*time.Minute)

	// The other tenant's completed long stream, and its replay on B alone.
	other := secBearer("other-tenant")
	long := uniquePrompt(t, "[tokens=3000]")
	checkComplete(t, readEvents(t, do(t, "POST", a.URL+chatPath, chatBody(long, true), secHeaders([]string{"Idempotency-Key", "k-long"}, other)...), -1), long, 3000)
	replay := func() time.Duration {
		start := time.Now()
		checkComplete(t, readEvents(t, do(t, "GET", b.URL+"/v1/streams/k-long", "", other...), -1), long, 3000)
		return time.Since(start)
	}
	var alone []time.Duration
	for range 3 {
		alone = append(alone, replay())
	}

	// The idle tenant's live generation: 2 events, then the upstream waits.
	idle := secBearer("idle-tenant")
	first := do(t, "POST", a.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=10] [hang_after=2]"), true), secHeaders([]string{"Idempotency-Key", "k-idle"}, idle)...)
	defer first.Body.Close()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var caught, ended sync.WaitGroup
	failures := make(chan error, readers)
	for i := range readers {
		base := b.URL
		if i < onOwner {
			base = a.URL
		}
		caught.Add(1)
		ended.Add(1)
		go func() {
			defer ended.Done()
			var once sync.Once
			// A refusal to wait out (503, as for a record read that timed
			// out on a loaded machine) is asked again, as clients do.
			var evs []event
			var err error
			for try := 0; try < 5; try++ {
				evs, err = fetchEvents(rctx, "GET", base+"/v1/streams/k-idle", "", 2, func() { once.Do(caught.Done) }, idle...)
				if err == nil || !strings.Contains(err.Error(), ": 503 ") || rctx.Err() != nil {
					break
				}
				time.Sleep(time.Second)
			}
			once.Do(caught.Done)
			if rctx.Err() == nil { // an idle reader must not end while the generation runs
				failures <- fmt.Errorf("reader %d of %s: ended after %d events %+v: %w", i, base, len(evs), evs, err)
			}
		}()
	}
	caught.Wait()
	select {
	case err := <-failures:
		t.Fatalf("an idle reader ended: %v", err)
	default:
	}

	js, err := jetstream.New(b.nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("%d idle readers hold %d consumers, want none", readers, info.State.Consumers)
	}

	// The idle tenant is at its limit on B; the other tenant is not.
	testutil.ExpectAPIError(t, do(t, "GET", b.URL+"/v1/streams/k-idle", "", idle...), 429, "too_many_readers")
	var beside []time.Duration
	for range 3 {
		beside = append(beside, replay())
	}
	ma, mb := median(alone), median(beside)
	t.Logf("%d idle readers (%d on the owner, %d on B): the other tenant's 3000-event replay on B took %v alone, %v beside them (median of 3; ratio %.2f)",
		readers, onOwner, readers-onOwner, ma, mb, float64(mb)/float64(ma))

	stop()
	ended.Wait()
	close(failures)
	for err := range failures {
		if err != nil && !strings.Contains(err.Error(), "context canceled") {
			t.Errorf("an idle reader: %v", err)
		}
	}
}

// median is the middle of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
