package main

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/chaoscore"
)

// TestAgainstReprise runs the client against a real reprise binary (embedded
// JetStream) in front of the fake upstream, served in this process so its
// ledger is the one the client reads.
func TestAgainstReprise(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the reprise binary")
	}
	fake, upstream := fakeUpstream(t)
	target := startReprise(t, upstream)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sum, err := run(ctx, []string{"--target", target, "--ledger", upstream + "/ledger",
		"--runs", "120", "--concurrency", "40", "--max-tokens", "40", "--max-delay", "5ms", "--seed", "7"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(sum)
	if sum.Runs != 120 || !sum.Clean() {
		t.Errorf("summary %v, want 120 clean runs", sum)
	}
	// One upstream generation per key, and the replays cost nothing.
	if total := fake.Ledger().Total(); total.Generations != 120 || total.Completed != 120 {
		t.Errorf("upstream ledger %+v, want 120 generations, all completed", total)
	}
}

// fakeArgs plays 8 keys of one token against srv.
func fakeArgs(srv *httptest.Server, drops string) []string {
	return []string{"--target", srv.URL, "--ledger", srv.URL + "/ledger", "--runs", "8", "--concurrency", "4",
		"--drops", drops, "--min-tokens", "1", "--max-tokens", "1", "--seed", "3", "--run-timeout", "5s"}
}

// TestFake: against the correct fake every run is clean, whatever its drops
// and resume modes (the fake is a fair stand-in for TestFindsDefects).
func TestFake(t *testing.T) {
	srv := httptest.NewServer(&fakeReprise{})
	t.Cleanup(srv.Close)
	sum, err := run(t.Context(), append(fakeArgs(srv, "5"), "--runs", "40"), os.Stderr)
	if err != nil || sum.Runs != 40 || !sum.Clean() || sum.Regenerated != 0 {
		t.Errorf("against a correct fake: %v (%v), want 40 clean runs", sum, err)
	}
}

// TestFindsDefects: the client's checks fail against proxies that lose,
// repeat or regenerate events.
func TestFindsDefects(t *testing.T) {
	tests := []struct {
		name   string
		broken *fakeReprise
		want   func(chaoscore.Summary) bool
	}{
		{"skips an event", &fakeReprise{skip: 2}, func(s chaoscore.Summary) bool { return s.Lost > 0 }},
		{"ignores Last-Event-ID", &fakeReprise{ignoreCursor: true}, func(s chaoscore.Summary) bool { return s.Duplicated > 0 }},
		{"upstream generated twice", &fakeReprise{generations: 2}, func(s chaoscore.Summary) bool { return s.Extra > 0 }},
		{"content differs from the upstream's", &fakeReprise{ledgerContent: "other"}, func(s chaoscore.Summary) bool { return s.Lost > 0 }},
		{"ends every stream with an error", &fakeReprise{errorEvent: true}, func(s chaoscore.Summary) bool { return s.Failed > 0 }},
		{"regenerates more than its breaks explain", &fakeReprise{breakFirst: true, generations: 3}, func(s chaoscore.Summary) bool { return s.Extra > 0 && s.Regenerated > 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.broken)
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			sum, err := run(ctx, fakeArgs(srv, "2"), os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(sum)
			if sum.Clean() || !tc.want(sum.Summary) {
				t.Errorf("summary %v: the defect went unnoticed", sum)
			}
		})
	}
}

// TestRegenerationAllowed: a generation that broke once is asked again: one
// more upstream generation is then allowed.
func TestRegenerationAllowed(t *testing.T) {
	srv := httptest.NewServer(&fakeReprise{breakFirst: true})
	t.Cleanup(srv.Close)
	sum, err := run(t.Context(), fakeArgs(srv, "1"), os.Stderr)
	if err != nil || !sum.Clean() || sum.Regenerated != 8 {
		t.Errorf("one break per key: %v (%v), want clean with regenerated=8", sum, err)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--target", "localhost:8080"},
		{"--ledger", "ftp://x/ledger"},
		{"--runs", "0"},
		{"--min-tokens", "9", "--max-tokens", "3"},
		{"--max-delay", "0s"},
		{"--format", "speech"},
		{"--nats-pause", "5s"},
		{"--nats-pid", "1"},
		{"--nats-pause", "5s,later", "--nats-pid", "1"},
		{"--nats-pause", "5s", "--nats-pid", "1", "--nats-pause-gap", "0s"},
		{"--nope"},
	} {
		if _, err := run(context.Background(), args, os.Stderr); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}
