package classify

import (
	"errors"
	"net/http"
	"time"
)

// Observer takes what a Policy sees of its calls, for the proxy's metrics.
// Its methods are called on the calling goroutine and must not block.
// classify declares it so that it stays free of any metrics library.
type Observer interface {
	// Attempt reports one upstream request: the status of its answer (0
	// when none came), its kind (one of Kinds) and how long its answer's
	// head took (its time to first byte; 0 when none came).
	Attempt(status int, kind string, firstByte time.Duration)
	// Retry reports a retry scheduled after a failure of reason (one of
	// RetryReasons).
	Retry(reason string)
	// Retried reports how a call that retried at least once ended: true
	// when its last attempt succeeded.
	Retried(success bool)
}

// Names of outcome kinds in Observer.Attempt.
const (
	KindSuccess     = "success"
	KindRetryable   = "retryable"
	KindFatal       = "fatal"
	KindAmbiguous   = "ambiguous"
	KindUnavailable = "unavailable"
	KindCancelled   = "cancelled"
)

// Kinds lists every kind Observer.Attempt reports.
func Kinds() []string {
	return []string{KindSuccess, KindRetryable, KindFatal, KindAmbiguous, KindUnavailable, KindCancelled}
}

// KindOf names err's kind: KindSuccess for nil, KindCancelled for an
// unclassified error (the caller's cancellation, a request it could not
// build).
func KindOf(err error) string {
	switch {
	case err == nil:
		return KindSuccess
	case errors.Is(err, ErrRetryable):
		return KindRetryable
	case errors.Is(err, ErrFatal):
		return KindFatal
	case errors.Is(err, ErrAmbiguous):
		return KindAmbiguous
	case errors.Is(err, ErrUnavailable):
		return KindUnavailable
	}
	return KindCancelled
}

// Reasons of a retry in Observer.Retry.
const (
	ReasonRateLimited = "rate_limited" // 429
	ReasonOverloaded  = "overloaded"   // 503, 529
	ReasonServerError = "server_error" // 500, 502, 504
	ReasonUnreachable = "unreachable"  // nothing was sent
	ReasonNoResponse  = "no_response"  // sent, no answer (ambiguous; only toward an idempotent upstream)
)

// RetryReasons lists every reason Observer.Retry reports.
func RetryReasons() []string {
	return []string{ReasonRateLimited, ReasonOverloaded, ReasonServerError, ReasonUnreachable, ReasonNoResponse}
}

// RetryReason names why a failure err is retried.
func RetryReason(err error) string {
	var e *Error
	switch {
	case !errors.As(err, &e):
		return ReasonUnreachable
	case errors.Is(e, ErrAmbiguous):
		return ReasonNoResponse
	case e.Code == CodeUnreachable:
		return ReasonUnreachable
	case e.Status == http.StatusTooManyRequests:
		return ReasonRateLimited
	case e.Status == http.StatusServiceUnavailable || e.Status == StatusOverloaded:
		return ReasonOverloaded
	}
	return ReasonServerError
}

type noObserver struct{}

func (noObserver) Attempt(int, string, time.Duration) {}
func (noObserver) Retry(string)                       {}
func (noObserver) Retried(bool)                       {}
