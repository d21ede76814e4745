package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// lines is a slog.Handler that sends each record, as "message attr=value
// …", to a channel.
type lines chan string

func (l lines) Enabled(context.Context, slog.Level) bool { return true }
func (l lines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	select {
	case l <- b.String():
	default: // a line nobody waits for
	}
	return nil
}
func (l lines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l lines) WithGroup(string) slog.Handler      { return l }

// await waits for a line that holds every one of want.
func (l lines) await(tb testing.TB, want ...string) string {
	tb.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case line := <-l:
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return line
			}
		case <-timeout:
			tb.Fatalf("no log line with %q within 30s", want)
		}
	}
}

// TestReloadOnHangup: SIGHUP reloads --proxy-keys and --prices; the log
// says what changed, the key added is accepted; a file with a bad line is
// refused with its file and line, and the keys in force stay.
func TestReloadOnHangup(t *testing.T) { // not parallel: it signals the process
	dir := t.TempDir()
	keys, prices := filepath.Join(dir, "proxy-keys"), filepath.Join(dir, "prices.json")
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const a, c = "pk-team-a-3f9c1a7e5b2d", "pk-team-c-7a1b2c3d4e5f"
	write(keys, "team-a "+a+" budget=5/day\n")
	write(prices, `{"mock-*": {"output_per_1m": 1}}`)
	cfg, err := parseConfig([]string{"--listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--upstream", "http://127.0.0.1:1",
		"--auth", "static", "--proxy-keys", keys, "--prices", prices, "--upstream-key", "sk-operator"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.registerer = prometheus.NewRegistry()
	log := make(lines, 256)
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- run(ctx, cfg, slog.New(log), ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("did not start: %v", err)
	}
	usage := func(key string) int {
		req, _ := http.NewRequest("GET", "http://"+addr+"/usage", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := usage(c); got != http.StatusUnauthorized {
		t.Fatalf("team-c before the reload: %d, want 401", got)
	}

	write(keys, "team-a "+a+" budget=5/day\nteam-c "+c+"\n")
	write(prices, `{"mock-*": {"output_per_1m": 2}}`)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	log.await(t, "reload: proxy keys added: team-c")
	log.await(t, "reload: prices changed: mock-*")
	if got := usage(c); got != http.StatusOK {
		t.Errorf("team-c after the reload: %d, want 200", got)
	}

	write(keys, "team-a "+a+"\nteam-c short\n")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	log.await(t, "reload refused", keys+":2: the key is 5 characters long")
	if got := usage(c); got != http.StatusOK {
		t.Errorf("team-c after a refused reload: %d, want 200 (the keys in force stay)", got)
	}
}
