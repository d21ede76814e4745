package testutil

import (
	"context"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// WaitTimeout bounds the waits that take no deadline of their own
// ([WaitState], [Settled]): far above what they need, so that reaching it
// is a failure, not a slow machine.
const WaitTimeout = 15 * time.Second

// PollInterval is how often [Eventually] and [WaitState] look again.
const PollInterval = 20 * time.Millisecond

// Context returns a context that ends after d or when the test ends.
func Context(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}

// Eventually checks cond every [PollInterval] until it holds, and fails the
// test after timeout saying that it waited for what. Use it for state
// outside the test's reach (a server, a cluster); wait on an event instead
// where there is one.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// Settled waits until the fake upstream has at least n generations of
// prompt and none of them is running, and returns the prompt's entry then
// (see [mockllm.Ledger.WaitSettled]). A client that read a stream to its
// end may be ahead of the ledger: read counts after a stream through
// Settled, never with Ledger.Get at once.
func Settled(tb testing.TB, l *mockllm.Ledger, prompt string, n int) mockllm.Entry {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), WaitTimeout)
	defer cancel()
	entry, err := l.WaitSettled(ctx, prompt, n)
	if err != nil {
		tb.Fatalf("upstream ledger: %v", err)
	}
	return entry
}
