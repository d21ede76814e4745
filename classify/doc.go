// Package classify turns every upstream outcome into a kind callers match
// with errors.Is, and holds the call policy toward the upstream.
//
// Kinds: ErrRetryable (nothing can have been billed: a connection that wrote
// nothing, 429, 500/502/503/504 before the first byte), ErrFatal (the
// request itself is wrong: other 4xx, untrusted TLS), ErrAmbiguous (the
// request was written and no response head came: the upstream may be
// generating and billing), ErrInterrupted (the stream broke after its first
// event) and ErrUnavailable (the proxy refuses to call: breaker open,
// concurrency limit full). "Sent" is told from "never sent" with
// net/http/httptrace, never by matching error strings.
//
// The policy (retries with exponential backoff and full jitter, Retry-After,
// attempt cap, total deadline, retry budget, circuit breaker, concurrency
// limit) is built from failsafe-go. Retries happen only where they cannot
// bill twice: retryable outcomes always, ambiguous ones only toward an
// upstream that honours Idempotency-Key. An interrupted stream is never
// retried here: it is the caller's generation that failed.
//
// Each attempt (its status, kind and time to first byte), each retry (its
// reason) and how each retried call ended go to the Config's Observer: the
// proxy's metrics implement it, and classify imports no metrics library.
//
// classify does not read streams or write to clients.
package classify
