package stream

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// resetServer serves one handler that writes "first", tells the test, waits
// for the test's go-ahead, writes more when asked, and reports what
// clientReset says once cond holds (the test fails when cond does not
// hold within 10 s).
func resetServer(t *testing.T, more bool, cond func(r *http.Request) bool) (addr string, written <-chan struct{}, proceed chan<- struct{}, verdict <-chan bool) {
	t.Helper()
	w1, go1, v := make(chan struct{}), make(chan struct{}), make(chan bool, 1)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, ConnContext: ConnContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			_, _ = io.WriteString(w, "first\n")
			_ = rc.Flush()
			close(w1)
			<-go1
			if more {
				_, _ = io.WriteString(w, strings.Repeat("more\n", 1000))
				_ = rc.Flush()
			}
			for deadline := time.Now().Add(10 * time.Second); !cond(r); time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the server did not see the client's close within 10s")
					v <- false
					return
				}
			}
			v <- clientReset(r)
		})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), w1, go1, v
}

func dialGet(t *testing.T, addr string) (*net.TCPConn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c.(*net.TCPConn), bufio.NewReader(c)
}

// readFirst reads the answer's head and its first line.
func readFirst(t *testing.T, br *bufio.Reader) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil) //nolint:bodyclose // the test closes the connection itself; Close would read the rest
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
}

// TestClientResetAfterLeaving: a client that closed its connection before
// the rest of the answer was written has not received it, though the
// write into the socket's buffer succeeded: the connection is reset.
func TestClientResetAfterLeaving(t *testing.T) {
	reset := func(r *http.Request) bool { return clientReset(r) }
	addr, written, proceed, verdict := resetServer(t, true, reset)
	c, br := dialGet(t, addr)
	<-written
	readFirst(t, br)
	_ = c.Close() // everything sent so far was read: a clean close
	close(proceed)
	if !<-verdict {
		t.Fatal("the answer's rest reached a closed socket, and the connection does not count as reset")
	}
}

// TestClientResetUnread: a client that closes with bytes of the answer
// unread resets the connection.
func TestClientResetUnread(t *testing.T) {
	reset := func(r *http.Request) bool { return clientReset(r) }
	addr, written, proceed, verdict := resetServer(t, false, reset)
	c, _ := dialGet(t, addr)
	<-written // and nothing read
	_ = c.Close()
	close(proceed)
	if !<-verdict {
		t.Fatal("a client closed with the answer unread, and the connection does not count as reset")
	}
}

// TestClientNotResetByCleanClose: a client that read all it was sent and
// closed has not reset the connection, even once the server has seen it
// leave: its answer counts as received.
func TestClientNotResetByCleanClose(t *testing.T) {
	left := func(r *http.Request) bool { return r.Context().Err() != nil } // net/http read the close
	addr, written, proceed, verdict := resetServer(t, false, left)
	c, br := dialGet(t, addr)
	<-written
	readFirst(t, br)
	_ = c.Close()
	close(proceed)
	if <-verdict {
		t.Fatal("a client that read everything and closed counts as having reset the connection")
	}
}
