package journal

import (
	"context"
	"sync/atomic"
	"time"
)

// tries bounds how an operation is tried again through a NATS failover.
type tries struct {
	budget time.Duration  // all attempts and waits
	each   time.Duration  // one attempt
	count  *atomic.Uint64 // attempts made again
}

// retry runs op, each attempt bounded by t.each and the budget, again
// (after a growing pause) while retryable says so, until the budget or ctx
// ends. It returns op's last error.
func retry(ctx context.Context, t tries, retryable func(error) bool, op func(context.Context) error) error {
	deadline := time.Now().Add(t.budget)
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		try := time.Now().Add(t.each)
		if try.After(deadline) {
			try = deadline
		}
		tctx, cancel := context.WithDeadline(ctx, try)
		err := op(tctx)
		cancel()
		if err == nil || ctx.Err() != nil || !retryable(err) || !time.Now().Add(wait).Before(deadline) {
			return err
		}
		t.count.Add(1)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}
