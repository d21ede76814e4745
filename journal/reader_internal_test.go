package journal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestReaderRemakesItsConsumer: a reader whose consumer cannot be made
// (its stream gone, as for a while in a failover) tries again, counting
// each retry in ReadRetries; a ctx that ends meanwhile returns ctx's error
// and leaves the reader usable, its run of failures still going; once the
// stream is back the reader reads on, and a message ends the run.
func TestReaderRemakesItsConsumer(t *testing.T) {
	j := newTestJournal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := j.js.DeleteStream(ctx, j.cfg.Stream); err != nil {
		t.Fatal(err)
	}
	ref := Ref{ID: "remade", Gen: 1}
	r, err := j.Read(ctx, ref, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	if _, err := r.Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next without a stream = %v, want the context's deadline", err)
	}
	retried := j.Stats().ReadRetries
	t.Logf("%d retries in 500ms without a stream", retried)
	if retried < 2 {
		t.Fatalf("ReadRetries = %d after 500ms of failures, want a retry every 50ms", retried)
	}
	if r.failing.IsZero() {
		t.Fatal("the run of failures ended with the context")
	}

	if _, _, err := create(ctx, j.js, j.cfg, jetstream.MemoryStorage); err != nil {
		t.Fatal(err)
	}
	w := j.NewWriter(ref, func(Event) {})
	if err := w.Append(ctx, "t", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.End(ctx, EndCompleted); err != nil {
		t.Fatal(err)
	}
	ev, err := r.Next(ctx)
	if err != nil || ev.Offset != 1 || string(ev.Data) != "x" {
		t.Fatalf("Next once the stream is back = %+v, %v; want offset 1 %q", ev, err, "x")
	}
	if !r.failing.IsZero() {
		t.Error("a message did not end the run of failures")
	}
	if got := j.Stats().ReadRetries; got < retried {
		t.Errorf("ReadRetries went from %d to %d", retried, got)
	}
}
