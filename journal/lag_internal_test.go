package journal

import (
	"context"
	"testing"
	"time"
)

// TestLagIsTheOldestUnstoredEvent: Lag is the age of the oldest event a
// writer holds unstored — here held by a sink that does not return, as a
// store that does not acknowledge holds it — 0 once it is stored, and a
// writer that ended counts no more.
func TestLagIsTheOldestUnstoredEvent(t *testing.T) {
	j := newTestJournal(t)
	ctx := context.Background()
	hold := make(chan struct{})
	w := j.NewWriter(Ref{ID: "lag", Gen: 1}, func(ev Event) {
		if ev.Offset == 2 {
			<-hold
		}
	})
	if err := w.Append(ctx, "t", []byte("fence")); err != nil {
		t.Fatal(err)
	}
	if lag := j.Lag(); lag != 0 {
		t.Fatalf("lag %s with everything stored, want 0", lag)
	}
	if err := w.Append(ctx, "t", []byte("held")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if lag := j.Lag(); lag < 300*time.Millisecond || lag > 10*time.Second {
		t.Fatalf("lag %s with an event held for 300ms", lag)
	}
	close(hold)
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := w.End(ectx, EndCompleted); err != nil {
		t.Fatal(err)
	}
	if lag := j.Lag(); lag != 0 {
		t.Fatalf("lag %s after the writer ended, want 0", lag)
	}
	j.lag.mu.Lock()
	n := len(j.lag.writers)
	j.lag.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d writers still counted after End", n)
	}
}
