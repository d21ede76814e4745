package journal

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestRetry pins retry's schedule on a fake clock: pauses of 50 ms
// doubling to 1 s, each attempt bounded by each and by what is left of the
// budget, no pause that does not fit the budget, op's own last error, and
// a count of the attempts made again.
func TestRetry(t *testing.T) {
	errAgain := errors.New("again")
	errFinal := errors.New("final")
	errWait := errors.New("wait") // op waits for its deadline
	retryable := func(err error) bool { return errors.Is(err, errAgain) || errors.Is(err, context.DeadlineExceeded) }
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, n := range v {
			d = append(d, time.Duration(n)*time.Millisecond)
		}
		return d
	}
	tests := []struct {
		name      string
		budget    time.Duration
		each      time.Duration
		ctx       time.Duration // when the caller's context ends; 0: never
		answers   []error       // op's answer per attempt, the last repeated
		wantErr   error
		starts    []time.Duration // when each attempt started
		ends      []time.Duration // when each attempt ended
		wantCount uint64
	}{
		{
			name: "success at once", budget: time.Second, each: time.Second,
			answers: []error{nil},
			starts:  ms(0), ends: ms(0),
		},
		{
			name: "stored after three failures", budget: 10 * time.Second, each: time.Second,
			answers: []error{errAgain, errAgain, errAgain, nil},
			starts:  ms(0, 50, 150, 350), ends: ms(0, 50, 150, 350), wantCount: 3,
		},
		{
			name: "not retryable", budget: 10 * time.Second, each: time.Second,
			answers: []error{errAgain, errFinal},
			wantErr: errFinal, starts: ms(0, 50), ends: ms(0, 50), wantCount: 1,
		},
		{
			name: "pauses cap at one second", budget: 4 * time.Second, each: time.Second,
			answers: []error{errAgain},
			wantErr: errAgain, starts: ms(0, 50, 150, 350, 750, 1550, 2550, 3550), ends: ms(0, 50, 150, 350, 750, 1550, 2550, 3550), wantCount: 7,
		},
		{
			name: "a pause that does not fit the budget is not taken", budget: time.Second, each: time.Second,
			answers: []error{errAgain},
			wantErr: errAgain, starts: ms(0, 50, 150, 350, 750), ends: ms(0, 50, 150, 350, 750), wantCount: 4,
		},
		{
			name: "attempts bounded by each and the budget", budget: time.Second, each: 300 * time.Millisecond,
			answers: []error{errWait},
			wantErr: context.DeadlineExceeded, starts: ms(0, 350, 750), ends: ms(300, 650, 1000), wantCount: 2,
		},
		{
			name: "ctx ending in a pause leaves op's error", budget: 10 * time.Second, each: time.Second, ctx: 120 * time.Millisecond,
			answers: []error{errAgain},
			wantErr: errAgain, starts: ms(0, 50), ends: ms(0, 50), wantCount: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if tt.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.ctx)
					defer cancel()
				}
				start := time.Now()
				var starts, ends []time.Duration
				var count atomic.Uint64
				err := retry(ctx, tries{budget: tt.budget, each: tt.each, count: &count}, retryable, func(ctx context.Context) error {
					answer := tt.answers[min(len(starts), len(tt.answers)-1)]
					starts = append(starts, time.Since(start))
					defer func() { ends = append(ends, time.Since(start)) }()
					if answer == errWait {
						<-ctx.Done()
						return ctx.Err()
					}
					return answer
				})
				if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
					t.Errorf("retry = %v, want %v", err, tt.wantErr)
				}
				if !slices.Equal(starts, tt.starts) || !slices.Equal(ends, tt.ends) {
					t.Errorf("attempts ran %v → %v, want %v → %v", starts, ends, tt.starts, tt.ends)
				}
				if got := count.Load(); got != tt.wantCount {
					t.Errorf("count = %d, want %d", got, tt.wantCount)
				}
			})
		})
	}
}
