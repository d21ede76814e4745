package journal_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/journal"
)

// told is one call of WatchRecords' seen.
type told struct {
	id, value string
	removed   bool
	rev       uint64
}

// TestWatchRecords: the watch tells of every record the bucket holds, then
// of each write and removal as it is stored, with its revision; it ends
// (its channel closed) when its context does, and when its connection
// closes.
func TestWatchRecords(t *testing.T) {
	t.Parallel()
	j, nc := newJournalConn(t)
	ctx := waitCtx(t, waitTimeout)
	before, _, err := j.Create(ctx, "a", []byte("1"))
	if err != nil {
		t.Fatal(err)
	}
	tells := make(chan told, 16)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done, err := j.WatchRecords(wctx, func(id string, value []byte, rev uint64) {
		tells <- told{id: id, value: string(value), removed: value == nil, rev: rev}
	})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want told) {
		t.Helper()
		select {
		case got := <-tells:
			if got != want {
				t.Fatalf("told %+v, want %+v", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("not told %+v", want)
		}
	}
	next(told{id: "a", value: "1", rev: before})
	rev, _, err := j.Update(ctx, "a", []byte("2"), before)
	if err != nil {
		t.Fatal(err)
	}
	next(told{id: "a", value: "2", rev: rev})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, journal.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	next(told{id: "a", removed: true, rev: rev + 1})
	stop()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the watch did not end with its context")
	}

	// A watch whose connection closes ends too, though nobody reads
	// what it was told (its deliveries are drained).
	many := make(chan struct{})
	for i := range 300 { // more than the watch's buffer
		if _, _, err := j.Create(ctx, fmt.Sprint("k", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	done, err = j.WatchRecords(ctx, func(string, []byte, uint64) { <-many })
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	close(many)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the watch did not end with its connection")
	}
}

// TestWatchRecordsCancelledAtOnce: a watch whose context ends as it opens
// (an instance stopped right after it started) still ends: nats.go may end
// the subscription before the watch can hear of it.
func TestWatchRecordsCancelledAtOnce(t *testing.T) {
	j := newJournal(t)
	bound, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	for i := range 200 {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { // while it opens, or just after
			time.Sleep(time.Duration(i%40) * 25 * time.Microsecond)
			cancel()
		}()
		done, err := j.WatchRecords(ctx, func(string, []byte, uint64) {})
		if err != nil {
			continue // cancelled while it opened
		}
		select {
		case <-done:
		case <-bound.Done():
			t.Fatalf("watch %d did not end after its context", i)
		}
	}
}
