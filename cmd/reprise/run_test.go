package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/journal"
)

// TestSecondInstanceOnDataRefused: a second reprise on the --data of a
// running one refuses to start, naming the flag and the way to scale out,
// instead of serving from a store the first one writes behind its back.
func TestSecondInstanceOnDataRefused(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--listen", "127.0.0.1:0", "--data", dir, "--upstream", "http://127.0.0.1:1", "--secret", "0123456789abcdef0123"}
	cfg, err := parseConfig(args, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- run(ctx, cfg, log, ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the first instance: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the first instance did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the first instance was not ready within 30s")
	}
	second, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	err = run(second, cfg, log, nil)
	if !errors.Is(err, journal.ErrStoreInUse) {
		t.Fatalf("the second instance on the same --data: %v, want ErrStoreInUse", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "--data "+dir) || !strings.Contains(msg, "--nats") {
		t.Errorf("message %q does not name --data and --nats", msg)
	}
}
