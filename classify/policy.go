package classify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/bulkhead"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
)

// Defaults for Config.
const (
	DefaultMaxAttempts     = 3
	DefaultBaseDelay       = 250 * time.Millisecond
	DefaultMaxDelay        = 8 * time.Second
	DefaultDeadline        = 30 * time.Second
	DefaultBudgetRatio     = 0.1
	DefaultBudgetMin       = 10
	DefaultBudgetWindow    = 10 * time.Second
	DefaultBreakerFailures = 5
	DefaultBreakerDelay    = 30 * time.Second
	DefaultMaxConcurrent   = 512
	DefaultQueueTimeout    = 5 * time.Second
	// maxErrorBody bounds how much of an upstream error answer is kept.
	maxErrorBody = 1 << 20
)

// ErrInvalidOption wraps every configuration error.
var ErrInvalidOption = errors.New("classify: invalid option")

// Config is the call policy toward one upstream.
type Config struct {
	// MaxAttempts caps upstream requests per call, the first included. Default 3.
	MaxAttempts int
	// BaseDelay and MaxDelay shape exponential backoff with full jitter: the
	// wait before retry n is uniform in [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)].
	// Defaults 250 ms and 8 s.
	BaseDelay, MaxDelay time.Duration
	// Deadline bounds the retries of a call: no wait, and so no new
	// attempt, is taken that would end past it (the last answer goes to
	// the client), and an attempt still connecting when it passes is cut
	// (nothing was sent). An attempt whose request was written is not cut:
	// the upstream may be generating, and only the client's own header
	// timeout (an ambiguous outcome) or the caller ends its wait. Default
	// 30 s.
	Deadline time.Duration
	// RetryAmbiguous retries requests that were sent but got no response:
	// only safe when the upstream honours Idempotency-Key. Default false.
	RetryAmbiguous bool
	// BudgetRatio caps retries at this share of calls over the last
	// BudgetWindow, with BudgetMin retries per window always allowed (so a
	// quiet proxy can still retry). Defaults 0.1, 10 and 10 s.
	BudgetRatio  float64
	BudgetMin    uint
	BudgetWindow time.Duration
	// BreakerFailures consecutive failures (5xx, transport) open the
	// breaker for BreakerDelay; then one probe decides. Defaults 5 and 30 s.
	BreakerFailures uint
	BreakerDelay    time.Duration
	// MaxConcurrent caps generations in flight toward the upstream; a call
	// waits up to QueueTimeout for a place. Defaults 512 and 5 s.
	MaxConcurrent int
	QueueTimeout  time.Duration
	// Narrowed, while it reports true, narrows retries to connect failures
	// (nothing was sent): no 429, 5xx or ambiguous failure is retried (the
	// cost guard, cost.Guard). Default nil: never narrowed.
	Narrowed func() bool
	// Now is the clock for Retry-After dates. Default time.Now.
	Now func() time.Time
	// Observer takes each attempt, retry and retried call's outcome.
	// Default: none.
	Observer Observer
}

func (c *Config) fill() error {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	def(&c.BaseDelay, DefaultBaseDelay)
	def(&c.MaxDelay, DefaultMaxDelay)
	def(&c.Deadline, DefaultDeadline)
	def(&c.BreakerDelay, DefaultBreakerDelay)
	def(&c.QueueTimeout, DefaultQueueTimeout)
	def(&c.BudgetWindow, DefaultBudgetWindow)
	if c.BudgetRatio == 0 {
		c.BudgetRatio = DefaultBudgetRatio
	}
	if c.BudgetMin == 0 {
		c.BudgetMin = DefaultBudgetMin
	}
	if c.BreakerFailures == 0 {
		c.BreakerFailures = DefaultBreakerFailures
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
	switch {
	case c.MaxAttempts < 1 || c.MaxAttempts > 10:
		return fmt.Errorf("%w: max attempts %d not in 1..10", ErrInvalidOption, c.MaxAttempts)
	case c.BaseDelay < 0 || c.MaxDelay < c.BaseDelay:
		return fmt.Errorf("%w: backoff %s..%s", ErrInvalidOption, c.BaseDelay, c.MaxDelay)
	case c.Deadline < 0 || c.BreakerDelay < 0 || c.QueueTimeout < 0 || c.BudgetWindow < budgetBuckets*time.Millisecond:
		return fmt.Errorf("%w: negative duration", ErrInvalidOption)
	case c.BudgetRatio < 0 || c.BudgetRatio > 1 || math.IsNaN(c.BudgetRatio):
		return fmt.Errorf("%w: budget ratio %v not in 0..1", ErrInvalidOption, c.BudgetRatio)
	case c.MaxConcurrent < 1:
		return fmt.Errorf("%w: max concurrent %d", ErrInvalidOption, c.MaxConcurrent)
	}
	return nil
}

// Policy calls one upstream under the configured policy. It is safe for
// concurrent use; the budget, breaker and limit are shared by all calls.
type Policy struct {
	cfg     Config
	client  *http.Client
	budget  *budget
	breaker circuitbreaker.CircuitBreaker[*http.Response]
	limit   bulkhead.Bulkhead[*http.Response]
}

// New returns a Policy that sends requests with client.
func New(cfg Config, client *http.Client) (*Policy, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, fmt.Errorf("%w: no http client", ErrInvalidOption)
	}
	p := &Policy{cfg: cfg, client: client}
	p.budget = newBudget(cfg.BudgetRatio, int(cfg.BudgetMin), cfg.BudgetWindow, cfg.Now)
	//nolint:bodyclose // builders typed by *http.Response: no response is made here
	p.breaker = circuitbreaker.NewBuilder[*http.Response]().
		HandleIf(func(_ *http.Response, err error) bool { return breakerFailure(err) }).
		WithFailureThreshold(cfg.BreakerFailures).
		WithDelay(cfg.BreakerDelay).
		WithSuccessThreshold(1).
		Build()
	p.limit = bulkhead.NewBuilder[*http.Response](uint(cfg.MaxConcurrent)).WithMaxWaitTime(cfg.QueueTimeout).Build() //nolint:bodyclose // a builder, no response
	return p, nil
}

// breakerFailure: upstream health failures (5xx, no connection, no
// answer), not the caller's mistakes (4xx) nor rate limits.
func breakerFailure(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false // the caller's cancellation or a request it could not build
	}
	return (errors.Is(e, ErrRetryable) || errors.Is(e, ErrAmbiguous)) && e.Status != http.StatusTooManyRequests
}

// Acquire takes a place under the concurrency limit, waiting up to the
// queue timeout; release returns it. A full limit is ErrUnavailable
// (upstream_saturated).
func (p *Policy) Acquire(ctx context.Context) (release func(), err error) {
	if err := p.limit.AcquirePermitWithMaxWait(ctx, p.cfg.QueueTimeout); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &Error{Kind: ErrUnavailable, Status: http.StatusServiceUnavailable, Code: CodeSaturated, RetryAfter: time.Second, Err: err}
	}
	var once sync.Once
	return func() { once.Do(p.limit.ReleasePermit) }, nil
}

// RetriesAmbiguous reports whether the policy retries requests that were
// sent but got no answer (safe only toward an upstream that honours
// Idempotency-Key).
func (p *Policy) RetriesAmbiguous() bool { return p.cfg.RetryAmbiguous }

// BudgetUse is the share of the retry budget taken over its window, 0..1
// (1: no retry is allowed until the window moves on).
func (p *Policy) BudgetUse() float64 { return p.budget.use() }

// BreakerOpen reports whether the breaker currently refuses calls.
func (p *Policy) BreakerOpen() bool { return p.breaker.IsOpen() }

// Do sends the request newRequest builds (once per attempt) and retries
// what may be retried. It returns a 2xx response with its body open, or an
// *Error; attempts counts the requests made either way.
func (p *Policy) Do(ctx context.Context, newRequest func(context.Context) (*http.Request, error)) (resp *http.Response, attempts int, err error) {
	c := &call{p: p, deadline: p.cfg.Now().Add(p.cfg.Deadline)}
	p.budget.call()
	rp := retrypolicy.NewBuilder[*http.Response]().
		HandleIf(func(_ *http.Response, err error) bool { return c.retryable(err) }).
		// Only the caller's own cancellation ends the call; a transport
		// timeout is an outcome to classify (it may match DeadlineExceeded).
		AbortIf(func(_ *http.Response, err error) bool { return ctx.Err() != nil || c.abort(err) }).
		AbortOnErrors(circuitbreaker.ErrOpen).
		WithMaxAttempts(p.cfg.MaxAttempts).
		WithDelayFunc(func(exec failsafe.ExecutionAttempt[*http.Response]) time.Duration { return c.delay(exec.LastError()) }).
		OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[*http.Response]) {
			p.cfg.Observer.Retry(RetryReason(e.LastError()))
		}).
		ReturnLastFailure().
		Build()
	resp, err = failsafe.With[*http.Response](rp, p.breaker).WithContext(ctx).
		GetWithExecution(func(exec failsafe.Execution[*http.Response]) (*http.Response, error) {
			c.attempts++
			c.jitter = rand.Float64()
			start := time.Now()
			resp, err := c.attempt(exec.Context(), newRequest)
			c.observe(ctx, start, resp, err)
			return resp, err
		})
	err = c.final(err)
	if c.attempts > 1 {
		p.cfg.Observer.Retried(err == nil)
	}
	return resp, c.attempts, err
}

// call is one Do: its attempts and its last classified failure.
type call struct {
	p        *Policy
	deadline time.Time
	attempts int
	last     *Error
	trace    *Trace // the last attempt's
	// jitter, drawn as each attempt starts, places the backoff after it
	// within its range: abort (deciding whether the wait fits the deadline)
	// and the delay function then see the same wait.
	jitter float64
}

// errDeadline cuts an attempt that has not written its request when the
// call's deadline passes.
var errDeadline = errors.New("classify: call deadline passed")

// attempt makes one request. The call's deadline cuts it only while its
// request is not written: a written one may be generating upstream (a
// non-streamed answer's head comes only once the whole answer is made),
// and cutting it would bill a generation nobody gets. Its wait is the
// client's header timeout's.
func (c *call) attempt(ctx context.Context, newRequest func(context.Context) (*http.Request, error)) (*http.Response, error) {
	var t Trace
	c.trace = &t
	actx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(time.Until(c.deadline), func() {
		if !t.Wrote() {
			cancel(errDeadline)
		}
	})
	req, err := newRequest(httptrace.WithClientTrace(actx, t.ClientTrace()))
	if err != nil {
		timer.Stop()
		cancel(nil)
		return nil, err
	}
	start := time.Now()
	resp, err := c.p.client.Do(req)
	firstByte := time.Since(start)
	timer.Stop()
	cut := errors.Is(context.Cause(actx), errDeadline)
	if err != nil {
		cancel(nil)
		if ctx.Err() != nil {
			c.p.cfg.Observer.Attempt(0, KindCancelled, 0)
			return nil, ctx.Err()
		}
		c.last = Transport(err, &t)
		if cut && !errors.Is(c.last, ErrFatal) {
			c.last.Status, c.last.Code = http.StatusGatewayTimeout, CodeTimeout
		}
		c.p.cfg.Observer.Attempt(0, KindOf(c.last), 0)
		return nil, c.last
	}
	if Status(resp.StatusCode) == nil {
		c.p.cfg.Observer.Attempt(resp.StatusCode, KindSuccess, firstByte)
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	cancel(nil)
	c.last = Response(resp, body, c.p.cfg.Now())
	c.p.cfg.Observer.Attempt(resp.StatusCode, KindOf(c.last), firstByte)
	return nil, c.last
}

// cancelOnClose releases an attempt's context when its body is closed: the
// body of a stream lives as long as the stream.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}

func (c *call) retryable(err error) bool {
	if c.p.cfg.Narrowed != nil && c.p.cfg.Narrowed() {
		var ce *Error
		return errors.As(err, &ce) && errors.Is(ce, ErrRetryable) && ce.Code == CodeUnreachable
	}
	return errors.Is(err, ErrRetryable) || (c.p.cfg.RetryAmbiguous && errors.Is(err, ErrAmbiguous))
}

// delay is the wait before the retry that follows err: the answer's
// Retry-After, else backoff with full jitter, uniform in
// [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)] after attempt n.
func (c *call) delay(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter
	}
	ceil := min(c.p.cfg.MaxDelay, c.p.cfg.BaseDelay<<min(c.attempts-1, 20))
	return min(time.Duration(c.jitter*float64(ceil+1)), ceil)
}

// abort decides, after every failed attempt, whether the call stops
// instead of retrying: attempts must be left, the wait (delay) must fit
// the deadline, and the retry budget must allow one more. Taking from the
// budget is its one side effect, and the budget cannot be asked first and
// charged later (concurrent calls would all see the same room): it is
// charged here, last, so only for a retry that is then scheduled.
func (c *call) abort(err error) bool {
	if !c.retryable(err) || c.attempts >= c.p.cfg.MaxAttempts {
		return false
	}
	if c.p.cfg.Now().Add(c.delay(err)).After(c.deadline) {
		return true
	}
	return !c.p.budget.retry()
}

// final maps what failsafe returned to the call's outcome.
func (c *call) final(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, circuitbreaker.ErrOpen):
		if c.last != nil {
			c.last.Attempts = c.attempts
			return c.last // the breaker opened during our retries: the answer we had
		}
		ra := c.p.breaker.RemainingDelay()
		return &Error{Kind: ErrUnavailable, Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
			RetryAfter: max(ra, time.Second), Attempts: c.attempts, Err: err}
	}
	var e *Error
	if errors.As(err, &e) {
		e.Attempts = c.attempts
		return e
	}
	return err
}
