package stream

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// The HTTP surface's share of the hot path: the client write (sseWriter)
// and a replay from the journal, without HTTP. The engine's share:
// internal/engine's benchmarks; the journal's share of a resume: resume's.
// cmd/reprise-bench measures the whole over HTTP.
//
//	go test ./stream -run '^$' -bench . -benchmem

// benchFrame is a chat chunk as the fake upstream writes it (~190 bytes).
var benchFrame = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":" lorem"},"finish_reason":null}]}` + "\n\n")

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
	sw, err := newSSEWriter(dw, r, time.Minute, 0)
	if err != nil {
		b.Fatal(err)
	}
	return sw, dw
}

func benchCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// BenchmarkSSEWrite writes journaled events to a client through go-sse:
// flushing after every event (a live reader woken per event) and every 64.
func BenchmarkSSEWrite(b *testing.B) {
	ev := journal.Event{Offset: 1, Seq: 1, Data: benchFrame[len("data: ") : len(benchFrame)-2]}
	ref := journal.Ref{ID: "0123456789abcdef0123456789abcdef", Gen: 1}
	for _, every := range []int{1, 64} {
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

// BenchmarkReplay serves a completed 20,000-event generation from the
// journal to a client that takes everything (followJournal into the SSE
// writer), without HTTP, each time twice: taking a turn per batch (as
// reprise runs) and without. Alone, a replay's turns must cost it no more
// than an uncontended check: turns/no-turns, the rate with turns over the
// rate without, stays near 1. ns/op is per pair of replays.
func BenchmarkReplay(b *testing.B) {
	const n = 20_000
	j := journaltest.New(b, journal.Config{}) // file storage, as cmd/reprise runs it
	ctx := benchCtx(b)
	s, _ := benchServer(b, j)
	ref := journal.Ref{ID: "replay", Gen: 1}
	w := j.NewWriter(ref, func(journal.Event) {})
	data := benchFrame[len("data: ") : len(benchFrame)-2] // what the engine journals of a chunk
	for range n {
		if err := w.Append(ctx, "", data); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.End(ctx, journal.EndCompleted); err != nil {
		b.Fatal(err)
	}
	// Each iteration replays both ways, in alternating order: a busy box's
	// drift falls on both alike.
	b.ReportAllocs()
	var took [2]time.Duration // no turns, turns
	scheduler := s.turns
	i := 0
	for b.Loop() {
		for k := range 2 {
			turns := (i+k)%2 == 1
			sw, dw := newBenchSSE(b)
			s.turns = nil
			if turns {
				s.turns = scheduler
			}
			start := time.Now()
			if err := s.followJournal(ctx, sw, "bench", ref, apierr.OpenAI, 0, 0, ""); err != nil {
				b.Fatal(err)
			}
			if turns {
				took[1] += time.Since(start)
			} else {
				took[0] += time.Since(start)
			}
			if dw.n < int64(n*len(benchFrame)) {
				b.Fatalf("wrote %d bytes for %d events", dw.n, n)
			}
		}
		i++
	}
	b.ReportMetric(float64(n*b.N)/took[0].Seconds(), "events/s-no-turns")
	b.ReportMetric(float64(n*b.N)/took[1].Seconds(), "events/s-turns")
	b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "turns/no-turns")
}

// BenchmarkPOST serves chat completion POSTs through the whole handler
// (ServeHTTP: begin, the decision, the answer), on a journal of its own and
// an upstream that answers at once with one JSON body: a new generation
// under a fresh key, keyless (the keyless index asked) and keyed, and a
// keyed duplicate of a completed one (a replay).
func BenchmarkPOST(b *testing.B) {
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"lorem"},"finish_reason":"stop"}]}`)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	b.Cleanup(upstream.Close)
	up, _ := url.Parse(upstream.URL)
	j := journaltest.New(b, journal.Config{})
	s, _ := benchServerTo(b, j, up)
	body := `{"model":"bench","messages":[{"role":"user","content":"hello"}]}`
	post := func(b *testing.B, key string) {
		b.Helper()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	b.Run("start-keyless", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			post(b, "")
		}
	})
	b.Run("start-keyed", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			post(b, "bench-start-"+strconv.Itoa(i))
		}
	})
	b.Run("replay-keyed", func(b *testing.B) {
		post(b, "bench-replay")
		b.ReportAllocs()
		for b.Loop() {
			post(b, "bench-replay")
		}
	})
}

// benchServer is a Server on j whose upstream is never called.
func benchServer(tb testing.TB, j *journal.Journal) (*Server, *resume.Manager) {
	tb.Helper()
	up, _ := url.Parse("http://127.0.0.1:1")
	return benchServerTo(tb, j, up)
}

// benchServerTo is a Server on j whose upstream is up.
func benchServerTo(tb testing.TB, j *journal.Journal, up *url.URL) (*Server, *resume.Manager) {
	tb.Helper()
	m, err := resume.New(resume.Config{Store: j, Owner: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	client := engine.DefaultClient(time.Second, time.Second)
	policy, err := classify.New(classify.Config{}, client)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := auth.New(auth.Config{Secret: []byte("bench-secret-0123456789")})
	if err != nil {
		tb.Fatal(err)
	}
	// The logs are written, as reprise runs, to nowhere.
	log := slog.New(slog.DiscardHandler)
	e, err := engine.New(engine.Config{Journal: j, Upstream: engine.Upstream{URL: up, Policy: policy, Decorator: a}, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	s, err := New(Config{Journal: j, Resume: m, Engine: e, Auth: a, Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	return s, m
}
