package stream

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestFlightsTake: a retry never claims an identical keyless request in
// flight whose client is there, whose result was written, or of another
// fingerprint (a non-streamed fallback excepted, which may take a streamed
// one). One whose client is gone is either claimed by the retry — and then
// left behind nowhere — or left behind in the index as its client goes (the
// retry then waits for that and asks the index): never both, never
// neither.
func TestFlightsTake(t *testing.T) {
	var fs flights
	newFlight := func(fp string, stream bool, left *atomic.Int32) (*flight, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil).WithContext(ctx)
		k := &keyless{cid: "c1", fp: fp, stream: stream, key: "key-" + fp}
		rc := newReceipt()
		rc.streamed = stream
		f := fs.add(k, r, rc)
		fs.run(f, func() { left.Add(1) })
		return f, cancel
	}
	retry := &keyless{cid: "c1", fp: "a", stream: true}
	var none atomic.Int32

	here, cancelHere := newFlight("a", true, &none)
	defer cancelHere()
	if _, ok, wait := fs.take(context.Background(), retry, false); ok || wait {
		t.Fatalf("a request whose client is there was claimed (ok %v, wait %v)", ok, wait)
	}
	delivered, cancelDelivered := newFlight("a", true, &none)
	delivered.rc.got.Store(true)
	delivered.rc.decide(true)
	cancelDelivered()
	if _, ok, wait := fs.take(context.Background(), retry, false); ok || wait {
		t.Fatalf("a request whose result reached its client was claimed (ok %v, wait %v)", ok, wait)
	}
	fs.done(delivered, func() {})
	fs.done(here, func() {})
	if n := none.Load(); n != 0 {
		t.Fatalf("a request whose client is there, or got its result, was left behind %d times", n)
	}

	// A result written whole whose handler ended: whether it reached its
	// client is told by its TCP, later. The retry waits for that, and
	// claims it when it did not.
	unacked, cancelUnacked := newFlight("a", true, &none)
	unacked.rc.got.Store(true)
	unacked.rc.ended.Store(true)
	cancelUnacked()
	taken := make(chan bool, 1)
	go func() {
		_, ok, _ := fs.take(context.Background(), retry, false)
		taken <- ok
	}()
	unacked.rc.decide(false)
	if !<-taken {
		t.Fatal("a request whose written result its client's TCP did not acknowledge was not claimed")
	}
	fs.done(unacked, func() { none.Add(1) })
	if n := none.Load(); n != 0 {
		t.Fatal("a request claimed by a retry was left behind too")
	}

	claimed, waited := 0, 0
	for range 200 {
		var left atomic.Int32
		gone, cancelGone := newFlight("b", true, &left)
		cancelGone()
		if _, ok, _ := fs.take(context.Background(), retry, false); ok {
			t.Fatal("a request of another fingerprint was claimed")
		}
		fallback := &keyless{cid: "c1", fp: "x", stream: false}
		l, ok, wait := fs.take(context.Background(), fallback, true)
		fs.done(gone, func() { left.Add(1) })
		switch {
		case ok && (l.Key != "key-b" || !l.Stream):
			t.Fatalf("the fallback claimed %+v, want the streamed request key-b", l)
		case ok && left.Load() != 0:
			t.Fatal("a request claimed by a retry was left behind too")
		case ok:
			claimed++
		case left.Load() != 1 || !wait:
			t.Fatalf("a gone request neither claimed nor left behind once (left %d, wait %v)", left.Load(), wait)
		default:
			waited++
		}
	}
	t.Logf("of 200 gone requests, %d claimed in flight, %d left behind first", claimed, waited)
	if n := len(fs.by); n != 0 {
		t.Errorf("%d contents still in flight, want none", n)
	}
}
