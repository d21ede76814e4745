package tests

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// countEvents posts a streamed chat and counts events to the end.
func countEvents(tb testing.TB, base, key, body string) int {
	tb.Helper()
	resp := do(tb, "POST", base+chatPath, body, "Idempotency-Key", key)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data:") {
			n++
		}
	}
	return n
}

// BenchmarkThroughput streams 1000-event generations through reprise and,
// in the same run, through a plain pass-through proxy; it reports both
// rates and their ratio.
func BenchmarkThroughput(b *testing.B) {
	e := newEnv(b, withTokenDelay(0))
	up, _ := url.Parse(e.llmSrv.URL)
	rp := httputil.NewSingleHostReverseProxy(up)
	rp.FlushInterval = -1
	pass := httptest.NewServer(rp)
	defer pass.Close()
	const tokens = 1000
	var reprise, direct time.Duration
	var events int
	b.ResetTimer()
	for i := range b.N {
		body := chatBody("bench "+strconv.Itoa(i)+" "+b.Name()+" [tokens=1000]", true)
		t0 := time.Now()
		events += countEvents(b, pass.URL, "", body)
		t1 := time.Now()
		countEvents(b, e.URL, "bench-"+strconv.Itoa(i)+"-"+strconv.FormatInt(t0.UnixNano(), 36), body)
		t2 := time.Now()
		direct += t1.Sub(t0)
		reprise += t2.Sub(t1)
	}
	perStream := float64(events) / float64(b.N)
	b.ReportMetric(perStream*float64(b.N)/reprise.Seconds(), "reprise_events/s")
	b.ReportMetric(perStream*float64(b.N)/direct.Seconds(), "passthrough_events/s")
	b.ReportMetric(direct.Seconds()/reprise.Seconds(), "ratio")
	_ = tokens
}

// BenchmarkResume measures the time from a reconnect with Last-Event-ID to
// the first missed event: for a completed key (read back from JetStream) and
// for a live generation on the owning instance (its in-memory tail).
func BenchmarkResume(b *testing.B) {
	e := newEnv(b, withTokenDelay(0), withAbandon())
	b.Run("completed", func(b *testing.B) {
		body := chatBody("resume bench [tokens=200]", true)
		evs := readEvents(b, do(b, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-bench-resume"), -1)
		waitState(b, e, "k-bench-resume", "completed")
		benchResume(b, e.URL+"/v1/streams/k-bench-resume", func(i int) string { return evs[(i*7)%(len(evs)-2)].ID })
	})
	b.Run("live", func(b *testing.B) {
		body := chatBody("resume bench live [tokens=1000] [hang_after=50]", true)
		resp := do(b, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-bench-live")
		first := readEvents(b, resp, 3)
		benchResume(b, e.URL+"/v1/streams/k-bench-live", func(int) string { return lastID(first) })
	})
}

func benchResume(b *testing.B, url string, cursor func(i int) string) {
	b.Helper()
	lat := make([]time.Duration, 0, b.N)
	client := &http.Client{}
	b.ResetTimer()
	for i := range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Header.Set("Last-Event-ID", cursor(i))
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		r := bufio.NewReader(resp.Body)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				b.Fatal(err)
			}
			if strings.HasPrefix(line, "data:") {
				break
			}
		}
		lat = append(lat, time.Since(t0))
		cancel()
		resp.Body.Close()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}
