package main

import (
	"bufio"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// percentile returns the p-th percentile (0 < p ≤ 100) of xs by the
// nearest-rank method; NaN for no samples. xs is sorted in place.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	slices.Sort(xs)
	rank := int(math.Ceil(p / 100 * float64(len(xs))))
	return xs[min(max(rank, 1), len(xs))-1]
}

// median of xs (NaN for none); xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// hist is a latency histogram: 1 µs buckets below 10 ms, 100 µs buckets
// below 10 s, 10 ms buckets below 300 s, one overflow bucket. Enough for
// millions of samples without keeping them.
type hist struct {
	b   []uint64
	n   uint64
	max time.Duration
}

var histTiers = []struct{ below, width int64 }{ // µs
	{10_000, 1},
	{10_000_000, 100},
	{300_000_000, 10_000},
}

func histBuckets() int {
	n, lo := 0, int64(0)
	for _, t := range histTiers {
		n += int((t.below - lo) / t.width)
		lo = t.below
	}
	return n + 1
}

func newHist() *hist { return &hist{b: make([]uint64, histBuckets())} }

func (h *hist) add(d time.Duration) {
	us := max(int64(d/time.Microsecond), 0)
	i, lo := 0, int64(0)
	for _, t := range histTiers {
		if us < t.below {
			i += int((us - lo) / t.width)
			break
		}
		i += int((t.below - lo) / t.width)
		lo = t.below
	}
	h.b[min(i, len(h.b)-1)]++
	h.n++
	h.max = max(h.max, d)
}

func (h *hist) merge(o *hist) {
	for i, v := range o.b {
		h.b[i] += v
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

// upper is the upper bound in µs of bucket i (-1 for the overflow bucket).
func upper(i int) int64 {
	lo := int64(0)
	for _, t := range histTiers {
		n := int((t.below - lo) / t.width)
		if i < n {
			return lo + int64(i+1)*t.width
		}
		i -= n
		lo = t.below
	}
	return -1
}

// quantile returns the p-th percentile in milliseconds (the bucket's upper
// bound, at most the maximum seen).
func (h *hist) quantile(p float64) float64 {
	if h.n == 0 {
		return math.NaN()
	}
	rank := max(uint64(math.Ceil(p/100*float64(h.n))), 1)
	var seen uint64
	for i, v := range h.b {
		seen += v
		if seen >= rank {
			us := upper(i)
			if us < 0 {
				return ms(h.max)
			}
			return min(float64(us)/1000, ms(h.max))
		}
	}
	return ms(h.max)
}

// statusKB reads a kB field (VmRSS, …) of /proc/<pid>/status; pid "self" is this process.
func statusKB(pid, field string) int64 {
	f, err := os.Open("/proc/" + pid + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

func rssKB() int64 { return statusKB("self", "VmRSS") }

// cpuTime is this process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// raiseNoFile raises the soft RLIMIT_NOFILE to the hard limit and returns it.
func raiseNoFile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return rl.Cur
}

// gcStats is the number of GC cycles and the CPU time the GC used so far.
func gcStats() (cycles uint64, cpu time.Duration) {
	ss := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(ss)
	if ss[0].Value.Kind() == metrics.KindUint64 {
		cycles = ss[0].Value.Uint64()
	}
	if ss[1].Value.Kind() == metrics.KindFloat64 {
		cpu = time.Duration(ss[1].Value.Float64() * float64(time.Second))
	}
	return cycles, cpu
}
