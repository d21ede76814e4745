package resume_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// The journal's share of a resume and of a new stream's first event,
// without HTTP. ns/op is per resume or per step.
//
//	go test ./resume -run '^$' -bench . -benchmem

// benchFrame is a chat chunk as the fake upstream writes it (~190 bytes).
var benchFrame = []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":" lorem"},"finish_reason":null}]}` + "\n\n")

func benchJournal(tb testing.TB) *journal.Journal {
	tb.Helper()
	return journaltest.New(tb, journal.Config{}) // file storage, as cmd/reprise runs it
}

func benchCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	tb.Cleanup(cancel)
	return ctx
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
	// Keys and generations are new in every run of a sub-benchmark
	// (-count > 1 runs each again on the same journal).
	i := 0
	b.Run("begin", func(b *testing.B) {
		b.ReportAllocs()
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

// BenchmarkSweep10k is what finding the keys in progress costs with 10,000
// records in the bucket (9,000 finished, 1,000 in progress), file storage
// as cmd/reprise runs it: "watch-load" is a Sweeper learning every record
// from its watch (once, at start; afterwards it hears only the writes),
// "scan" the alternative it replaces, listing the keys and reading each
// record, which a periodic scan would pay on every sweep. ns/op is one
// load or one scan.
func BenchmarkSweep10k(b *testing.B) {
	const total, running = 10_000, 1_000
	nc := journaltest.Connect(b, journaltest.Server(b, ""))
	j := journaltest.Open(b, nc, journal.Config{})
	ctx := benchCtx(b)
	now := time.Now()
	usage := cost.Usage{PromptTokens: 120, CompletionTokens: 800, TotalTokens: 920}
	for i := range total {
		key := "sweep-" + strconv.Itoa(i)
		rec := resume.Record{Key: key, State: resume.Completed, Fingerprint: strconv.Itoa(i), BytesFingerprint: strconv.Itoa(i), Generation: 1,
			Attempt: "0123456789abcdef", Path: "/v1/chat/completions", Stream: true, Events: 300, Status: 200, ContentType: "text/event-stream",
			Usage: &usage, Billed: &cost.Billed{Usage: usage, Generations: 1}, Tenant: "0123456789abcdef", Model: "gpt-4o-mini",
			CreatedAt: now, UpdatedAt: now}
		if i >= total-running { // the last ones: a load is over once they are learnt
			rec.State, rec.Owner, rec.LeaseUntil, rec.Usage, rec.Billed = resume.InProgress, "bench-owner", now.Add(time.Hour), nil, nil
		}
		val, err := json.Marshal(rec)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := j.Create(ctx, resume.StreamID("t", key), val); err != nil {
			b.Fatal(err)
		}
	}
	m, err := resume.New(resume.Config{Store: j, Owner: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("watch-load", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := m.Sweep(ctx, resume.SweepConfig{Records: j})
			if err != nil {
				b.Fatal(err)
			}
			for s.Held() < running {
				time.Sleep(time.Millisecond) // polling what is being measured; bounded by benchCtx
				if ctx.Err() != nil {
					b.Fatal("the sweeper never learnt the records")
				}
			}
			s.Stop()
		}
	})
	b.Run("scan", func(b *testing.B) {
		js, err := jetstream.New(nc)
		if err != nil {
			b.Fatal(err)
		}
		kv, err := js.KeyValue(ctx, journal.DefaultBucket)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			keys, err := kv.ListKeys(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for key := range keys.Keys() {
				e, err := kv.Get(ctx, key)
				if err != nil {
					b.Fatal(err)
				}
				var rec resume.Record
				if json.Unmarshal(e.Value(), &rec) == nil && rec.State == resume.InProgress {
					n++
				}
			}
			if n != running {
				b.Fatalf("scan found %d in progress, want %d", n, running)
			}
		}
	})
}
