package testutil

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"
)

// FreePort returns a loopback TCP port that was free a moment ago. Prefer
// a listener on port 0 (or port -1 for nats-server) where the server
// accepts one: another listener may take the port before it is used.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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

// WaitReady polls GET base/readyz until it answers 200, and fails the test
// after timeout, or as soon as exited is closed (the server's process
// ended; nil if there is none to watch).
func WaitReady(tb testing.TB, base string, timeout time.Duration, exited <-chan struct{}) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := ready(base)
		if err == nil {
			return
		}
		select {
		case <-exited:
			tb.Fatalf("%s exited before it was ready (%v)", base, err)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s not ready after %s: %v", base, timeout, err)
		}
		time.Sleep(50 * time.Millisecond) // waiting for another process to listen; bounded above
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
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d", resp.StatusCode)
	}
	return nil
}
