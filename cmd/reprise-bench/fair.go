package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ---- fair replays ----

// fairCell is one instance's figures in a run of the fair phase: the small
// replay's latencies (ms) alone and beside the bulk, and the bulk's own.
type fairCell struct {
	alone, beside []float64
	// steady are the samples of beside that began once every bulk
	// replay was attached: none of A's requests was still arriving (their
	// handlers, record reads and first gets take no turns).
	steady     []float64
	bulkWall   time.Duration // from starting the bulk client process to its end
	bulkEvents int64
	bulkErrs   int
	// afterBulk counts the small replays beside the bulk that ended after
	// more than half of the bulk replays had ended: finished with the bulk
	// rather than beside it.
	afterBulk int
}

// fairResult holds the fair phase's figures per instance ("fair": turns
// by tenant, reprise's default; "unfair": without), read from memory (the
// instance ran the keys) and from JetStream (another instance did).
type fairResult struct {
	cells map[string][]*fairCell // by fairCellName
}

// fairCellName names an instance and the path its replays read.
func fairCellName(instance, path string) string { return instance + "/" + path }

// fair measures what one tenant's many long replays do to another tenant's
// small replay on the same instance: tenant A replays fairBulk completed
// keys of fairEvents events at once, and meanwhile tenant B replays its
// fairSmall-event key again and again, one at a time; the small replay's
// latency (request to its [DONE]) beside them is compared with the same
// replay alone, on an instance that gives replays their turns by tenant
// and on one that does not (Settings.ReplayTurns < 0), in the same run.
// Each instance replays keys it ran itself (kept in memory) and keys the
// other ran (read from JetStream).
func (b *bench) fair() error {
	o := b.o
	insts := []target{{name: "fair", base: b.st.RepURL, keyed: true}, {name: "unfair", base: b.st.UnfairURL, keyed: true}}
	bulk := map[string][]string{} // locations of the bulk keys, by the instance that ran them
	small := map[string]string{}
	for _, t := range insts {
		for k := range o.fairKeys {
			key := fmt.Sprintf("fair-bulk-%s-%d-%s", t.name, k, b.nonce)
			loc, err := b.completedKeyOn(t, "bench-fair-bulk", key, fmt.Sprintf("fair bulk %s %d %s [tokens=%d]", t.name, k, b.nonce, o.fairEvents-chatExtra), o.fairEvents)
			if err != nil {
				return fmt.Errorf("bulk key: %w", err)
			}
			bulk[t.name] = append(bulk[t.name], loc)
		}
		key := fmt.Sprintf("fair-small-%s-%s", t.name, b.nonce)
		loc, err := b.completedKeyOn(t, "bench-fair-small", key, fmt.Sprintf("fair small %s %s [tokens=%d]", t.name, b.nonce, o.fairSmall-chatExtra), o.fairSmall)
		if err != nil {
			return fmt.Errorf("small key: %w", err)
		}
		small[t.name] = loc
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	b.res.fair = &fairResult{cells: map[string][]*fairCell{}}
	for r := range o.runs {
		for i := range insts {
			t := insts[(i+r)%len(insts)]
			other := insts[(i+r+1)%len(insts)]
			for _, path := range []string{"memory", "journal"} {
				owner := t
				if path == "journal" {
					owner = other
				}
				at := func(loc string) string { return strings.Replace(loc, owner.base, t.base, 1) }
				var locs []string
				for _, l := range bulk[owner.name] {
					locs = append(locs, at(l))
				}
				name := fairCellName(t.name, path)
				if r == 0 {
					b.prof.start("fair-" + strings.ReplaceAll(name, "/", "-"))
				}
				c, err := b.fairRun(exe, locs, at(small[owner.name]))
				b.prof.stop()
				if err != nil {
					return err
				}
				b.res.fair.cells[name] = append(b.res.fair.cells[name], c)
				b.progress("fair run %d %s: small replay alone p50 %.3f p99 %.3f ms; beside %d bulk replays p50 %.3f p99 %.3f ms (%d samples, %d after half the bulk ended); bulk %.0f events/s, %d failed (load %s)",
					r+1, name, percentile(c.alone, 50), percentile(c.alone, 99), o.fairBulk, percentile(c.beside, 50), percentile(c.beside, 99),
					len(c.beside), c.afterBulk, float64(c.bulkEvents)/c.bulkWall.Seconds(), c.bulkErrs, loadAvg())
			}
		}
	}
	return nil
}

// fairRun times the small replay at smallLoc alone, then beside fairBulk
// replays of the keys at bulkLocs (in turn) all started at once by a
// client process of their own (this binary with --fair-child: their 2,000
// reading goroutines do not queue with reprise's in this process's
// scheduler, as a real deployment's clients do not): again and again, one
// at a time, from when reprise has taken half the bulk replays as readers
// until half of them have ended (at least once).
func (b *bench) fairRun(exe string, bulkLocs []string, smallLoc string) (*fairCell, error) {
	o := b.o
	c := &fairCell{}
	for range o.fairSamples {
		d, err := b.fairSmallOnce(smallLoc)
		if err != nil {
			return nil, fmt.Errorf("small replay alone: %w", err)
		}
		c.alone = append(c.alone, ms(d))
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "--fair-child", "--fair-child-urls", strings.Join(bulkLocs, ","),
		"--fair-bulk", strconv.Itoa(o.fairBulk), "--fair-events", strconv.Itoa(o.fairEvents))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// The child says "running" once half the replays have their answer's
	// headers (reprise took them as readers), "attached" once all have,
	// "half" once half of them ended, and "done <events> <failed> [first
	// error]" at the end.
	running, attached, half := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var done string
	read := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			switch l := sc.Text(); {
			case l == "running":
				close(running)
			case l == "attached":
				close(attached)
			case l == "half":
				close(half)
			case strings.HasPrefix(l, "done "):
				done = l
			}
		}
		read <- cmd.Wait()
	}()
	select {
	case <-running:
	case err := <-read:
		return nil, fmt.Errorf("bulk client process ended before its replays ran: %w", err)
	}
	for len(c.beside) < o.fairSamples {
		steady := false
		select {
		case <-attached:
			steady = true
		default:
		}
		d, err := b.fairSmallOnce(smallLoc)
		if err != nil {
			cancel()
			return nil, errors.Join(fmt.Errorf("small replay beside the bulk: %w", err), <-read)
		}
		c.beside = append(c.beside, ms(d))
		if steady {
			c.steady = append(c.steady, ms(d))
		}
		select {
		case <-half:
			c.afterBulk++
		default:
			continue
		}
		break
	}
	if err := <-read; err != nil {
		return nil, fmt.Errorf("bulk client process: %w", err)
	}
	c.bulkWall = time.Since(t0)
	if _, err := fmt.Sscanf(done, "done %d %d", &c.bulkEvents, &c.bulkErrs); err != nil {
		return nil, fmt.Errorf("bulk client process said %q", done)
	}
	if f := strings.SplitN(done, " ", 4); c.bulkErrs > 0 && len(f) == 4 {
		b.res.notes = append(b.res.notes, fmt.Sprintf("fair: %d bulk replays failed, first: %s", c.bulkErrs, f[3]))
	}
	b.steadyReaders()
	b.cleanConsumers()
	return c, nil
}

// fairSmallOnce replays the small key whole and returns how long it took.
func (b *bench) fairSmallOnce(loc string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
	defer cancel()
	t0 := time.Now()
	resp, err := b.c.get(ctx, loc, reqOpts{})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, done, err := readEvents(resp.Body, nil)
	d := time.Since(t0)
	if err != nil || n != b.o.fairSmall || !done {
		return 0, fmt.Errorf("%d events (done %v), want %d: %w", n, done, b.o.fairSmall, err)
	}
	return d, nil
}

// fairChild is the fair phase's bulk client process: it replays the keys
// at --fair-child-urls (in turn) --fair-bulk times at once, each to its
// end, and prints "running" once half of them have their answer's
// headers, "attached" once all have, "half" once half of them ended, and
// "done <events> <failed> [first error]".
func fairChild(o options) error {
	raiseNoFile()
	urls := strings.Split(o.fairChildURLs, ",")
	if len(urls) == 0 || urls[0] == "" {
		return errors.New("--fair-child needs --fair-child-urls")
	}
	c := newLoadClient()
	ctx := context.Background()
	var started, ended, events, failed atomic.Int64
	var firstErr atomic.Pointer[error]
	var say sync.Mutex
	tell := func(l string) {
		say.Lock()
		defer say.Unlock()
		fmt.Println(l)
	}
	halfway := int64(o.fairBulk+1) / 2
	var wg sync.WaitGroup
	for i := range o.fairBulk {
		wg.Go(func() {
			var once sync.Once
			attached := func() {
				once.Do(func() {
					switch started.Add(1) {
					case halfway:
						tell("running")
					case int64(o.fairBulk):
						tell("attached")
					}
				})
			}
			n, err := fairBulkOnce(ctx, c, urls[i%len(urls)], o.fairEvents, attached)
			attached()
			events.Add(int64(n))
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			}
			if ended.Add(1) == halfway {
				tell("half")
			}
		})
	}
	wg.Wait()
	msg := ""
	if e := firstErr.Load(); e != nil {
		msg = " " + strings.ReplaceAll((*e).Error(), "\n", " ")
	}
	tell(fmt.Sprintf("done %d %d%s", events.Load(), failed.Load(), msg))
	return nil
}

// fairBulkOnce replays a bulk key whole, calling attached once it has
// the answer's headers (reprise has taken it as a reader), and returns
// how many events it read.
func fairBulkOnce(ctx context.Context, c *loadClient, loc string, want int, attached func()) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	resp, err := c.get(ctx, loc, reqOpts{})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	attached()
	n, done, err := readEvents(resp.Body, nil)
	if err != nil || n != want || !done {
		return n, fmt.Errorf("%d events (done %v), want %d: %w", n, done, want, err)
	}
	return n, nil
}

// fairTarget is the small replay's p99 beside the bulk, in ms, that reprise
// is to keep on a quiet box.
const fairTarget = 50

// fairPaths are the fair phase's read paths, in the report's order.
var fairPaths = []string{"memory", "journal"}

// fairFigures is one cell's figures over its runs: the medians of each
// run's percentiles, and the totals.
type fairFigures struct {
	alone50, alone99, beside50, beside99 float64
	steady50, steady99                   float64 // of fairCell.steady
	samples, steadies, afterBulk, errs   int
	rate                                 float64 // the bulk's events/s
}

func (r *fairResult) figures(name string) (fairFigures, bool) {
	cells := r.cells[name]
	if len(cells) == 0 {
		return fairFigures{}, false
	}
	var f fairFigures
	var a50, a99, b50, b99, s50, s99, rates []float64
	for _, c := range cells {
		a50, a99 = append(a50, percentile(c.alone, 50)), append(a99, percentile(c.alone, 99))
		b50, b99 = append(b50, percentile(c.beside, 50)), append(b99, percentile(c.beside, 99))
		if len(c.steady) > 0 {
			s50, s99 = append(s50, percentile(c.steady, 50)), append(s99, percentile(c.steady, 99))
		}
		f.steadies += len(c.steady)
		rates = append(rates, float64(c.bulkEvents)/c.bulkWall.Seconds())
		f.samples += len(c.beside)
		f.afterBulk += c.afterBulk
		f.errs += c.bulkErrs
	}
	f.alone50, f.alone99, f.beside50, f.beside99, f.rate = median(a50), median(a99), median(b50), median(b99), median(rates)
	f.steady50, f.steady99 = median(s50), median(s99)
	return f, true
}

// summary is the summary line's figures: the worse path's p99 beside the
// bulk with turns, of all samples and of those once all of it was
// attached, and, read from JetStream, the ratio of the first without
// turns to with. (Read from memory, the bulk without turns is often over
// before B's first replay: its ratio says little.)
func (r *fairResult) summary() (p99, steady99, ratio float64) {
	p99, steady99, ratio = math.NaN(), math.NaN(), math.NaN()
	for _, path := range fairPaths {
		fair, ok1 := r.figures(fairCellName("fair", path))
		unfair, ok2 := r.figures(fairCellName("unfair", path))
		if !ok1 || !ok2 {
			continue
		}
		if math.IsNaN(p99) || fair.beside99 > p99 {
			p99 = fair.beside99
		}
		if math.IsNaN(steady99) || fair.steady99 > steady99 {
			steady99 = fair.steady99
		}
		if path == "journal" {
			ratio = unfair.beside99 / fair.beside99
		}
	}
	return p99, steady99, ratio
}

// report writes the fair phase's table.
func (r *fairResult) report(w io.Writer, o options) {
	fmt.Fprintf(w, "\nFair replays: tenant B replays a %d-event key again and again beside tenant A's %d replays of %d-event keys (%d keys; A's clients in a process of their own), on an instance whose replays take turns by tenant (reprise's default) and on one without (--replay-turns -1), in the same run; %d runs, medians of per-run values:\n\n",
		o.fairSmall, o.fairBulk, o.fairEvents, o.fairKeys, o.runs)
	fmt.Fprintln(w, "| keys read from | replays | B alone p50 / p99 (ms) | B beside A p50 / p99 (ms) | samples beside A (ended after half of A) | of which once all of A was attached: p50 / p99 (ms; samples) | A's events/s | target (p99 once all of A was attached) | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, path := range fairPaths {
		from := "memory (the instance ran them)"
		if path == "journal" {
			from = "JetStream (another instance ran them)"
		}
		for _, inst := range []string{"fair", "unfair"} {
			x, ok := r.figures(fairCellName(inst, path))
			if !ok {
				continue
			}
			how, target, met := "in turns by tenant", fmt.Sprintf("≤ %d", fairTarget), verdict(x.steady99, fairTarget, true)
			if inst == "unfair" {
				how, target, met = "without turns", "", ""
			}
			errs := ""
			if x.errs > 0 {
				errs = fmt.Sprintf(" (%d failed)", x.errs)
			}
			fmt.Fprintf(w, "| %s | %s | %s / %s | %s / %s | %d (%d) | %s / %s (%d) | %s%s | %s | %s |\n", from, how,
				f(x.alone50, 3), f(x.alone99, 3), f(x.beside50, 1), f(x.beside99, 1), x.samples, x.afterBulk,
				f(x.steady50, 1), f(x.steady99, 1), x.steadies, kev(x.rate), errs, target, met)
		}
	}
	fmt.Fprintln(w, "\nA sample that ended after half of A's replays had (in parentheses) ends the samples of its run: B waited for the bulk. Samples taken while A's requests still arrived meet their handlers, record reads and first gets, which take no turns.")
	if p99, steady99, ratio := r.summary(); !math.IsNaN(ratio) {
		fmt.Fprintf(w, "B's p99 beside A, read from JetStream, without turns ÷ with: ×%s; with turns, at worst %s ms (%s ms once all of A was attached).\n", f(ratio, 1), f(p99, 1), f(steady99, 1))
	}
}
