// Command reprise-bench measures what reprise's journal costs against a plain
// pass-through proxy, in one process and in the same run: the fake upstream
// (zero delay), an httputil.ReverseProxy in front of it, and reprise on an
// embedded JetStream with file storage, all on loopback, driven by the same
// net/http load client with targets interleaved within each run. With
// --nats, reprise journals on an external NATS cluster instead (with
// --journal-replicas, replicated): deploy/bench-cluster.sh starts a 3-node
// one on loopback and runs the benchmark on it with R3.
//
//	go run ./cmd/reprise-bench            # the full run (a few minutes)
//	go run ./cmd/reprise-bench --short    # under a minute
//	deploy/bench-cluster.sh --short       # on a local 3-node cluster, R3
//
// It prints a markdown table and, last, one summary line:
//
//	bench: throughput_ratio=… ttft_overhead_p50_ms=… ttft_overhead_p99_ms=… resume_p99_ms=… replay_events_per_s=… replay_post_events_per_s=… rss_per_client_kb=… … fair_beside_p99_ms=… fair_attached_p99_ms=… fair_unfair_p99_ratio=…
//
// See BENCHMARKS.md for the method, the targets and the results.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
)

var phases = []string{"memory", "throughput", "ttft", "resume", "replay", "fair", "mix"}

type options struct {
	short         bool
	runs          int
	concurrency   []int
	tpStreams     int
	tpTokens      int
	ttftSamples   int
	resumeSamples int
	resumeEvents  int
	resumePause   time.Duration
	replayEvents  int
	fairBulk      int
	fairKeys      int
	fairEvents    int
	fairSmall     int
	fairSamples   int
	memClients    []int
	memTransports []string
	memStreams    int
	memRuns       int
	mixStreams    []int
	mixRate       int
	mixDuration   time.Duration
	mixRuns       int
	only          map[string]bool
	profileDir    string
	timeout       time.Duration
	seed          uint64
	verbose       bool
	logLevel      string
	natsTCP       bool
	natsURLs      string // --nats: an external NATS (comma-separated URLs); "": the embedded server
	replicas      int    // --journal-replicas: journal.Config.Replicas
	memStorage    bool
	linger        time.Duration
	lingerAlone   time.Duration
	resultsCache  int64
	out           io.Writer // the report (nil: standard output)

	// memory child mode (internal)
	memChild          bool
	memChildURLs      string
	memChildN         int
	memChildTransport string
	ttftKeyless       bool   // the TTFT phase sends reprise no key
	memChildCA        string // base64 DER of the certificate the h2 clients trust
	// fair child mode (internal)
	fairChild     bool
	fairChildURLs string
}

func parseOptions(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("reprise-bench", flag.ContinueOnError)
	fs.BoolVar(&o.short, "short", false, "a quick run (under a minute): fewer runs and samples, 1k idle clients only, a ~5 s mix with fewer streams")
	runs := fs.Int("runs", 0, "measurement runs; medians are reported (default 5, short 3)")
	conc := fs.String("concurrency", "1,10,100", "throughput: concurrent streams per cell")
	tpStreams := fs.Int("tp-streams", 0, "throughput: streams per cell, at least the concurrency (default 100, short 20)")
	fs.IntVar(&o.tpTokens, "tp-tokens", 1000, "throughput: content tokens per stream (events = tokens + 3)")
	ttft := fs.Int("ttft-samples", 0, "time to first content event: samples per target per run (default 1000, short 200)")
	fs.BoolVar(&o.ttftKeyless, "ttft-keyless", false, "time to first content event: reprise's requests carry no Idempotency-Key (a client that sends none: agent CLIs, scripts)")
	resumeN := fs.Int("resume-samples", 0, "resume: samples per case per run (default 300, short 50)")
	fs.IntVar(&o.resumeEvents, "resume-events", 2000, "resume: events stored before the drop point is drawn")
	fs.DurationVar(&o.resumePause, "resume-pause", 0, "resume: pause between the drop (once reprise let the reader go) and the reconnect")
	fs.IntVar(&o.replayEvents, "replay-events", 100_000, "replay: events of the completed stream")
	fairBulk := fs.Int("fair-bulk", 0, "fair: one tenant's long replays at once, beside another tenant's small one (default 2000, short 500)")
	fs.IntVar(&o.fairKeys, "fair-keys", 20, "fair: completed keys the long replays read (in turn)")
	fs.IntVar(&o.fairEvents, "fair-events", 2000, "fair: events of each long replay's key")
	fs.IntVar(&o.fairSmall, "fair-small", 50, "fair: events of the small replay's key")
	fairSamples := fs.Int("fair-samples", 0, "fair: small replays timed alone, and at most beside the long ones, per instance and run (default 50, short 20)")
	mem := fs.String("mem-clients", "", "memory: idle client counts (default 1000,10000; short 1000)")
	memTransports := fs.String("mem-transports", "sse,websocket,h2", "memory: how the idle clients read: sse (HTTP/1), websocket, h2 (SSE over HTTP/2 on TLS, many readers per connection) (comma-separated, each measured apart)")
	fs.IntVar(&o.memStreams, "mem-streams", 4, "memory: slow live streams the idle clients attach to")
	memRuns := fs.Int("mem-runs", 0, "memory: rounds per client count; the median is reported (default 3, short 1)")
	mixStreams := fs.String("mix-streams", "", "mix: concurrent stream counts, one mix each (default 200,1000,2000; short 200); the summary's mix figures are the first's")
	fs.IntVar(&o.mixRate, "mix-rate", 50, "mix: events per second per stream")
	mixDur := fs.Duration("mix-duration", 0, "mix: length of each stream (default 30s, short 5s)")
	fs.IntVar(&o.mixRuns, "mix-runs", 1, "mix: runs per target")
	only := fs.String("only", "", "comma-separated phases to run: "+strings.Join(phases, ","))
	fs.StringVar(&o.profileDir, "profile-dir", "", "write CPU profiles of the first run of each phase (per target where it matters), and snapshots of the allocations at its start and end (NAME-allocs-start, -end), into this `DIR`")
	fs.DurationVar(&o.timeout, "timeout", 0, "abort the whole benchmark after this long (default 20m, short 3m)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed (drop points)")
	fs.BoolVar(&o.verbose, "v", false, "progress on stderr (and reprise's log from warnings up)")
	fs.StringVar(&o.logLevel, "log-level", "", "reprise's log level on stderr: debug, info, warn, error (default error; warn with -v)")
	fs.BoolVar(&o.memStorage, "journal-memory", false, "experiment: JetStream memory storage instead of file storage")
	fs.DurationVar(&o.linger, "journal-linger", journal.DefaultLinger, "experiment: reprise's --journal-linger (0: none)")
	fs.DurationVar(&o.lingerAlone, "journal-linger-alone", journal.DefaultLingerAlone, "experiment: reprise's --journal-linger-alone (0: as --journal-linger)")
	fs.Int64Var(&o.resultsCache, "results-cache", engine.DefaultResultsCache, "experiment: reprise's --results-cache, in bytes (0: none)")
	fs.BoolVar(&o.natsTCP, "nats-tcp", false, "experiment: connect reprise to the embedded JetStream over loopback TCP instead of in-process, as cmd/reprise does")
	fs.StringVar(&o.natsURLs, "nats", "", "journal on the external NATS with JetStream at `URL[,URL...]` (every node of a cluster) instead of the embedded server; give it a cluster of its own: the benchmark deletes the journal stream's consumers between samples")
	fs.IntVar(&o.replicas, "journal-replicas", journal.DefaultReplicas, "JetStream replicas of the journal's stream and bucket, 1 to 5 (above 1 needs --nats)")
	fs.BoolVar(&o.memChild, "mem-child", false, "internal: run as the memory phase's client process")
	fs.StringVar(&o.memChildURLs, "mem-child-urls", "", "internal")
	fs.IntVar(&o.memChildN, "mem-child-n", 0, "internal")
	fs.StringVar(&o.memChildTransport, "mem-child-transport", "sse", "internal")
	fs.StringVar(&o.memChildCA, "mem-child-ca", "", "internal")
	fs.BoolVar(&o.fairChild, "fair-child", false, "internal: run as the fair phase's bulk client process")
	fs.StringVar(&o.fairChildURLs, "fair-child-urls", "", "internal")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	pick := func(v *int, flagV, full, short int) {
		switch {
		case flagV > 0:
			*v = flagV
		case o.short:
			*v = short
		default:
			*v = full
		}
	}
	pick(&o.runs, *runs, 5, 3)
	pick(&o.tpStreams, *tpStreams, 100, 20)
	pick(&o.ttftSamples, *ttft, 1000, 200)
	pick(&o.resumeSamples, *resumeN, 300, 50)
	pick(&o.memRuns, *memRuns, 3, 1)
	pick(&o.fairBulk, *fairBulk, 2000, 500)
	pick(&o.fairSamples, *fairSamples, 50, 20)
	o.mixDuration = *mixDur
	if o.mixDuration <= 0 {
		o.mixDuration = 30 * time.Second
		if o.short {
			o.mixDuration = 5 * time.Second
		}
	}
	if o.timeout <= 0 {
		o.timeout = 20 * time.Minute
		if o.short {
			o.timeout = 3 * time.Minute
		}
	}
	var err error
	if o.concurrency, err = ints(*conc); err != nil {
		return o, fmt.Errorf("--concurrency: %w", err)
	}
	if *mem == "" {
		*mem = "1000,10000"
		if o.short {
			*mem = "1000"
		}
	}
	if o.memClients, err = ints(*mem); err != nil {
		return o, fmt.Errorf("--mem-clients: %w", err)
	}
	for t := range strings.SplitSeq(*memTransports, ",") {
		switch t = strings.TrimSpace(t); t {
		case "sse", "websocket", "h2":
			o.memTransports = append(o.memTransports, t)
		case "":
		default:
			return o, fmt.Errorf("--mem-transports: unknown transport %q (sse, websocket, h2)", t)
		}
	}
	if *mixStreams == "" {
		*mixStreams = "200,1000,2000"
		if o.short {
			*mixStreams = "200"
		}
	}
	if o.mixStreams, err = ints(*mixStreams); err != nil {
		return o, fmt.Errorf("--mix-streams: %w", err)
	}
	o.only = map[string]bool{}
	for p := range strings.SplitSeq(*only, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		known := false
		for _, q := range phases {
			known = known || p == q
		}
		if !known {
			return o, fmt.Errorf("--only: unknown phase %q", p)
		}
		o.only[p] = true
	}
	switch {
	case o.resumeEvents < 10:
		return o, errors.New("--resume-events must be at least 10")
	case o.replayEvents < 5 || o.replayEvents > 100_004:
		return o, errors.New("--replay-events must be in 5..100004 (the fake upstream's token limit)")
	case o.tpTokens < 1 || o.mixRate < 1 || o.memStreams < 1 || o.mixRuns < 1 || o.fairKeys < 1:
		return o, errors.New("--tp-tokens, --mix-rate, --mem-streams, --mix-runs and --fair-keys must be positive")
	case o.fairEvents < 5 || o.fairEvents > 100_004 || o.fairSmall < 5 || o.fairSmall > 100_004:
		return o, errors.New("--fair-events and --fair-small must be in 5..100004 (the fake upstream's token limit)")
	}
	return o, o.checkNATS()
}

// checkNATS checks --nats, --journal-replicas and --nats-tcp together: the
// embedded server is one node, so it holds one replica only, and it is
// the one --nats-tcp reaches.
func (o options) checkNATS() error {
	switch {
	case o.replicas < 1 || o.replicas > 5:
		return fmt.Errorf("--journal-replicas %d: must be 1 to 5", o.replicas)
	case o.replicas > 1 && o.natsURLs == "":
		return fmt.Errorf("--journal-replicas %d needs --nats: the embedded server is a single node", o.replicas)
	case o.natsURLs != "" && o.natsTCP:
		return errors.New("--nats-tcp is an experiment on the embedded server; --nats connects over TCP already")
	}
	if o.natsURLs == "" {
		return nil
	}
	for raw := range strings.SplitSeq(o.natsURLs, ",") {
		u, err := url.Parse(strings.TrimSpace(raw))
		if err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("--nats: %q is not a URL like nats://host:4222", raw)
		}
	}
	return nil
}

// natsMode says where reprise journals, for the report: "embedded", or
// the external URLs (passwords hidden).
func (o options) natsMode() string {
	if o.natsURLs == "" {
		return "embedded"
	}
	var us []string
	for raw := range strings.SplitSeq(o.natsURLs, ",") {
		u, _ := url.Parse(strings.TrimSpace(raw)) // checked by checkNATS
		us = append(us, u.Redacted())
	}
	return strings.Join(us, ",")
}

func ints(s string) ([]int, error) {
	var out []int
	for p := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", p)
		}
		out = append(out, n)
	}
	return out, nil
}

func (o options) want(phase string) bool { return len(o.only) == 0 || o.only[phase] }

func main() {
	o, err := parseOptions(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reprise-bench:", err)
		os.Exit(2)
	}
	if o.memChild || o.fairChild {
		child := memChild
		if o.fairChild {
			child = fairChild
		}
		if err := child(o); err != nil {
			fmt.Fprintln(os.Stderr, "reprise-bench (client process):", err)
			os.Exit(1)
		}
		return
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "reprise-bench:", err)
		os.Exit(1)
	}
}

// bench is one benchmark session.
type bench struct {
	o      options
	ctx    context.Context
	st     *stack
	c      *loadClient
	rng    *rand.Rand
	prog   io.Writer
	nonce  string
	res    results
	prof   *profiler
	direct target
	pass   target
	rep    target

	readerBase int // reprise's readers before a resume run
}

// defaultMemProfileRate is the heap sampling rate outside the memory phase.
var defaultMemProfileRate = runtime.MemProfileRate

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	if o.profileDir != "" && o.want("memory") {
		// Finer heap profiles for the memory phase; it costs every other
		// phase's CPU profile ~10% in sampling.
		runtime.MemProfileRate = 4096
	}
	nofile := raiseNoFile()
	level := slog.LevelError
	prog := io.Discard
	if o.verbose {
		level, prog = slog.LevelWarn, os.Stderr
	}
	if o.logLevel != "" {
		if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
			return fmt.Errorf("--log-level: %w", err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	st, err := startStack(stackConfig{upstreamConcurrency: max(4096, 2*slices.Max(o.mixStreams)), maxReaders: 1 << 20, natsTCP: o.natsTCP, natsURLs: o.natsURLs, replicas: o.replicas, memoryStorage: o.memStorage, linger: o.linger, lingerAlone: o.lingerAlone, resultsCache: o.resultsCache, unfair: o.want("fair")}, log)
	if err != nil {
		return err
	}
	defer st.close()
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	b := &bench{
		o: o, ctx: ctx, st: st, c: newLoadClient(), rng: rand.New(rand.NewPCG(o.seed, 7)), prog: prog,
		nonce:  strconv.FormatInt(time.Now().UnixNano(), 36),
		prof:   &profiler{dir: o.profileDir},
		direct: target{name: "direct", base: st.UpURL},
		pass:   target{name: "pass-through", base: st.PassURL},
		rep:    target{name: "reprise", base: st.RepURL, keyed: true},
	}
	b.res.started = time.Now()
	if st.journalBefore > 0 {
		b.res.notes = append(b.res.notes, fmt.Sprintf("the journal's stream held %d messages before this run: not a fresh NATS", st.journalBefore))
	}
	b.res.loadStart = loadAvg()
	b.res.nofile = nofile
	b.res.phaseLoad = map[string]string{}
	defer b.c.closeIdle()

	steps := []struct {
		name string
		f    func() error
	}{
		// Memory first, on a fresh heap: a heap full of freed spans from
		// earlier phases absorbs the clients' allocations without RSS.
		{"memory", b.memory}, {"throughput", b.throughput}, {"ttft", b.ttft},
		{"resume", b.resume}, {"replay", b.replay}, {"fair", b.fair}, {"mix", b.mix},
	}
	var failed []string
	for _, s := range steps {
		if !o.want(s.name) {
			continue
		}
		if err := ctx.Err(); err != nil {
			b.res.notes = append(b.res.notes, fmt.Sprintf("%s: not run (%v)", s.name, err))
			continue
		}
		before := loadAvg()
		t0 := time.Now()
		b.progress("== %s (load %s)", s.name, before)
		st.llm.Ledger().Reset()
		err := s.f()
		b.res.phaseLoad[s.name] = fmt.Sprintf("%s → %s, %.0fs", before, loadAvg(), time.Since(t0).Seconds())
		if err != nil {
			b.res.notes = append(b.res.notes, fmt.Sprintf("%s: %v", s.name, err))
			b.progress("%s: %v", s.name, err)
			failed = append(failed, s.name)
		}
	}
	b.res.loadEnd = loadAvg()
	b.res.elapsed = time.Since(b.res.started)
	out := o.out
	if out == nil {
		out = os.Stdout
	}
	b.report(out)
	if len(failed) > 0 { // a phase that measured nothing is no benchmark
		return fmt.Errorf("phases failed: %s (see the notes)", strings.Join(failed, ", "))
	}
	return nil
}

func (b *bench) progress(format string, a ...any) {
	fmt.Fprintf(b.prog, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

// profiler writes CPU and allocation profiles of selected sections when
// --profile-dir is set.
type profiler struct {
	dir  string
	f    *os.File
	name string
}

func (p *profiler) start(name string) {
	if p.dir == "" || p.f != nil {
		return
	}
	f, err := os.Create(filepath.Join(p.dir, name+".pprof"))
	if err != nil {
		return
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return
	}
	p.f, p.name = f, name
	p.allocs(name + "-allocs-start")
}

// allocs writes the allocations made so far (sampled); the difference of
// a phase's start and end snapshots is what it allocated:
// go tool pprof -sample_index=alloc_space -diff_base X-allocs-start.pprof X-allocs-end.pprof
func (p *profiler) allocs(name string) {
	f, err := os.Create(filepath.Join(p.dir, name+".pprof"))
	if err != nil {
		return
	}
	defer f.Close()
	runtime.GC() // the profile is as of the last GC
	_ = pprof.Lookup("allocs").WriteTo(f, 0)
}

func (p *profiler) stop() {
	if p.f == nil {
		return
	}
	pprof.StopCPUProfile()
	p.f.Close()
	p.f = nil
	p.allocs(p.name + "-allocs-end")
}
