// Package classify will turn every upstream outcome into a kind callers match
// with errors.Is (retryable, fatal, ambiguous, interrupted) and hold the call
// policy toward the upstream (retries with backoff and full jitter,
// Retry-After, attempt cap, deadline, retry budget, circuit breaker,
// concurrency limit), built on failsafe-go.
//
// Until it lands, the pump in package stream calls the upstream exactly once
// per generation and never retries: nothing can be billed twice, and an
// upstream failure before the first event reaches the client unchanged.
package classify
