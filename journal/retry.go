package journal

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
)

// tries bounds how an operation is tried again through a NATS failover.
type tries struct {
	budget time.Duration  // all attempts and waits
	each   time.Duration  // one attempt
	count  *atomic.Uint64 // attempts made again
}

// pause is the wait before the retry that follows n others: 50 ms,
// doubling up to 1 s.
func pause(n int) time.Duration {
	return min(50*time.Millisecond<<min(n, 5), time.Second)
}

// retry runs op, each attempt bounded by t.each and the budget, again
// (after pause) while retryable says so, until ctx ends or the next pause
// does not fit the budget. It returns op's last error.
func retry(ctx context.Context, t tries, retryable func(error) bool, op func(context.Context) error) error {
	deadline := time.Now().Add(t.budget)
	// Nearly every operation succeeds at once (a publish, a record get):
	// the first attempt is made before any policy is built, which costs
	// ~30 allocations a call; the policy then replays its outcome as its
	// own first attempt, so the schedule is the same.
	err := tryOnce(ctx, min(t.each, time.Until(deadline)), op)
	if err == nil || ctx.Err() != nil || !retryable(err) {
		return err
	}
	return retryFailed(ctx, t, deadline, retryable, op, err)
}

// retryFailed goes on with an operation whose first attempt failed with
// first, under a retry policy of its own.
func retryFailed(ctx context.Context, t tries, deadline time.Time, retryable func(error) bool, op func(context.Context) error, first error) error {
	// The policy is this call's alone: retries is the retries it scheduled,
	// which the abort predicate (shown no execution) needs to know the next
	// pause.
	retries := 0
	rp := retrypolicy.NewBuilder[any]().
		HandleIf(func(_ any, err error) bool { return err != nil && retryable(err) }).
		AbortIf(func(any, error) bool { return !time.Now().Add(pause(retries)).Before(deadline) }).
		WithMaxAttempts(-1).
		WithDelayFunc(func(failsafe.ExecutionAttempt[any]) time.Duration { return pause(retries) }).
		OnRetryScheduled(func(failsafe.ExecutionScheduledEvent[any]) {
			retries++
			t.count.Add(1)
		}).
		Build()
	// failsafe answers ctx's error once ctx has ended, even for an attempt
	// that succeeded; op's own outcome is what callers classify. An attempt
	// is bounded by its context's deadline, not by a timeout policy: op then
	// sees DeadlineExceeded (readRetryable's), not failsafe's own error, and
	// the last attempt gets what is left of the budget.
	last, made := first, false
	_ = failsafe.With(rp).WithContext(ctx).Run(func() error {
		if !made { // the attempt retry made
			made = true
			return last
		}
		last = tryOnce(ctx, min(t.each, time.Until(deadline)), op)
		return last
	})
	return last
}

// tryOnce runs op once, bounded by each.
func tryOnce(ctx context.Context, each time.Duration, op func(context.Context) error) error {
	tctx, cancel := context.WithTimeout(ctx, each)
	defer cancel()
	return op(tctx)
}
