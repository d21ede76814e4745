package tests

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
)

var (
	soakFlag     = flag.Duration("soak", 20*time.Second, "soak: how long TestSoak keeps its load up (by hand: -soak=1h)")
	soakHeapFlag = flag.String("soak.heap", "", "soak: write a heap profile here once the load stopped, before the instances are")
	soakNATSFlag = flag.String("soak.nats", "", "soak: the URL of a JetStream server in its own process (by hand: nats-server -js), so that the process's heap is reprise's; default: an embedded one")
)

// TestSoak keeps a moderate load on two instances of one NATS for -soak
// (20 s in CI, an hour by hand): clients stream new keys, drop a third of
// them midway and resume on the other instance, and replay finished ones.
// The process's goroutines, heap and RSS (both instances, the model, NATS
// and the clients are in it) are sampled throughout and logged. Once the
// load stops the goroutines return to what they were before it. Stored
// data grows until the journal's TTL (1 min here) starts removing it, so
// the heap is judged only in runs of 4 min or more: its median in the last
// quarter must not outgrow the third quarter's.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("a sustained load")
	}
	const clients = 8
	urls := []string{*soakNATSFlag}
	if *soakNATSFlag == "" {
		urls = []string{startNATSServer(t).Server.ClientURL()}
	}
	hs := httptest.NewServer(mockllm.New(mockllm.Config{}))
	t.Cleanup(hs.Close)
	opts := instanceOptions{lease: 2 * time.Second, replicas: 1, grace: 2 * time.Second, configure: func(cfg *proxy.Config) {
		cfg.Journal.TTL = time.Minute
		cfg.Limits.MaxGeneration = 20 * time.Second
	}}
	inst := []*instance{startInstance(t, "A", urls, hs.URL, opts), startInstance(t, "B", urls, hs.URL, opts)}

	settle := func() int { // goroutines once the idle ones are parked
		http.DefaultClient.CloseIdleConnections() // the clients' keep-alive connections, and the servers' ends of them
		time.Sleep(time.Second)
		runtime.GC()
		return runtime.NumGoroutine()
	}
	var streams, resumes, replays, shed atomic.Int64
	load := func(ctx context.Context) (errs <-chan error, wait func()) {
		ch := make(chan error, clients)
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					if err := soakOnce(ctx, inst[n%2], inst[(n+1)%2], c, n, &resumes, &replays, &shed); err != nil {
						if ctx.Err() == nil {
							ch <- err
						}
						return
					}
					streams.Add(1)
				}
			})
		}
		return ch, wg.Wait
	}
	// A warm-up first: the connection pools (clients', and the instances'
	// to the model) are then full, and what stays after the soak is what it
	// leaked.
	warm, stopWarm := context.WithTimeout(context.Background(), 2*time.Second)
	_, waitWarm := load(warm)
	waitWarm()
	stopWarm()
	before := settle()
	streams.Store(0)
	resumes.Store(0)
	replays.Store(0)
	shed.Store(0)
	ctx, stop := context.WithTimeout(context.Background(), *soakFlag)
	defer stop()
	errs, wait := load(ctx)
	type sample struct {
		at         time.Duration
		goroutines int
		heap       uint64
		rss        int64
	}
	var samples []sample
	start := time.Now()
	every := max(*soakFlag/40, 500*time.Millisecond)
	tick := time.NewTicker(every)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case err := <-errs:
			stop()
			t.Fatal(err)
		case <-tick.C:
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			samples = append(samples, sample{time.Since(start), runtime.NumGoroutine(), ms.HeapInuse, rssKB()})
		}
	}
	tick.Stop()
	wait()
	if *soakHeapFlag != "" {
		runtime.GC()
		f, err := os.Create(*soakHeapFlag)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	after := settle()
	half := len(samples) / 2
	heapMedian := func(s []sample) uint64 {
		h := make([]uint64, len(s))
		for i, x := range s {
			h[i] = x.heap
		}
		slices.Sort(h)
		return h[len(h)/2]
	}
	if half < 2 {
		t.Fatalf("%d samples: -soak too short", len(samples))
	}
	q := len(samples) / 4
	first, second := heapMedian(samples[half:half+q]), heapMedian(samples[half+q:])
	var lines []string
	for _, s := range samples {
		lines = append(lines, fmt.Sprintf("%s g=%d heap=%.1fMB rss=%.1fMB", s.at.Round(time.Second), s.goroutines, float64(s.heap)/1e6, float64(s.rss)/1e3))
	}
	t.Logf("soak %v, %d clients: %d streams (%d dropped and resumed on the other instance, %d replayed, %d refused 429 and asked again); goroutines %d before, %d after; median heap %.1f MB in the third quarter, %.1f MB in the fourth; samples:\n%s",
		*soakFlag, clients, streams.Load(), resumes.Load(), replays.Load(), shed.Load(), before, after, float64(first)/1e6, float64(second)/1e6, strings.Join(lines, "\n"))
	if streams.Load() == 0 {
		t.Fatal("no stream completed")
	}
	if *soakFlag >= 4*time.Minute && float64(second) > 1.2*float64(first)+8e6 {
		t.Errorf("the heap grew under a steady load: median %.1f MB, then %.1f MB", float64(first)/1e6, float64(second)/1e6)
	}
	if after > before+20 {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Errorf("%d goroutines after the load, %d before it: leaked:\n%s", after, before, b.String())
	}
}

// soakOnce streams one new key on a; every third is dropped midway and
// resumed on b; every second is then replayed on b.
func soakOnce(ctx context.Context, a, b *instance, c, n int, resumes, replays, shed *atomic.Int64) error {
	key := fmt.Sprintf("soak-%d-%d-%d", c, n, time.Now().UnixNano())
	prompt := fmt.Sprintf("soak %s [tokens=60] [delay=2ms]", key)
	body := chatBody(prompt, true)
	rctx, cut := context.WithCancel(ctx)
	defer cut()
	var drop func()
	if n%3 == 0 {
		drop = cut
	}
	// A new generation may be refused (429) while the journal is behind —
	// on a busy machine it is: asked again after Retry-After, as clients do.
	evs, err := fetchEvents(rctx, "POST", a.URL+chatPath, body, 20, drop, "Idempotency-Key", key)
	for refused := (*refusedError)(nil); errors.As(err, &refused); {
		shed.Add(1)
		select {
		case <-time.After(refused.retryAfter):
		case <-ctx.Done():
			return nil
		}
		evs, err = fetchEvents(rctx, "POST", a.URL+chatPath, body, 20, drop, "Idempotency-Key", key)
	}
	if drop != nil {
		if ctx.Err() != nil {
			return nil
		}
		if len(evs) < 20 {
			return fmt.Errorf("%s: dropped after %d events, want 20: %w", key, len(evs), err)
		}
		resumes.Add(1)
		rest, err := fetchEvents(ctx, "GET", b.URL+"/v1/streams/"+key, "", 0, nil, "Last-Event-ID", evs[19].ID)
		if err != nil {
			return err
		}
		evs = append(evs[:20], rest...)
	} else if err != nil {
		return err
	}
	if len(evs) != 63 || evs[len(evs)-1].Data != "[DONE]" {
		return fmt.Errorf("%s: %d events ending %+v, want 63 ending [DONE]", key, len(evs), evs[len(evs)-1])
	}
	if n%2 == 0 {
		again, err := fetchEvents(ctx, "POST", b.URL+chatPath, body, 0, nil, "Idempotency-Key", key)
		if err != nil {
			return err
		}
		if len(again) != 63 {
			return fmt.Errorf("%s: replay of %d events, want 63", key, len(again))
		}
		replays.Add(1)
	}
	return nil
}

// rssKB is the process's resident set (Linux), 0 elsewhere.
func rssKB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
