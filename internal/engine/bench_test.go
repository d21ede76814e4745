package engine

import (
	"io"
	"strconv"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
)

// The engine's share of a live generation's hot path, piece by piece and
// whole: the upstream event parse with the format's inspection
// (readUpstream), the journal append (journal.Writer on an embedded
// JetStream with file storage, as cmd/reprise runs it) and the tail. ns/op
// and allocs/op are per event. cmd/reprise-bench measures the same over
// HTTP against a pass-through proxy.
//
//	go test ./internal/engine -run '^$' -bench . -benchmem

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

// BenchmarkReadUpstream parses an upstream SSE body: go-sse's parser, the
// UTF-8 check, the limits and the chat format's inspection, per event.
func BenchmarkReadUpstream(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchFrame)))
	n, _, err := readUpstream(&frames{left: b.N}, Chat{}, benchLimits, func(string, []byte, Inspection, *cost.Usage) error { return nil })
	if err != nil || n != b.N+1 {
		b.Fatalf("read %d events: %v", n, err)
	}
}

// BenchmarkHotPath runs one generation of b.N events: readUpstream → the
// journal Writer's Append (pipelined publishes to JetStream, file storage)
// → the ack sink → the tail; with "+client", a follower on the tail writes
// every event as an SSE message, as the HTTP surface's followTail does
// (its own writer: stream's BenchmarkSSEWrite). Timing ends when
// every event is acknowledged (and, with a client, written).
func BenchmarkHotPath(b *testing.B) {
	for _, client := range []bool{false, true} {
		name := "parse+append+tail"
		if client {
			name += "+client"
		}
		b.Run(name, func(b *testing.B) {
			j := testJournal(b)
			ctx := testCtx(b)
			t := newTail()
			w := j.NewWriter(journal.Ref{ID: "bench", Gen: 1}, t.store)
			followed := make(chan int, 1)
			if client {
				ref := journal.Ref{ID: "bench", Gen: 1}
				go func() {
					var after uint64
					n := 0
					for {
						evs, changed := t.Since(after)
						for _, ev := range evs {
							if ev.IsEnd() {
								followed <- n
								return
							}
							if err := benchSend(ref, ev); err != nil {
								followed <- -1
								return
							}
							after = ev.Offset
							n++
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
			n, _, err := readUpstream(&frames{left: b.N}, Chat{}, benchLimits, func(typ string, data []byte, _ Inspection, _ *cost.Usage) error {
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

// benchSend writes ev as an SSE message with its id, as a reader does.
func benchSend(ref journal.Ref, ev journal.Event) error {
	m := &sse.Message{ID: sse.ID(strconv.FormatUint(ref.Gen, 10) + "-" + strconv.FormatUint(ev.Offset, 10) + "-" + strconv.FormatUint(ev.Seq, 10))}
	m.AppendData(string(ev.Data))
	_, err := m.WriteTo(io.Discard)
	return err
}

func eventsPerSecond(b *testing.B, n int, elapsed time.Duration) {
	b.Helper()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
}
