package classify

import (
	"context"
	"errors"
	"net/http"
	"time"
)

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

// KindName is a short name of a's kind for logs and labels: ok, retryable,
// fatal, ambiguous, unavailable or cancelled.
func (a Attempt) KindName() string {
	switch {
	case a.Kind == nil:
		return "ok"
	case errors.Is(a.Kind, ErrRetryable):
		return "retryable"
	case errors.Is(a.Kind, ErrFatal):
		return "fatal"
	case errors.Is(a.Kind, ErrAmbiguous):
		return "ambiguous"
	case errors.Is(a.Kind, ErrUnavailable):
		return "unavailable"
	}
	return "cancelled"
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
