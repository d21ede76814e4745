package classify

import (
	"sync"
	"time"
)

// budget caps retries at a share of calls over a sliding window, with a
// floor: a burst of failures cannot multiply the upstream's load.
//
// failsafe-go's budget bounds retries in flight relative to calls in
// flight; failures that come back at once are never "in flight" together,
// and a burst of 40 instant 503s still made 78–110 upstream requests with
// it (tests/retry_test.go). This one counts over time, as the retry budget
// of the seeds (and of gRPC and Finagle) does.
type budget struct {
	ratio  float64
	floor  int
	bucket time.Duration
	now    func() time.Time

	mu      sync.Mutex
	buckets [budgetBuckets]struct {
		start          time.Time
		calls, retries int
	}
}

// budgetBuckets × the bucket length is the window (10 × 1 s).
const budgetBuckets = 10

func newBudget(ratio float64, floor int, window time.Duration, now func() time.Time) *budget {
	return &budget{ratio: ratio, floor: floor, bucket: window / budgetBuckets, now: now}
}

// current returns the bucket for now, clearing it when it is stale.
func (b *budget) current() int {
	now := b.now()
	start := now.Truncate(b.bucket)
	i := int(start.UnixNano()/int64(b.bucket)) % budgetBuckets
	if i < 0 {
		i += budgetBuckets
	}
	if !b.buckets[i].start.Equal(start) {
		b.buckets[i].start, b.buckets[i].calls, b.buckets[i].retries = start, 0, 0
	}
	return i
}

// call counts a new call.
func (b *budget) call() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buckets[b.current()].calls++
}

// retry takes a retry from the budget; false when it is spent.
func (b *budget) retry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i, retries, allowed := b.window()
	if retries >= allowed {
		return false
	}
	b.buckets[i].retries++
	return true
}

// use is the share of the window's retries already taken (1: spent).
func (b *budget) use() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, retries, allowed := b.window()
	if allowed <= 0 {
		return 1
	}
	return min(1, float64(retries)/float64(allowed))
}

// window returns the current bucket, the retries taken over the window
// and how many it allows. b.mu is held.
func (b *budget) window() (i, retries, allowed int) {
	i = b.current()
	horizon := b.buckets[i].start.Add(-b.bucket * (budgetBuckets - 1))
	calls := 0
	for _, bk := range b.buckets {
		if !bk.start.Before(horizon) {
			calls, retries = calls+bk.calls, retries+bk.retries
		}
	}
	return i, retries, max(b.floor, int(b.ratio*float64(calls)))
}
