package journal

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRetryFirstTry is the cost retry adds to an operation that
// succeeds at once (nearly all of them: every publish, every record get).
func BenchmarkRetryFirstTry(b *testing.B) {
	var n atomic.Uint64
	t := tries{budget: time.Second, each: time.Second, count: &n}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_ = retry(ctx, t, func(error) bool { return true }, func(context.Context) error { return nil })
	}
}
