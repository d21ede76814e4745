package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

// TestUnreachableNATS: a --nats nobody answers on fails at start within
// seconds, naming NATS and the URL (its password redacted); the REPRISE_*
// variable that set nothing was warned about first, with the one meant.
func TestUnreachableNATS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // a closed loopback port: connection refused
	url := "nats://reprise:hunter2@" + addr
	cfg, err := parseConfig([]string{"--nats", url, "--data", t.TempDir(), "--listen", "127.0.0.1:0"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.environ = []string{"REPRISE_NATS=" + url, "REPRISE_REPLICA=3"}
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = run(ctx, cfg, log, nil)
	took := time.Since(start)
	want := "cannot reach NATS at nats://reprise:xxxxx@" + addr + ": "
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("run: %v, want %q…", err, want)
	}
	if took > 5*time.Second {
		t.Errorf("failing took %v, want a few seconds at most", took)
	}
	var warn struct{ Level, Name, Nearest string }
	if err := json.Unmarshal(bytes.SplitN(logs.Bytes(), []byte("\n"), 2)[0], &warn); err != nil ||
		warn.Level != "WARN" || warn.Name != "REPRISE_REPLICA" || warn.Nearest != "REPRISE_REPLICAS" {
		t.Errorf("first log line %q, want a WARN naming REPRISE_REPLICA and REPRISE_REPLICAS", logs.String())
	}
}

// TestReplicasOnOneNATS: --replicas 3 against a NATS server that is not
// clustered fails the start at once with NATS's refusal, not after the
// journal's open timeout.
func TestReplicasOnOneNATS(t *testing.T) {
	t.Parallel()
	emb, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Shutdown()
	cfg, err := parseConfig([]string{"--nats", emb.Server.ClientURL(), "--replicas", "3", "--data", t.TempDir(), "--listen", "127.0.0.1:0",
		"--upstream", "http://127.0.0.1:1", "--secret", "0123456789abcdef0123"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.registerer = prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the open timeout is a minute
	defer cancel()
	err = run(ctx, cfg, slog.New(slog.DiscardHandler), nil)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "replicas > 1 not supported") {
		t.Fatalf("run: %v (context: %v), want NATS's refusal of replicas at once", err, ctx.Err())
	}
}
