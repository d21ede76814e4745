package classify

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// Two hooks hear a Policy's attempts: its Observer (Config.Observer), for
// the proxy's metrics, and a call's own observer (WithObserver), for the
// attempt log of the key it serves.

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

// Attempt is what one upstream request of a call came to, as an observer
// sees it (see [WithObserver]).
type Attempt struct {
	// N is the attempt's number within its call, from 1.
	N int
	// Status is the upstream's HTTP status; 0 when it did not answer.
	Status int
	// Kind is nil for an answer passed on (2xx), else the failure's kind
	// (ErrRetryable, ErrFatal, ErrAmbiguous), or the caller's context
	// error when it ended the attempt.
	Kind error
	// Code names the failure when the proxy made it (a Codes value).
	Code string
	// Duration runs from the attempt's start to its answer's head, or to
	// its failure.
	Duration time.Duration
	// FirstByte is the time to the first response byte; 0 when none came.
	FirstByte time.Duration
}

// KindName is a short name of a's kind for logs: ok for an answer passed
// on, else KindOf's name of the failure.
func (a Attempt) KindName() string {
	if a.Kind == nil {
		return "ok"
	}
	return KindOf(a.Kind)
}

type observerKey struct{}

// WithObserver returns a context under which [Policy.Do] calls observe once
// after every attempt it makes, on the goroutine that made it, before
// deciding whether to retry. observe must be quick.
func WithObserver(ctx context.Context, observe func(Attempt)) context.Context {
	return context.WithValue(ctx, observerKey{}, observe)
}

// observe tells ctx's observer, if any, what the attempt that started at
// start came to.
func (c *call) observe(ctx context.Context, start time.Time, resp *http.Response, err error) {
	fn, _ := ctx.Value(observerKey{}).(func(Attempt))
	if fn == nil {
		return
	}
	a := Attempt{N: c.attempts, Duration: time.Since(start)}
	if c.trace != nil {
		if at := c.trace.firstAt.Load(); at != 0 {
			a.FirstByte = time.Unix(0, at).Sub(start)
		}
	}
	var ce *Error
	switch {
	case err == nil && resp != nil:
		a.Status = resp.StatusCode
	case errors.As(err, &ce):
		a.Kind, a.Code = ce.Kind, ce.Code
		if ce.Code == "" {
			a.Status = ce.Status // the upstream's own answer
		}
	default:
		a.Kind = err
	}
	fn(a)
}
