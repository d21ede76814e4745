package resume

import (
	"strconv"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
)

// BenchmarkSweepSeen is the sweeper's share of one record write it hears
// (every instance hears every write: starts, renewals, results): a
// renewal of a record in progress, decoded, and a finished record, only
// searched. ns/op is one write.
func BenchmarkSweepSeen(b *testing.B) {
	now := time.Now()
	usage := cost.Usage{PromptTokens: 120, CompletionTokens: 800, TotalTokens: 920}
	rec := Record{Key: "key", State: InProgress, Fingerprint: "f", BytesFingerprint: "f", Generation: 1, Owner: "host-1-abcd",
		Attempt: "0123456789abcdef", LeaseUntil: now.Add(10 * time.Second), Path: "/v1/chat/completions", Stream: true, Events: 120,
		Tenant: "0123456789abcdef", Model: "gpt-4o-mini", CreatedAt: now, UpdatedAt: now}
	running := rec.encode()
	rec.State, rec.Owner, rec.LeaseUntil, rec.Usage, rec.Billed = Completed, "", time.Time{}, &usage, &cost.Billed{Usage: usage, Generations: 1}
	finished := rec.encode()
	m := &Manager{cfg: Config{Lease: DefaultLease, Now: time.Now}}
	for _, tc := range []struct {
		name  string
		value []byte
	}{{"renewal", running}, {"finished", finished}} {
		b.Run(tc.name, func(b *testing.B) {
			s := &Sweeper{m: m, held: map[string]held{}}
			b.ReportAllocs()
			rev := uint64(0)
			for b.Loop() {
				rev++
				s.seen("0123456789abcdef0123456789abcdef", tc.value, rev)
			}
		})
	}
}

// BenchmarkSweepDue is one sweep's search for leases run out among 10,000
// records in progress, none run out. ns/op is one search.
func BenchmarkSweepDue(b *testing.B) {
	now := time.Now()
	s := &Sweeper{m: &Manager{cfg: Config{Lease: DefaultLease}}, held: map[string]held{}}
	for i := range 10_000 {
		s.held[strconv.Itoa(i)] = held{rev: uint64(i), until: now.Add(time.Minute), since: now}
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(s.due(now)) != 0 {
			b.Fatal("none is due")
		}
	}
}
