package stream

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"
)

// TestFlightReachable: once the lease of a keyless request's generation
// ran out (its owner cut off from the store, or paused), somebody can still
// be waiting for it while its client is there, when a retry here claimed
// it, or when the keyless index held it before the lease ran out (a retry
// on another instance found it). A request whose client left and that the
// index held only later, or never, is waited for by nobody: its retry
// found nothing and started the generation it needed.
func TestFlightReachable(t *testing.T) {
	since := time.Now()
	before, after := since.Add(-time.Second).UnixNano(), since.Add(time.Second).UnixNano()
	tests := []struct {
		name  string
		setup func(fs *flights, f *flight, leave context.CancelFunc)
		want  bool
	}{
		{"its client is there", func(*flights, *flight, context.CancelFunc) {}, true},
		{"its client left, not yet left behind", func(_ *flights, f *flight, leave context.CancelFunc) {
			f.state.Store(flightRunning)
			leave()
		}, false},
		{"a retry here claimed it", func(_ *flights, f *flight, leave context.CancelFunc) {
			leave()
			f.state.Store(flightClaimed)
		}, true},
		{"left behind before the lease ran out", func(fs *flights, f *flight, leave context.CancelFunc) {
			f.k.leftAt.Store(before)
			leave()
			fs.done(f, func() {})
		}, true},
		{"left behind after the lease ran out", func(fs *flights, f *flight, leave context.CancelFunc) {
			f.k.leftAt.Store(after)
			leave()
			fs.done(f, func() {})
		}, false},
		{"its leave-behind failed", func(fs *flights, f *flight, leave context.CancelFunc) {
			leave()
			fs.done(f, func() {})
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var fs flights
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := httptest.NewRequest("POST", "/v1/chat/completions", nil).WithContext(ctx)
			f := fs.add(&keyless{cid: "c1", fp: "a", stream: true, key: "k"}, r, &receipt{streamed: true})
			fs.run(f, func() {}) // its leave-behind, as the client goes, is the case's
			f.stop()
			tc.setup(&fs, f, cancel)
			if got := f.reachable(since); got != tc.want {
				t.Errorf("reachable = %v, want %v", got, tc.want)
			}
		})
	}
}
