//go:build unix

package testutil

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// ReservedAddr is a loopback TCP address held by a socket that is bound
// but does not listen: a connection to it is refused, and no other socket,
// in this process or another, can take the port until [ReservedAddr.Listen]
// makes that same socket listen. A port that [FreeAddr] freed may be
// taken by any listener in between; tests of refused connections reserve
// theirs instead.
type ReservedAddr struct {
	Addr string // host:port

	mu sync.Mutex
	fd int // -1 once listening or closed
}

// ReserveAddr reserves a loopback port; the socket is closed when the test
// ends unless Listen took it.
func ReserveAddr(tb testing.TB) *ReservedAddr {
	tb.Helper()
	syscall.ForkLock.RLock() // no child process inherits the socket
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		tb.Fatalf("reserve a port: socket: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		tb.Fatalf("reserve a port: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	in4, ok := sa.(*syscall.SockaddrInet4)
	if err != nil || !ok {
		_ = syscall.Close(fd)
		tb.Fatalf("reserve a port: getsockname: %v (%T)", err, sa)
	}
	r := &ReservedAddr{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(in4.Port)), fd: fd}
	tb.Cleanup(r.close)
	return r
}

// Listen makes the reserved socket listen, so the port is never free in
// between, and returns it as a listener for the caller to close. It may
// be called once, from any goroutine.
func (r *ReservedAddr) Listen() (net.Listener, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd < 0 {
		return nil, errors.New("testutil: the reserved address already listens or is closed")
	}
	if err := syscall.Listen(r.fd, syscall.SOMAXCONN); err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(r.fd), "reserved "+r.Addr)
	r.fd = -1
	defer f.Close()
	return net.FileListener(f) // a duplicate of the socket
}

func (r *ReservedAddr) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fd >= 0 {
		_ = syscall.Close(r.fd)
		r.fd = -1
	}
}
