package stream

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// The hot path of a live generation, piece by piece and whole: the upstream
// event parse (readUpstream), the journal append (journal.Writer on an
// embedded JetStream with file storage, as cmd/reprise runs it), the tail,
// and the client write (sseWriter). ns/op and allocs/op are per event unless
// a benchmark says otherwise. cmd/reprise-bench measures the same over HTTP.
//
//	go test ./stream -run '^$' -bench . -benchmem

// benchFrame is a chat chunk as the fake upstream writes it (~190 bytes).
var benchFrame = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":" lorem"},"finish_reason":null}]}` + "\n\n")

// frames is an upstream body of n chunks and [DONE], generated as it is read.
type frames struct {
	left int
	cur  []byte
	done bool
}

func (f *frames) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(f.cur) == 0 {
			switch {
			case f.left > 0:
				f.left--
				f.cur = benchFrame
			case !f.done:
				f.done = true
				f.cur = []byte("data: [DONE]\n\n")
			default:
				if n == 0 {
					return 0, io.EOF
				}
				return n, nil
			}
		}
		c := copy(p[n:], f.cur)
		f.cur = f.cur[c:]
		n += c
	}
	return n, nil
}

var benchLimits = upstreamLimits{maxEvent: DefaultMaxEventSize, maxEvents: 1 << 30, maxBytes: 1 << 40}

// discardWriter is a client connection that takes everything at once.
type discardWriter struct {
	h       http.Header
	n       int64
	flushes int
}

func (w *discardWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}
func (w *discardWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      { w.flushes++ }

func newBenchSSE(b *testing.B) (*sseWriter, *discardWriter) {
	b.Helper()
	dw := &discardWriter{}
	r, _ := http.NewRequest(http.MethodGet, "/v1/streams/k", nil)
	sw, err := newSSEWriter(dw, r, time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	return sw, dw
}

func benchJournal(b testing.TB) *journal.Journal {
	b.Helper()
	emb, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(emb.Shutdown)
	nc, err := emb.Connect("bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := journal.Open(ctx, nc, journal.Config{}) // file storage
	if err != nil {
		b.Fatal(err)
	}
	return j
}

func benchCtx(b testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

func eventsPerSecond(b *testing.B, n int, elapsed time.Duration) {
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
}

// BenchmarkReadUpstream parses an upstream SSE body: go-sse's parser, the
// UTF-8 check, the limits and the terminal check, per event.
func BenchmarkReadUpstream(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchFrame)))
	n, err := readUpstream(&frames{left: b.N}, benchLimits, func(string, []byte) error { return nil })
	if err != nil || n != b.N+1 {
		b.Fatalf("read %d events: %v", n, err)
	}
}

// BenchmarkSSEWrite writes journaled events to a client through go-sse:
// flushing after every event (a live reader woken per event) and every 64
// (a backlog replay).
func BenchmarkSSEWrite(b *testing.B) {
	ev := journal.Event{Offset: 1, Seq: 1, Data: benchFrame[len("data: ") : len(benchFrame)-2]}
	ref := journal.Ref{ID: "0123456789abcdef0123456789abcdef", Gen: 1}
	for _, every := range []int{1, flushEvery} {
		b.Run("flush-every-"+strconv.Itoa(every), func(b *testing.B) {
			sw, _ := newBenchSSE(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				ev.Offset, ev.Seq = uint64(i), uint64(i)
				if err := sw.send(eventID(ref, ev), ev); err != nil {
					b.Fatal(err)
				}
				if i%every == 0 {
					if err := sw.flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkHotPath runs one generation of b.N events: readUpstream → the
// journal Writer's Append (pipelined publishes to JetStream, file storage)
// → the ack sink → the tail; with "+client", a follower on the tail writes
// every event through the SSE writer as followTail does. Timing ends when
// every event is acknowledged (and, with a client, written).
func BenchmarkHotPath(b *testing.B) {
	for _, client := range []bool{false, true} {
		name := "parse+append+tail"
		if client {
			name += "+client"
		}
		b.Run(name, func(b *testing.B) {
			j := benchJournal(b)
			ctx := benchCtx(b)
			t := newTail()
			w := j.NewWriter(journal.Ref{ID: "bench", Gen: 1}, t.append)
			followed := make(chan int, 1)
			if client {
				sw, _ := newBenchSSE(b)
				ref := journal.Ref{ID: "bench", Gen: 1}
				go func() {
					var after uint64
					n := 0
					for {
						evs, changed := t.since(after)
						for _, ev := range evs {
							if ev.IsEnd() {
								followed <- n
								return
							}
							if err := sw.send(eventID(ref, ev), ev); err != nil {
								followed <- -1
								return
							}
							after = ev.Offset
							n++
						}
						if len(evs) > 0 {
							_ = sw.flush()
						}
						select {
						case <-changed:
						case <-ctx.Done():
							followed <- -1
							return
						}
					}
				}()
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(benchFrame)))
			start := time.Now()
			n, err := readUpstream(&frames{left: b.N}, benchLimits, func(typ string, data []byte) error {
				return w.Append(ctx, typ, data)
			})
			if err != nil {
				b.Fatal(err)
			}
			if err := w.End(ctx, journal.EndCompleted); err != nil {
				b.Fatal(err)
			}
			if client {
				if got := <-followed; got != n {
					b.Fatalf("client got %d events, want %d", got, n)
				}
			}
			eventsPerSecond(b, n, time.Since(start))
		})
	}
}

// BenchmarkResumeLookup is the server side of a resume of a completed key,
// without HTTP: the record (resume.Manager.Get, a KV get) and the journal
// read to the first missed event (a direct get by the id's sequence hint,
// or from the generation's start without it). ns/op is per resume.
func BenchmarkResumeLookup(b *testing.B) {
	const n = 2000
	j := benchJournal(b)
	ctx := benchCtx(b)
	m, err := resume.New(resume.Config{Store: j, Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	id := resume.StreamID("tenant", "key")
	out, err := m.Begin(ctx, resume.Request{ID: id, Key: "key", Path: "/v1/chat/completions", Fingerprint: "f", Stream: true})
	if err != nil {
		b.Fatal(err)
	}
	ref := journal.Ref{ID: id, Gen: out.Record.Generation}
	var evs []journal.Event
	w := j.NewWriter(ref, func(ev journal.Event) { evs = append(evs, ev) })
	for range n {
		if err := w.Append(ctx, "", benchFrame); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		b.Fatal(err)
	}
	if err := out.Lease.Finish(ctx, resume.Result{State: resume.Completed, Events: n, Status: 200, ContentType: "text/event-stream"}); err != nil {
		b.Fatal(err)
	}
	b.Run("record", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.Get(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, hinted := range []bool{true, false} {
		name := "record+read-unhinted"
		if hinted {
			name = "record+read-hinted"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := 1 + (i*7919)%(n-1) // resume after event k
				i++
				rec, err := m.Get(ctx, id)
				if err != nil {
					b.Fatal(err)
				}
				var hint uint64
				if hinted {
					hint = evs[k-1].Seq
				}
				rd, err := j.Read(ctx, journal.Ref{ID: id, Gen: rec.Generation}, uint64(k), hint)
				if err != nil {
					b.Fatal(err)
				}
				ev, err := rd.Next(ctx)
				rd.Close()
				if err != nil || ev.Offset != uint64(k+1) {
					b.Fatalf("resumed at %d, want %d: %v", ev.Offset, k+1, err)
				}
			}
		})
	}
}

// BenchmarkReplay serves a completed 20,000-event generation from the
// journal to a client that takes everything (followJournal into the SSE
// writer), without HTTP. ns/op is per replay; events/s is reported.
func BenchmarkReplay(b *testing.B) {
	const n = 20_000
	j := benchJournal(b)
	ctx := benchCtx(b)
	m, err := resume.New(resume.Config{Store: j, Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	up, _ := url.Parse("http://127.0.0.1:1")
	s, err := New(Config{Journal: j, Resume: m, Upstream: up, Secret: []byte("bench-secret-0123456789")})
	if err != nil {
		b.Fatal(err)
	}
	ref := journal.Ref{ID: "replay", Gen: 1}
	w := j.NewWriter(ref, func(journal.Event) {})
	for range n {
		if err := w.Append(ctx, "", benchFrame); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var total time.Duration
	for b.Loop() {
		sw, dw := newBenchSSE(b)
		start := time.Now()
		if err := s.followJournal(ctx, sw, ref, 0, 0); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		if dw.n < int64(n*len(benchFrame)) {
			b.Fatalf("wrote %d bytes for %d events", dw.n, n)
		}
	}
	eventsPerSecond(b, n*b.N, total)
}

// BenchmarkStartLatency is the journal's share of a new stream's time to
// first content event, step by step, each timed alone: the record decision
// for a new key (resume.Manager.Begin: a KV get that misses and a KV
// create), the fenced first append (a synchronous publish), and a second,
// pipelined append until its acknowledgement reaches the sink (the first
// content event of a chat stream is the second event). ns/op is one step.
func BenchmarkStartLatency(b *testing.B) {
	j := benchJournal(b)
	ctx := benchCtx(b)
	m, err := resume.New(resume.Config{Store: j, Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("begin", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			key := "begin-" + strconv.Itoa(i)
			out, err := m.Begin(ctx, resume.Request{ID: resume.StreamID("t", key), Key: key, Path: "/v1/chat/completions", Fingerprint: "f", Stream: true})
			if err != nil || out.Decision != resume.Start {
				b.Fatalf("begin: %v %v", out.Decision, err)
			}
			b.StopTimer() // no heartbeats pile up behind the measured calls
			_ = out.Lease.Finish(ctx, resume.Result{State: resume.Failed})
			b.StartTimer()
		}
	})
	b.Run("first-append", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			w := j.NewWriter(journal.Ref{ID: "first-" + strconv.Itoa(i), Gen: 1}, func(journal.Event) {})
			if err := w.Append(ctx, "", benchFrame); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			w.Abort()
			b.StartTimer()
		}
	})
	b.Run("second-append-acked", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			b.StopTimer()
			i++
			acked := make(chan struct{}, 2)
			w := j.NewWriter(journal.Ref{ID: "second-" + strconv.Itoa(i), Gen: 1}, func(ev journal.Event) {
				if ev.Offset == 2 {
					acked <- struct{}{}
				}
			})
			if err := w.Append(ctx, "", benchFrame); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			if err := w.Append(ctx, "", benchFrame); err != nil {
				b.Fatal(err)
			}
			<-acked
			b.StopTimer()
			w.Abort()
			b.StartTimer()
		}
	})
}
