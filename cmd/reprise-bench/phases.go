package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reprise-dev/reprise/resume"
)

// ---- throughput ----

// throughput streams tpTokens-token generations through the pass-through
// and reprise, S at a time, alternating which goes first.
func (b *bench) throughput() error {
	want := b.o.tpTokens + chatExtra
	for _, t := range []target{b.pass, b.rep} {
		if c := b.tpCell(t, 10, 20, "warm", want); c.errs > 0 {
			return fmt.Errorf("warm-up %s: %d failed streams", t.name, c.errs)
		}
	}
	top := slices.Max(b.o.concurrency)
	b.res.tp = nil
	for _, s := range b.o.concurrency {
		b.res.tp = append(b.res.tp, &tpResult{S: s})
	}
	for r := range b.o.runs {
		for i, s := range b.o.concurrency {
			order := []target{b.pass, b.rep}
			if (r+i)%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			rates, cpus := map[string]float64{}, map[string]float64{}
			for _, t := range order {
				if r == 0 && s == top {
					b.prof.start(fmt.Sprintf("throughput-S%d-%s", s, t.name))
				}
				c := b.tpCell(t, s, max(s, b.o.tpStreams), fmt.Sprintf("r%d", r), want)
				b.prof.stop()
				if err := b.ctx.Err(); err != nil {
					return err
				}
				b.res.tp[i].errs += c.errs
				rates[t.name], cpus[t.name] = c.rate, c.cpuPerEvent
			}
			res := b.res.tp[i]
			res.pass = append(res.pass, rates[b.pass.name])
			res.rep = append(res.rep, rates[b.rep.name])
			res.ratio = append(res.ratio, rates[b.rep.name]/rates[b.pass.name])
			res.passCPU = append(res.passCPU, cpus[b.pass.name])
			res.repCPU = append(res.repCPU, cpus[b.rep.name])
			b.progress("throughput run %d S=%d: pass-through %.0f ev/s (%.1f µs CPU/event), reprise %.0f ev/s (%.1f µs CPU/event), ratio %.2f (load %s)",
				r+1, s, rates[b.pass.name], cpus[b.pass.name], rates[b.rep.name], cpus[b.rep.name], rates[b.rep.name]/rates[b.pass.name], loadAvg())
		}
	}
	return nil
}

type cell struct {
	rate        float64 // data events per second of wall time
	cpuPerEvent float64 // µs of this process's CPU per event
	errs        int
}

// tpCell runs streams streams through t, s at a time, and returns the rate
// of data events over the wall time.
func (b *bench) tpCell(t target, s, streams int, tag string, want int) cell {
	var next, events, errs atomic.Int64
	var firstErr atomic.Pointer[error]
	var wg sync.WaitGroup
	cpu0, start := cpuTime(), time.Now()
	for w := range s {
		wg.Go(func() {
			o := reqOpts{bearer: fmt.Sprintf("bench-tp-%d", w)}
			for {
				i := next.Add(1) - 1
				if i >= int64(streams) || b.ctx.Err() != nil {
					return
				}
				// The same prompt (so the same bytes) for both targets.
				prompt := fmt.Sprintf("tp %s S%d n%d %s [tokens=%d]", tag, s, i, b.nonce, b.o.tpTokens)
				o.key = fmt.Sprintf("tp-%s-S%d-%d-%s", tag, s, i, b.nonce)
				ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
				n, err := b.c.streamOnce(ctx, t, prompt, o, want)
				cancel()
				events.Add(int64(n))
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	wall, cpu := time.Since(start), cpuTime()-cpu0
	if e := firstErr.Load(); e != nil && b.ctx.Err() == nil {
		b.res.notes = append(b.res.notes, fmt.Sprintf("throughput %s S=%d %s: %d failed streams, first: %v", t.name, s, tag, errs.Load(), *e))
	}
	n := float64(events.Load())
	return cell{rate: n / wall.Seconds(), cpuPerEvent: float64(cpu.Microseconds()) / n, errs: int(errs.Load())}
}

// ---- time to first content event ----

func (b *bench) ttft() error {
	rep := b.rep
	rep.keyed = !b.o.ttftKeyless
	targets := []target{b.direct, b.pass, rep}
	for i := range 30 { // warm-up
		for _, t := range targets {
			if _, err := b.ttftOnce(t, fmt.Sprintf("ttft warm %d %s [tokens=8]", i, b.nonce), fmt.Sprintf("ttft-warm-%d-%s", i, b.nonce)); err != nil {
				return fmt.Errorf("warm-up %s: %w", t.name, err)
			}
		}
	}
	b.res.ttft = map[string]*pctRuns{}
	for _, t := range targets {
		b.res.ttft[t.name] = &pctRuns{}
	}
	for r := range b.o.runs {
		samples := map[string][]float64{}
		if r == 0 {
			b.prof.start("ttft")
		}
		for i := range b.o.ttftSamples {
			for j := range targets {
				t := targets[(i+j)%len(targets)] // rotate who goes first
				prompt := fmt.Sprintf("ttft r%d n%d %s [tokens=8]", r, i, b.nonce)
				d, err := b.ttftOnce(t, prompt, fmt.Sprintf("ttft-%d-%d-%s", r, i, b.nonce))
				if err != nil {
					if b.ctx.Err() != nil {
						b.prof.stop()
						return b.ctx.Err()
					}
					b.res.ttft[t.name].errs++
					continue
				}
				samples[t.name] = append(samples[t.name], ms(d))
			}
		}
		b.prof.stop()
		for _, t := range targets {
			b.res.ttft[t.name].add(samples[t.name])
		}
		p := func(t target) *pctRuns { return b.res.ttft[t.name] }
		b.progress("ttft run %d: p50 direct %.3f pass %.3f reprise %.3f ms; p99 %.3f %.3f %.3f ms (load %s)", r+1,
			last(p(b.direct).p50), last(p(b.pass).p50), last(p(b.rep).p50),
			last(p(b.direct).p99), last(p(b.pass).p99), last(p(b.rep).p99), loadAvg())
	}
	return nil
}

func last(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

// ttftOnce posts a short stream and returns the time from sending the
// request to the first data event with content; it reads the rest so the
// connection is reused.
func (b *bench) ttftOnce(t target, prompt, key string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	t0 := time.Now()
	resp, err := b.c.post(ctx, t, prompt, reqOpts{key: key, bearer: "bench-ttft"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	r := newSSEReader(resp.Body)
	var first time.Duration
	done := false
	for {
		l, err := r.line()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, err
		}
		d, ok := dataOf(l)
		if !ok {
			continue
		}
		if first == 0 && isContent(d) {
			first = time.Since(t0)
		}
		done = string(d) == "[DONE]"
	}
	if first == 0 || !done {
		return 0, fmt.Errorf("%s: no content event or no [DONE]", t.name)
	}
	return first, nil
}

// chatExtra is how many events a chat stream has besides its tokens: the
// role chunk, the stop chunk and [DONE] (no usage chunk: the bench does
// not ask for it).
const chatExtra = 3

// ---- resume ----

func (b *bench) resume() error {
	h := b.o.resumeEvents
	done, err := b.completedKey(fmt.Sprintf("resume-done-%s", b.nonce), fmt.Sprintf("resume done %s [tokens=%d]", b.nonce, h-chatExtra), h)
	if err != nil {
		return fmt.Errorf("completed key: %w", err)
	}
	b.res.resumeLive, b.res.resumeDone, b.res.resumeOther = &pctRuns{}, &pctRuns{}, &pctRuns{}
	other := strings.Replace(done, b.st.RepURL, b.st.OtherURL, 1) // the same key on an instance that did not run it
	for r := range b.o.runs {
		// A fresh live generation per run: the fake upstream holds it open
		// after h events, so it stays in progress on this (the owning)
		// instance, well within the idle timeout.
		live, err := b.liveKey(fmt.Sprintf("resume-live-%d-%s", r, b.nonce), fmt.Sprintf("resume live %d %s [tokens=100000] [hang_after=%d]", r, b.nonce, h), h)
		if err != nil {
			return fmt.Errorf("live key: %w", err)
		}
		b.readerBase = b.steadyReaders()
		if r == 0 {
			b.prof.start("resume")
		}
		ls, lerrs, err := b.resumeSamples(live, live, h)
		for _, c := range []struct {
			at  string
			res *pctRuns
		}{{done, b.res.resumeDone}, {other, b.res.resumeOther}} {
			if err != nil {
				break
			}
			var ds []float64
			var derrs int
			ds, derrs, err = b.resumeSamples(done, c.at, h)
			c.res.add(ds)
			c.res.errs += derrs
		}
		b.prof.stop()
		b.res.resumeLive.add(ls)
		b.res.resumeLive.errs += lerrs
		if err != nil {
			return err
		}
		b.progress("resume run %d: live p50 %.3f p99 %.3f ms; completed p50 %.3f p99 %.3f ms, on another instance p50 %.3f p99 %.3f ms (load %s)", r+1,
			last(b.res.resumeLive.p50), last(b.res.resumeLive.p99), last(b.res.resumeDone.p50), last(b.res.resumeDone.p99),
			last(b.res.resumeOther.p50), last(b.res.resumeOther.p99), loadAvg())
	}
	return nil
}

// resumeSamples draws a drop point k in [1, h-1], reads a stream of loc
// from its start to event k, drops the connection, reconnects to at (loc,
// or the same key on another instance) with Last-Event-ID and times the
// arrival of event k+1.
func (b *bench) resumeSamples(loc, at string, h int) ([]float64, int, error) {
	var out []float64
	errs := 0
	for range b.o.resumeSamples {
		if err := b.ctx.Err(); err != nil {
			return out, errs, err
		}
		k := 1 + b.rng.IntN(h-1)
		d, err := b.resumeOnce(loc, at, k)
		if err != nil {
			errs++
			if errs == 1 {
				b.res.notes = append(b.res.notes, fmt.Sprintf("resume: %v", err))
			}
			continue
		}
		out = append(out, ms(d))
	}
	return out, errs, nil
}

func (b *bench) resumeOnce(loc, at string, k int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	resp, err := b.c.get(ctx, loc, reqOpts{})
	if err != nil {
		return 0, err
	}
	id, n, err := readTo(resp.Body, k)
	resp.Body.Close() // the drop: the connection is closed mid-stream
	if err != nil || n < k {
		return 0, fmt.Errorf("reading to event %d: got %d: %w", k, n, err)
	}
	// Reconnect once reprise has let the dropped reader go (as any real
	// client's reconnect delay allows), so the old reader's teardown is not
	// timed as part of the resume.
	for deadline := time.Now().Add(2 * time.Second); b.st.readers() > b.readerBase && time.Now().Before(deadline); {
		time.Sleep(200 * time.Microsecond)
	}
	b.cleanConsumers()
	time.Sleep(b.o.resumePause) // a reconnect comes some time after the drop
	t0 := time.Now()
	resp, err = b.c.get(ctx, at, reqOpts{lastEventID: id})
	if err != nil {
		return 0, err
	}
	got, n, err := readTo(resp.Body, 1)
	d := time.Since(t0)
	resp.Body.Close()
	if err != nil || n < 1 {
		return 0, fmt.Errorf("resuming after %s: %w", id, err)
	}
	if p, err := resume.ParsePosition(got); err != nil || p.Offset != uint64(k)+1 {
		return 0, fmt.Errorf("resumed after %s at %q, want offset %d", id, got, k+1)
	}
	return d, nil
}

// readTo reads data events until the k-th and returns its id.
func readTo(body io.Reader, k int) (string, int, error) {
	r := newSSEReader(body)
	id, n := "", 0
	for n < k {
		l, err := r.line()
		if err != nil {
			return id, n, err
		}
		if v, ok := idOf(l); ok {
			id = v
			continue
		}
		if _, ok := dataOf(l); ok {
			n++
		}
	}
	return id, n, nil
}

// liveKey starts a generation on reprise that stays live after h events,
// reads those h events, and returns the absolute Location.
func (b *bench) liveKey(key, prompt string, h int) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	resp, err := b.c.post(ctx, b.rep, prompt, reqOpts{key: key, bearer: "bench-resume"})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close() // the generation goes on without this client
	loc := b.st.RepURL + resp.Header.Get("Location")
	if _, n, err := readTo(resp.Body, h); err != nil || n < h {
		return "", fmt.Errorf("read %d of %d events: %w", n, h, err)
	}
	return loc, nil
}

// completedKey runs a generation of want events on reprise to its end,
// waits until its record is completed, and returns the absolute Location.
func (b *bench) completedKey(key, prompt string, want int) (string, error) {
	return b.completedKeyOn(b.rep, "bench-resume", key, prompt, want)
}

// completedKeyOn is completedKey on t (a reprise instance) for the tenant
// of bearer.
func (b *bench) completedKeyOn(t target, bearer, key, prompt string, want int) (string, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	resp, err := b.c.post(ctx, t, prompt, reqOpts{key: key, bearer: bearer})
	if err != nil {
		return "", err
	}
	loc := t.base + resp.Header.Get("Location")
	n, done, err := readEvents(resp.Body, nil)
	resp.Body.Close()
	if err != nil || n != want || !done {
		return "", fmt.Errorf("generation: %d events (done %v), want %d: %w", n, done, want, err)
	}
	for {
		st, err := b.status(ctx, loc)
		if err != nil {
			return "", err
		}
		if st == string(resume.Completed) {
			return loc, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("key still %s: %w", st, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (b *bench) status(ctx context.Context, loc string) (string, error) {
	resp, err := b.c.get(ctx, loc, reqOpts{accept: "application/json"})
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var v struct {
		State string `json:"state"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", err
	}
	return v.State, nil
}

// ---- replay ----

func (b *bench) replay() error {
	n := b.o.replayEvents
	t0 := time.Now()
	key, prompt := fmt.Sprintf("replay-%s", b.nonce), fmt.Sprintf("replay %s [tokens=%d]", b.nonce, n-chatExtra)
	loc, err := b.completedKey(key, prompt, n)
	if err != nil {
		return fmt.Errorf("completed key: %w", err)
	}
	b.res.replayGen = time.Since(t0)
	// Each run replays by a GET of the Location and by the same POST again
	// (what an SDK's retry does), in alternating order.
	ways := []struct {
		name  string
		rates *[]float64
		do    func(ctx context.Context) (*http.Response, error)
	}{
		{"GET", &b.res.replay, func(ctx context.Context) (*http.Response, error) { return b.c.get(ctx, loc, reqOpts{}) }},
		{"POST", &b.res.replayPost, func(ctx context.Context) (*http.Response, error) {
			return b.c.post(ctx, b.rep, prompt, reqOpts{key: key, bearer: "bench-resume"})
		}},
	}
	for r := range b.o.runs {
		for i := range ways {
			w := ways[(i+r)%2]
			if r == 0 {
				b.prof.start("replay-" + w.name)
			}
			rate, err := b.replayOnce(w.do, n)
			b.prof.stop()
			b.steadyReaders()
			b.cleanConsumers()
			if err != nil {
				if b.ctx.Err() != nil {
					return err
				}
				b.res.notes = append(b.res.notes, fmt.Sprintf("replay run %d (%s): %v", r+1, w.name, err))
				continue
			}
			*w.rates = append(*w.rates, rate)
			b.progress("replay run %d (%s): %.0f events/s (load %s)", r+1, w.name, rate, loadAvg())
		}
	}
	return nil
}

func (b *bench) replayOnce(do func(context.Context) (*http.Response, error), want int) (float64, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	resp, err := do(ctx)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	n, done, err := readEvents(resp.Body, nil)
	d := time.Since(t0)
	if err != nil || n != want || !done {
		return 0, fmt.Errorf("%d events (done %v), want %d: %w", n, done, want, err)
	}
	return float64(n) / d.Seconds(), nil
}

// ---- the mix ----

func (b *bench) mix() error {
	tokens := max(1, int(b.o.mixDuration.Seconds()*float64(b.o.mixRate))-chatExtra)
	delay := time.Second / time.Duration(b.o.mixRate)
	b.res.mix = map[int]map[string]*mixResult{}
	for _, m := range b.o.mixStreams {
		b.res.mix[m] = map[string]*mixResult{}
		for r := range b.o.mixRuns {
			order := []target{b.pass, b.rep}
			if r%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, t := range order {
				b.st.llm.Ledger().Reset()
				if r == 0 {
					b.prof.start(fmt.Sprintf("mix-%d-%s", m, t.name))
				}
				res, err := b.mixRun(t, m, r, tokens, delay)
				b.prof.stop()
				if err != nil {
					return err
				}
				if prev := b.res.mix[m][t.name]; prev != nil {
					prev.merge(res)
				} else {
					b.res.mix[m][t.name] = res
				}
				b.progress("mix %d run %d %s: %d streams, %d events, %d errors, %d shed, delay p50 %.3f p90 %.3f p99 %.3f p99.9 %.3f max %.1f ms (from event %d on: p99 %.3f), CPU %.1fs over %.1fs, %d GC cycles using %.1fs CPU (load %s)",
					m, r+1, t.name, res.streams, res.events, res.errs, res.shed, res.delay.quantile(50), res.delay.quantile(90), res.delay.quantile(99),
					res.delay.quantile(99.9), ms(res.delay.max), mixSteadyAfter+1, res.steady.quantile(99),
					res.cpu.Seconds(), res.wall.Seconds(), res.gcCycles, res.gcCPU.Seconds(), loadAvg())
			}
		}
	}
	return nil
}

// mixSteadyAfter: the steady-state delay leaves out each stream's first events.
const mixSteadyAfter = 10

// mixRun starts m streams of tokens events, one every delay, over a ramp,
// and measures each event's arrival against the time the fake upstream
// wrote it.
func (b *bench) mixRun(t target, m, r, tokens int, delay time.Duration) (*mixResult, error) {
	want := tokens + chatExtra
	b.st.emits.reset()
	ramp := min(2*time.Second, b.o.mixDuration/5)
	arrivals := make([][]time.Duration, m)
	agents := make([]string, m)
	var errs, shedN atomic.Int64
	var kindsMu sync.Mutex
	kinds := map[string]int{} // why streams failed
	var wg sync.WaitGroup
	limit := b.o.mixDuration*2 + time.Minute
	msgs0, _ := b.st.journalMessages(b.ctx)
	gc0, gcCPU0 := gcStats()
	cpu0, t0 := cpuTime(), time.Now()
	for i := range m {
		agents[i] = fmt.Sprintf("%s%s-%d-%d-%d-%s", mixAgent, t.name, m, r, i, b.nonce)
		wg.Go(func() {
			select {
			case <-time.After(time.Duration(i) * ramp / time.Duration(m)):
			case <-b.ctx.Done():
				return
			}
			ctx, cancel := context.WithTimeout(b.ctx, limit)
			defer cancel()
			o := reqOpts{key: fmt.Sprintf("mix-%d-%d-%d-%s", m, r, i, b.nonce), bearer: fmt.Sprintf("bench-mix-%d", i), agent: agents[i]}
			prompt := fmt.Sprintf("mix m%d r%d n%d %s [tokens=%d] [delay=%s]", m, r, i, b.nonce, tokens, delay)
			fail := func(kind string) {
				errs.Add(1)
				kindsMu.Lock()
				kinds[kind]++
				kindsMu.Unlock()
			}
			resp, err := b.c.post(ctx, t, prompt, o)
			if shed(err) {
				shedN.Add(1)
				return
			}
			if err != nil {
				fail(errKind(err))
				return
			}
			defer resp.Body.Close()
			arr := make([]time.Duration, 0, want)
			var lastData []byte
			n, done, err := readEvents(resp.Body, func(_ int, d []byte) {
				arr = append(arr, b.st.emits.since())
				lastData = append(lastData[:0], d[:min(len(d), 160)]...)
			})
			arrivals[i] = arr
			switch {
			case err != nil:
				fail("read error: " + errKind(err))
			case n != want || !done:
				if bytes.HasPrefix(lastData, []byte(`{"error"`)) {
					fail("ended with an error event: " + string(lastData))
				} else {
					fail("ended early without [DONE] or an error event")
				}
			}
		})
	}
	wg.Wait()
	res := &mixResult{streams: m, wall: time.Since(t0), cpu: cpuTime() - cpu0, delay: newHist(), steady: newHist(), errs: int(errs.Load()), shed: int(shedN.Load())}
	gc1, gcCPU1 := gcStats()
	res.gcCycles, res.gcCPU = gc1-gc0, gcCPU1-gcCPU0
	if err := b.ctx.Err(); err != nil {
		return nil, err
	}
	if msgs1, err := b.st.journalMessages(b.ctx); err == nil && t.name == b.rep.name {
		res.journalMsgs = int(msgs1 - msgs0)
	}
	if res.shed > 0 {
		b.res.notes = append(b.res.notes, fmt.Sprintf("mix %d %s run %d: %d new streams shed (429 overloaded: the journal was behind); the others ran", m, t.name, r+1, res.shed))
	}
	for kind, n := range kinds {
		b.res.notes = append(b.res.notes, fmt.Sprintf("mix %d %s run %d: %d streams failed: %s", m, t.name, r+1, n, kind))
	}
	for i, arr := range arrivals {
		emits := b.st.emits.get(agents[i]).times()
		for k := range min(len(arr), len(emits)) {
			res.delay.add(arr[k] - emits[k])
			if k >= mixSteadyAfter {
				res.steady.add(arr[k] - emits[k])
			}
		}
		res.events += len(arr)
	}
	return res, nil
}

// cleanConsumers deletes the consumers journal readers left behind (see
// stack.deleteConsumers) and counts them.
func (b *bench) cleanConsumers() {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	n, err := b.st.deleteConsumers(ctx)
	b.res.consumersDeleted += n
	if err != nil && b.ctx.Err() == nil {
		b.res.notes = append(b.res.notes, fmt.Sprintf("deleting leftover consumers: %v", err))
	}
}

// errKind shortens an error for grouping: without addresses and ids.
func errKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "client timeout (context deadline exceeded)"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && strings.Contains(msg[:i], "127.0.0.1") {
		msg = msg[i+2:]
	}
	return msg
}
