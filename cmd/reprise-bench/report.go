package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"
)

type results struct {
	started   time.Time
	elapsed   time.Duration
	loadStart string
	loadEnd   string
	phaseLoad map[string]string
	nofile    uint64
	notes     []string

	consumersDeleted int // left behind by journal readers

	tp         []*tpResult
	ttft       map[string]*pctRuns
	resumeLive *pctRuns
	resumeDone *pctRuns
	// resumeOther: the completed key resumed on an instance that did not
	// run it (from JetStream).
	resumeOther *pctRuns
	replay      []float64
	replayPost  []float64 // by the same POST again
	replayGen   time.Duration
	fair        *fairResult
	mem         []*memResult
	mix         map[int]map[string]*mixResult // by stream count, then target
}

type tpResult struct {
	S         int
	pass, rep []float64 // events/s per run
	ratio     []float64 // reprise ÷ pass-through per run
	passCPU   []float64 // µs of process CPU per event
	repCPU    []float64
	errs      int
}

// pctRuns holds each run's p50 and p99.
type pctRuns struct {
	p50, p99 []float64
	samples  int
	errs     int
}

func (p *pctRuns) add(xs []float64) {
	if len(xs) == 0 {
		return
	}
	p.samples += len(xs)
	p.p50 = append(p.p50, percentile(xs, 50))
	p.p99 = append(p.p99, percentile(xs, 99))
}

type memResult struct {
	transport                 string // sse, websocket or h2
	n, reached, serverReaders int
	conns                     int // connections the client process dialed
	rssBeforeKB, rssAfterKB   int64
	perClientKB               float64
	heapKB, stackKB           float64
	goroutines                float64
	childKB                   float64
	rounds                    []float64 // RSS per client of every round
}

type mixResult struct {
	streams, events, errs int
	journalMsgs           int // messages reprise stored meanwhile (its records' not counted)
	shed                  int // refused with 429 overloaded: not started, not failed
	wall, cpu             time.Duration
	gcCycles              uint64
	gcCPU                 time.Duration
	delay                 *hist
	steady                *hist // from event mixSteadyAfter+1 on
}

// mixAdded is what reprise adds over the pass-through in a mix: per-event
// delay at p50 and p99 (ms), and its process CPU per event as a multiple
// of the pass-through's.
func mixAdded(pass, rep *mixResult) (add50, add99, cpu float64) {
	return rep.delay.quantile(50) - pass.delay.quantile(50), rep.delay.quantile(99) - pass.delay.quantile(99), perEvent(rep) / perEvent(pass)
}

// perEvent is a mix's process CPU per event received, in µs.
func perEvent(m *mixResult) float64 {
	if m.events == 0 {
		return math.NaN()
	}
	return float64(m.cpu.Microseconds()) / float64(m.events)
}

func (m *mixResult) merge(o *mixResult) {
	m.streams += o.streams
	m.events += o.events
	m.errs += o.errs
	m.journalMsgs += o.journalMsgs
	m.shed += o.shed
	m.wall += o.wall
	m.cpu += o.cpu
	m.gcCycles += o.gcCycles
	m.gcCPU += o.gcCPU
	m.delay.merge(o.delay)
	m.steady.merge(o.steady)
}

// summary holds the numbers of the last line.
type summary struct {
	ratio, ttft50, ttft99, resume99, replay, replayPost, rss float64
	mix50, mix99, mixCPU                                     float64 // the first mix's (200 streams by default)
	fair99, fairSteady99, fairRatio                          float64 // fairResult.summary
	ratioS, rssN                                             int
}

func (b *bench) summary() summary {
	s := summary{ratio: math.NaN(), ttft50: math.NaN(), ttft99: math.NaN(), resume99: math.NaN(), replay: math.NaN(), replayPost: math.NaN(), rss: math.NaN(),
		mix50: math.NaN(), mix99: math.NaN(), mixCPU: math.NaN(), fair99: math.NaN(), fairSteady99: math.NaN(), fairRatio: math.NaN()}
	if b.res.fair != nil {
		s.fair99, s.fairSteady99, s.fairRatio = b.res.fair.summary()
	}
	if len(b.o.mixStreams) > 0 {
		m := b.res.mix[b.o.mixStreams[0]]
		if p, rp := m[b.pass.name], m[b.rep.name]; p != nil && rp != nil {
			s.mix50, s.mix99, s.mixCPU = mixAdded(p, rp)
		}
	}
	for _, t := range b.res.tp { // the largest S (100 by default)
		if t.S >= s.ratioS && len(t.ratio) > 0 {
			s.ratio, s.ratioS = median(t.ratio), t.S
		}
	}
	if over := b.ttftOverhead(b.pass); over != nil {
		s.ttft50, s.ttft99 = over[0], over[1]
	}
	if b.res.resumeLive != nil {
		s.resume99 = median(b.res.resumeLive.p99)
	}
	s.replay = median(b.res.replay)
	s.replayPost = median(b.res.replayPost)
	for _, m := range b.res.mem { // the most SSE clients reached
		if m.transport == "sse" && m.reached >= s.rssN {
			s.rss, s.rssN = m.perClientKB, m.reached
		}
	}
	return s
}

// ttftOverhead is the median over runs of reprise's p50 and p99 minus base's.
func (b *bench) ttftOverhead(base target) []float64 {
	if b.res.ttft == nil {
		return nil
	}
	r, o := b.res.ttft[b.rep.name], b.res.ttft[base.name]
	if r == nil || o == nil || len(r.p50) == 0 || len(r.p50) != len(o.p50) {
		return nil
	}
	var d50, d99 []float64
	for i := range r.p50 {
		d50 = append(d50, r.p50[i]-o.p50[i])
		d99 = append(d99, r.p99[i]-o.p99[i])
	}
	return []float64{median(d50), median(d99)}
}

func f(v float64, digits int) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.*f", digits, v)
}

func kev(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return fmt.Sprintf("%.0fk", v/1000)
}

func verdict(v, limit float64, atMost bool) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case atMost && v <= limit, !atMost && v >= limit:
		return "met"
	}
	return "**missed**"
}

func (b *bench) report(w io.Writer) {
	o, r := b.o, b.res
	mode := "full"
	if o.short {
		mode = "short"
	}
	fmt.Fprintf(w, "## reprise-bench (%s run)\n\n", mode)
	fmt.Fprintf(w, "%s, %d CPUs (GOMAXPROCS %d), RLIMIT_NOFILE %d; load average %s at start, %s at end; %.0f s.\n",
		runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0), r.nofile, r.loadStart, r.loadEnd, r.elapsed.Seconds())
	fmt.Fprintf(w, "One process: fake upstream (zero delay) ← httputil.ReverseProxy (FlushInterval -1) | reprise (%s, auth passthrough); loopback; %d runs, medians of per-run values.\n\n", b.journalSetup(), o.runs)
	if o.natsURLs != "" {
		fmt.Fprintln(w, "NATS runs outside this process: the CPU and RSS figures are reprise's alone, without the JetStream server's share that an embedded run's include; compare them only with runs on external NATS.")
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "| measurement | direct | pass-through | reprise | reprise vs pass-through | target | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	s := b.summary()
	for _, t := range r.tp {
		target, met := "", ""
		if t.S == s.ratioS {
			target, met = "≥ 0.9×", verdict(median(t.ratio), 0.9, false)
		}
		errs := ""
		if t.errs > 0 {
			errs = fmt.Sprintf(" (%d failed streams)", t.errs)
		}
		fmt.Fprintf(w, "| throughput, S=%d concurrent × %d events (events/s)%s | | %s | %s | %s× | %s | %s |\n",
			t.S, o.tpTokens+chatExtra, errs, kev(median(t.pass)), kev(median(t.rep)), f(median(t.ratio), 2), target, met)
	}
	for _, t := range r.tp {
		fmt.Fprintf(w, "| throughput, S=%d: CPU of the whole process per event (µs) | | %s | %s | ×%s | | |\n",
			t.S, f(median(t.passCPU), 1), f(median(t.repCPU), 1), f(median(t.repCPU)/median(t.passCPU), 1))
	}
	if r.ttft != nil {
		d, p, rp := r.ttft[b.direct.name], r.ttft[b.pass.name], r.ttft[b.rep.name]
		od := b.ttftOverhead(b.direct)
		if od == nil {
			od = []float64{math.NaN(), math.NaN()}
		}
		fmt.Fprintf(w, "| time to first content event p50 (ms; %d samples/target%s) | %s | %s | %s | +%s (+%s vs direct) | ≤ +0.2 | %s |\n",
			rp.samples, failed(d.errs+p.errs+rp.errs), f(median(d.p50), 3), f(median(p.p50), 3), f(median(rp.p50), 3), f(s.ttft50, 3), f(od[0], 3), verdict(s.ttft50, 0.2, true))
		fmt.Fprintf(w, "| time to first content event p99 (ms) | %s | %s | %s | +%s (+%s vs direct) | ≤ +3 | %s |\n",
			f(median(d.p99), 3), f(median(p.p99), 3), f(median(rp.p99), 3), f(s.ttft99, 3), f(od[1], 3), verdict(s.ttft99, 3, true))
	}
	if r.resumeLive != nil {
		l, c, o := r.resumeLive, r.resumeDone, r.resumeOther
		fmt.Fprintf(w, "| resume, live key on the owning instance, p50 (ms; %d samples%s) | | | %s | | | |\n", l.samples, failed(l.errs), f(median(l.p50), 3))
		fmt.Fprintf(w, "| resume, live key on the owning instance, p99 (ms) — the summary's resume_p99 | | | %s | | ≤ 2 | %s |\n", f(median(l.p99), 3), verdict(s.resume99, 2, true))
		fmt.Fprintf(w, "| resume, completed key on the instance that ran it (kept in memory), p50 (ms; %d samples%s) | | | %s | | | |\n", c.samples, failed(c.errs), f(median(c.p50), 3))
		fmt.Fprintf(w, "| resume, completed key on the instance that ran it (kept in memory), p99 (ms) | | | %s | | ≤ 2 | %s |\n", f(median(c.p99), 3), verdict(median(c.p99), 2, true))
		fmt.Fprintf(w, "| resume, completed key on another instance (JetStream), p50 (ms; %d samples%s) | | | %s | | | |\n", o.samples, failed(o.errs), f(median(o.p50), 3))
		fmt.Fprintf(w, "| resume, completed key on another instance (JetStream), p99 (ms) | | | %s | | ≤ 2 | %s |\n", f(median(o.p99), 3), verdict(median(o.p99), 2, true))
	}
	if len(r.replay) > 0 {
		fmt.Fprintf(w, "| replay of a completed %d-event stream, one GET from the start (events/s) | | | %s | | ≥ 1M | %s |\n",
			o.replayEvents, kev(s.replay), verdict(s.replay, 1_000_000, false))
	}
	if len(r.replayPost) > 0 {
		fmt.Fprintf(w, "| replay of a completed %d-event stream by the same POST again (events/s) | | | %s | | ≥ 1M | %s |\n",
			o.replayEvents, kev(s.replayPost), verdict(s.replayPost, 1_000_000, false))
	}
	for _, m := range r.mem {
		reached := ""
		if m.reached < m.n {
			reached = fmt.Sprintf(" — only %d reached", m.reached)
		}
		fmt.Fprintf(w, "| RSS per idle %s client, %d clients on %d slow live streams (KB; median of %d)%s | | | %s (heap %s, stacks %s, %.2f goroutines/client) | | ≤ 8 | %s |\n",
			transportName(m.transport), m.n, o.memStreams, len(m.rounds), reached, f(m.perClientKB, 1), f(m.heapKB, 1), f(m.stackKB, 1), m.goroutines, verdict(m.perClientKB, 8, true))
	}
	for _, m := range o.mixStreams {
		p, rp := r.mix[m][b.pass.name], r.mix[m][b.rep.name]
		if p == nil || rp == nil {
			continue
		}
		title := fmt.Sprintf("mix: %d streams × %d events/s for %s", m, o.mixRate, o.mixDuration)
		add50, add99, cpu := mixAdded(p, rp)
		t50, t99, tcpu, met50, met99, metCPU := "", "", "", "", "", ""
		if m == o.mixStreams[0] {
			t50, t99, tcpu = "≤ +0.2", "≤ +2", "≤ ×1.3"
			met50, met99, metCPU = verdict(add50, 0.2, true), verdict(add99, 2, true), verdict(cpu, 1.3, true)
		}
		fmt.Fprintf(w, "| %s: per-event delay upstream→client p50 (ms) — the summary's mix_added_p50_ms for the first | | %s | %s | +%s | %s | %s |\n",
			title, f(p.delay.quantile(50), 3), f(rp.delay.quantile(50), 3), f(add50, 3), t50, met50)
		fmt.Fprintf(w, "| %s: per-event delay p99 (ms) — added latency | | %s | %s | **+%s** | %s | %s |\n",
			title, f(p.delay.quantile(99), 3), f(rp.delay.quantile(99), 3), f(add99, 3), t99, met99)
		fmt.Fprintf(w, "| %s: per-event delay p99.9 / max (ms) | | %s / %s | %s / %s | | | |\n", title,
			f(p.delay.quantile(99.9), 1), f(ms(p.delay.max), 1), f(rp.delay.quantile(99.9), 1), f(ms(rp.delay.max), 1))
		fmt.Fprintf(w, "| %s: per-event delay p99 from each stream's event %d on (ms) | | %s | %s | +%s | | |\n", title, mixSteadyAfter+1,
			f(p.steady.quantile(99), 3), f(rp.steady.quantile(99), 3), f(rp.steady.quantile(99)-p.steady.quantile(99), 3))
		fmt.Fprintf(w, "| %s: process CPU per event (µs; cores busy on average) | | %s (%.2f) | %s (%.2f) | ×%s | %s | %s |\n", title,
			f(perEvent(p), 1), p.cpu.Seconds()/p.wall.Seconds(), f(perEvent(rp), 1), rp.cpu.Seconds()/rp.wall.Seconds(), f(cpu, 2), tcpu, metCPU)
		fmt.Fprintf(w, "| %s: GC cycles (GC CPU s) | | %d (%.1f) | %d (%.1f) | | | |\n", title, p.gcCycles, p.gcCPU.Seconds(), rp.gcCycles, rp.gcCPU.Seconds())
		fmt.Fprintf(w, "| %s: events received (failed streams; shed with 429) | | %d (%d; %d) | %d (%d; %d) | | | |\n", title, p.events, p.errs, p.shed, rp.events, rp.errs, rp.shed)
		if rp.events > 0 {
			fmt.Fprintf(w, "| %s: journal messages per event received (--journal-linger %s, --journal-linger-alone %s) | | | %s | | | |\n", title, o.linger, o.lingerAlone, f(float64(rp.journalMsgs)/float64(rp.events), 2))
		}
	}
	if r.fair != nil {
		r.fair.report(w, o)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Load average (1, 5, 15 min) before → after each phase:")
	for _, p := range phases {
		if l, ok := r.phaseLoad[p]; ok {
			fmt.Fprintf(w, "- %s: %s\n", p, l)
		}
	}
	if len(r.mem) > 0 {
		fmt.Fprintln(w, "\nMemory: RSS of this process (reprise's side of the connections; the clients run in a child process) after GC and FreeOSMemory, before and after attaching:")
		for _, m := range r.mem {
			var rs []string
			for _, v := range m.rounds {
				rs = append(rs, f(v, 1))
			}
			fmt.Fprintf(w, "- %d %s clients: reached %d on %d connections (reprise counted %d readers); VmRSS %d → %d kB in the median round; KB per client in each round: %s; the client process used %.1f KB per client\n",
				m.n, transportName(m.transport), m.reached, m.conns, m.serverReaders, m.rssBeforeKB, m.rssAfterKB, strings.Join(rs, ", "), m.childKB)
		}
	}
	if r.replayGen > 0 {
		fmt.Fprintf(w, "\nThe %d-event stream for the replay was generated live through reprise in %.2f s (%s events/s, one client).\n",
			o.replayEvents, r.replayGen.Seconds(), kev(float64(o.replayEvents)/r.replayGen.Seconds()))
	}
	if r.consumersDeleted > 0 {
		fmt.Fprintf(w, "\nJournal readers left %d ordered consumers behind on the stream (a closed reader's consumer expires 5 s after it closed, and nats-server allows 1,000 per stream; samples come faster than that); the benchmark deleted them between samples, untimed.\n", r.consumersDeleted)
	}
	if len(r.notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range r.notes {
			fmt.Fprintln(w, "- "+strings.ReplaceAll(n, "\n", " "))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "bench: throughput_ratio=%s ttft_overhead_p50_ms=%s ttft_overhead_p99_ms=%s resume_p99_ms=%s replay_events_per_s=%s replay_post_events_per_s=%s rss_per_client_kb=%s mix_added_p50_ms=%s mix_added_p99_ms=%s mix_cpu_ratio=%s fair_beside_p99_ms=%s fair_attached_p99_ms=%s fair_unfair_p99_ratio=%s %s\n",
		f(s.ratio, 2), f(s.ttft50, 3), f(s.ttft99, 3), f(s.resume99, 3), f(s.replay, 0), f(s.replayPost, 0), f(s.rss, 1), f(s.mix50, 3), f(s.mix99, 3), f(s.mixCPU, 2), f(s.fair99, 1), f(s.fairSteady99, 1), f(s.fairRatio, 1), o.natsSummary())
}

// journalSetup says what reprise journals on, for the report's header.
func (b *bench) journalSetup() string {
	o := b.o
	storage, conn := "file storage", "in-process connection"
	if o.memStorage {
		storage = "MEMORY storage (experiment)"
	}
	if o.natsTCP {
		conn = "loopback TCP connection (experiment)"
	}
	if o.natsURLs != "" {
		return fmt.Sprintf("external NATS at %s, journal replicas R%d, %s, TCP connections", o.natsMode(), o.replicas, storage)
	}
	return fmt.Sprintf("embedded JetStream, journal replicas R%d, %s, %s", o.replicas, storage, conn)
}

// natsSummary is the summary line's tail: where reprise journalled.
func (o options) natsSummary() string {
	mode := "embedded"
	if o.natsURLs != "" {
		mode = "external"
	}
	return fmt.Sprintf("nats=%s journal_replicas=%d", mode, o.replicas)
}

// transportName is how the report names a memory phase's transport.
func transportName(t string) string {
	switch t {
	case "websocket":
		return "WebSocket"
	case "h2":
		return "SSE over HTTP/2 (TLS)"
	}
	return "SSE (HTTP/1)"
}

func failed(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d failed", n)
}
