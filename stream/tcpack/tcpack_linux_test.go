package tcpack

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// answer is what the server writes: far more than a peer's smallest
// receive buffer holds (about a kilobyte), far less than the server's
// send buffer.
const answer = 64 << 10

// pair returns the two ends of a loopback TCP connection: srv, accepted,
// and peer, dialled with the smallest receive buffer (set before the
// handshake, so its window is small from the start): a peer that does not
// read leaves most of an answer unacknowledged in srv's send queue.
func pair(t *testing.T) (srv, peer *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 1) }); cerr != nil {
			return cerr
		}
		return err
	}}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// write writes the answer into srv (into its send buffer: the peer need
// not read for it to return).
func write(t *testing.T, srv net.Conn) {
	t.Helper()
	if _, err := srv.Write(make([]byte, answer)); err != nil {
		t.Fatal(err)
	}
}

func mark(t *testing.T, c net.Conn) *Mark {
	t.Helper()
	m, err := Take(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func state(t *testing.T, m *Mark) State {
	t.Helper()
	s, err := m.State()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// wait is Wait bounded by 10 s, with a stall longer than that: the test
// fails rather than hangs.
func wait(t *testing.T, m *Mark) State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return m.Wait(ctx, time.Minute)
}

// readAll reads the whole answer at peer.
func readAll(t *testing.T, peer net.Conn) {
	t.Helper()
	if _, err := io.ReadFull(peer, make([]byte, answer)); err != nil {
		t.Fatal(err)
	}
}

// reset closes c with a TCP RST (SO_LINGER 0), as a client that dies with
// bytes unread does.
func reset(t *testing.T, c *net.TCPConn) {
	t.Helper()
	if err := c.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
}

// waitReset waits until srv's socket took its peer's reset (TCP_CLOSE).
func waitReset(t *testing.T, srv *net.TCPConn) {
	t.Helper()
	rc, err := srv.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		var st uint8
		_ = rc.Control(func(fd uintptr) {
			if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
				st = info.State
			}
		})
		if st == tcpClose {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's socket did not see its peer's reset within 10 s (state %d)", st)
		}
	}
}

// TestAckedOnceThePeerRead: a peer that reads the whole answer
// acknowledged it.
func TestAckedOnceThePeerRead(t *testing.T) {
	srv, peer := pair(t)
	write(t, srv)
	m := mark(t, srv)
	readAll(t, peer)
	if s := wait(t, m); s != Acked {
		t.Fatalf("Wait = %v after the peer read everything, want acked", s)
	}
}

// TestPendingWhileThePeerDoesNotRead: a peer that stops reading fills its
// receive window; the rest of the answer, written into the server's
// socket all the same, is not acknowledged until the peer reads it.
func TestPendingWhileThePeerDoesNotRead(t *testing.T) {
	srv, peer := pair(t)
	write(t, srv)
	m := mark(t, srv)
	if s := state(t, m); s != Pending {
		t.Fatalf("State = %v while the peer reads nothing, want pending", s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if s := m.Wait(ctx, time.Minute); s != Pending {
		t.Fatalf("Wait with its context ended = %v, want pending", s)
	}
	readAll(t, peer)
	if s := wait(t, m); s != Acked {
		t.Fatalf("Wait = %v once the peer read, want acked", s)
	}
}

// TestLostWhenThePeerResets: a peer that dies with the answer unread
// resets the connection: what it did not acknowledge never will be.
func TestLostWhenThePeerResets(t *testing.T) {
	srv, peer := pair(t)
	write(t, srv)
	m := mark(t, srv)
	reset(t, peer)
	if s := wait(t, m); s != Lost {
		t.Fatalf("Wait = %v after the peer's reset, want lost", s)
	}
}

// TestAckedBeforeAResetStaysAcked: a peer that read the whole answer and
// then reset the connection (a client that drops it without reading the
// framing after its last event) had acknowledged it: a look after the reset
// still says so.
func TestAckedBeforeAResetStaysAcked(t *testing.T) {
	srv, peer := pair(t)
	write(t, srv)
	m := mark(t, srv)
	readAll(t, peer)
	// Bytes after the mark, which the peer never takes: its close with
	// them unread resets the connection.
	if _, err := srv.Write([]byte("0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	reset(t, peer)
	waitReset(t, srv)
	if s := state(t, m); s != Acked {
		t.Fatalf("State = %v after the peer read the answer and then reset, want acked", s)
	}
}

// TestLostWhenThePeerStalls: a peer that acknowledges nothing more for the
// whole stall (a link that went silent) did not receive the rest.
func TestLostWhenThePeerStalls(t *testing.T) {
	srv, _ := pair(t)
	write(t, srv)
	m := mark(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if s := m.Wait(ctx, 100*time.Millisecond); s != Lost {
		t.Fatalf("Wait = %v after a 100 ms stall, want lost", s)
	}
}

// TestMarkOutlivesTheConnection: the connection's owner closes it right
// after its answer (Connection: close); the mark still tells what the peer
// acknowledged, and the socket closes (the peer reads its end) once the
// mark is closed too.
func TestMarkOutlivesTheConnection(t *testing.T) {
	srv, peer := pair(t)
	write(t, srv)
	m, err := Take(srv)
	if err != nil {
		t.Fatal(err)
	}
	_ = srv.Close()
	readAll(t, peer)
	if s := wait(t, m); s != Acked {
		t.Fatalf("Wait = %v after the owner closed and the peer read, want acked", s)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := peer.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, err := peer.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Fatalf("peer read %d, %v after the mark closed, want EOF", n, err)
	}
}

// TestTLS: a TLS connection is asked through the TCP connection under it.
func TestTLS(t *testing.T) {
	srv, peer := pair(t)
	cert := httptest.NewTLSServer(nil)
	defer cert.Close()
	ts := tls.Server(srv, cert.TLS)
	tc := tls.Client(peer, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a loopback test of the server's socket
	read := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(tc, make([]byte, answer))
		read <- err
	}()
	if _, err := ts.Write(make([]byte, answer)); err != nil {
		t.Fatal(err)
	}
	m := mark(t, ts)
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if s := wait(t, m); s != Acked {
		t.Fatalf("Wait = %v after the TLS peer read everything, want acked", s)
	}
}

// TestUnsupported: a connection that is not TCP cannot be asked.
func TestUnsupported(t *testing.T) {
	a, b := net.Pipe()
	defer func() { _ = a.Close(); _ = b.Close() }()
	if _, err := Take(a); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Take(pipe) = %v, want ErrUnsupported", err)
	}
}
