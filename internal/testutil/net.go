package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago. Any
// listener, of this process or another (a test binary of another package,
// another user of the machine), may take it before it is used: prefer a
// listener on port 0 (port -1 for nats-server) where the server accepts
// one, start a server handed a free port again on another when it fails,
// and use [ReserveAddr] for an address that must refuse connections.
func FreePort(tb testing.TB) int {
	tb.Helper()
	_, port, _ := net.SplitHostPort(FreeAddr(tb))
	n, err := strconv.Atoi(port)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// FreeAddr returns a loopback host:port that was free a moment ago (see
// [FreePort]).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ErrExited is returned by [AwaitReady] when the server's process ended
// before it was ready.
var ErrExited = errors.New("testutil: the process exited before it was ready")

// AwaitReady polls GET base/readyz until it answers 200. It returns an
// error after timeout, or [ErrExited] as soon as exited is closed (the
// server's process ended; nil if there is none to watch).
func AwaitReady(base string, timeout time.Duration, exited <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready(base)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s: %w (%w)", base, ErrExited, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", base, timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // waiting for another process to listen; bounded above
	}
}

// WaitReady is [AwaitReady], failing the test on its error.
func WaitReady(tb testing.TB, base string, timeout time.Duration, exited <-chan struct{}) {
	tb.Helper()
	if err := AwaitReady(base, timeout, exited); err != nil {
		tb.Fatal(err)
	}
}

// ready asks base/readyz once.
func ready(base string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := Send(ctx, http.MethodGet, base+"/readyz", "")
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d", resp.StatusCode)
	}
	return nil
}
