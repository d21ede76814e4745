package journal

import (
	"context"
	"testing"
	"time"
)

// TestKeySpendWatch: what one instance publishes another's watch sees, as
// it is when the watch starts and as it changes; an instance's own entry
// is not told to it.
func TestKeySpendWatch(t *testing.T) {
	j := newTestJournal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := j.KeySpend(ctx, "instance a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := j.KeySpend(ctx, "instance-b")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, map[string]map[string]float64{"k1": {"day:2026-12-08": 3}}); err != nil {
		t.Fatal(err)
	}
	type seen struct {
		instance string
		spend    map[string]map[string]float64
	}
	got := make(chan seen, 8)
	watching, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- b.Watch(watching, func(instance string, spend map[string]map[string]float64) { got <- seen{instance, spend} })
	}()
	if s := <-got; s.instance != "instance_a" || s.spend["k1"]["day:2026-12-08"] != 3 {
		t.Fatalf("first: %+v; want instance_a's 3", s)
	}
	if err := b.Publish(ctx, map[string]map[string]float64{"k1": {"day:2026-12-08": 100}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, map[string]map[string]float64{"k1": {"day:2026-12-08": 5}}); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.instance != "instance_a" || s.spend["k1"]["day:2026-12-08"] != 5 {
		t.Fatalf("next: %+v; want instance_a's 5 (and never b's own)", s)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("Watch ended with %v, want nil once its context ended", err)
	}
}
