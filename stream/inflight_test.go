package stream

import (
	"context"
	"net/http/httptest"
	"testing"
)

// TestFlightsTake: a retry claims an identical keyless request in flight
// whose client is gone (its context ended), once; not one whose client is
// there, nor one whose result was written, nor one of another fingerprint
// (but a streamed one for a non-streamed fallback); its handler then leaves
// nothing behind. One being left behind is waited for, not claimed.
func TestFlightsTake(t *testing.T) {
	var fs flights
	newFlight := func(fp string, stream bool) (*flight, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil).WithContext(ctx)
		k := &keyless{cid: "c1", fp: fp, stream: stream, key: "key-" + fp}
		return fs.add(k, r, &receipt{streamed: stream}), cancel
	}
	retry := &keyless{cid: "c1", fp: "a", stream: true}

	here, cancelHere := newFlight("a", true)
	defer cancelHere()
	if _, ok, wait := fs.take(context.Background(), retry, false); ok || wait {
		t.Fatalf("a request whose client is there was claimed (ok %v, wait %v)", ok, wait)
	}
	other, cancelOther := newFlight("b", true)
	cancelOther()
	if _, ok, _ := fs.take(context.Background(), retry, false); ok {
		t.Fatal("a request of another fingerprint was claimed")
	}
	delivered, cancelDelivered := newFlight("a", true)
	delivered.rc.got.Store(true)
	cancelDelivered()
	if _, ok, _ := fs.take(context.Background(), retry, false); ok {
		t.Fatal("a request whose result was written was claimed")
	}

	gone, cancelGone := newFlight("a", true)
	cancelGone()
	left, ok, _ := fs.take(context.Background(), retry, false)
	if !ok || left.Key != "key-a" || !left.Stream || left.Fingerprint != "a" {
		t.Fatalf("the gone request: %+v, %v; want it claimed", left, ok)
	}
	if _, ok, _ := fs.take(context.Background(), retry, false); ok {
		t.Fatal("a request was claimed twice")
	}
	leaves := 0
	fs.done(gone, func() { leaves++ })
	if leaves != 0 {
		t.Error("a claimed request's handler left it behind")
	}

	fallback := &keyless{cid: "c1", fp: "x", stream: false}
	if left, ok, _ := fs.take(context.Background(), fallback, true); !ok || left.Key != "key-b" {
		t.Errorf("a non-streamed fallback: %+v, %v; want the gone streamed request of another fingerprint", left, ok)
	}

	// Being left behind (its handler ended, its index write runs): not
	// claimed here, the index will have it.
	leaving, cancelLeaving := newFlight("a", true)
	cancelLeaving()
	leaving.state.Store(flightLeaving)
	close(leaving.left)
	if _, ok, wait := fs.take(context.Background(), retry, false); ok || !wait {
		t.Errorf("a request being left behind: ok %v, wait %v; want it waited for, not claimed", ok, wait)
	}
	leaving.left = make(chan struct{})
	fs.done(leaving, func() { t.Error("a request left behind once was left again") })
	fs.done(here, func() {})
	fs.done(other, func() {})
	fs.done(delivered, func() {})
	if n := len(fs.by); n != 0 {
		t.Errorf("%d contents still in flight, want none", n)
	}
}
