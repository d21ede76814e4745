package tcpack

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
)

// ErrUnsupported is returned by Take for a connection whose peer's
// acknowledgements this system cannot tell: one that is not TCP (a pipe, a
// Unix socket), or any connection outside Linux.
var ErrUnsupported = errors.New("tcpack: acknowledgements cannot be told on this connection")

// State is what the peer acknowledged of the bytes written up to a Mark.
type State int

const (
	// Pending: some of them are not acknowledged yet, and the connection
	// is up: they may still be.
	Pending State = iota
	// Acked: the peer's TCP acknowledged all of them.
	Acked
	// Lost: some of them were not acknowledged and never will be: the
	// connection was reset or timed out first, or (Wait) the peer
	// acknowledged nothing more for the whole stall.
	Lost
)

// String names s.
func (s State) String() string {
	switch s {
	case Acked:
		return "acked"
	case Lost:
		return "lost"
	default:
		return "pending"
	}
}

// Mark is a point in what was written into a TCP connection: the bytes
// written before Take. It holds a descriptor of its own on the socket, so
// that it can still be asked once the connection's owner closed it (a
// server that closes after its answer): the socket stays open until Close.
// A Mark is used by one goroutine at a time.
type Mark struct {
	fd     int    // the Mark's own descriptor on the socket
	target uint64 // tcpi_bytes_acked once the bytes before the mark are all acknowledged
	acked  uint64 // tcpi_bytes_acked at the last look, for Wait's stall
}

// Take marks what was written into conn so far (a *net.TCPConn, or a TLS
// connection over one). Write and flush what the mark must cover before
// calling it. It returns ErrUnsupported, or the system's error, when it
// cannot tell; the caller then cannot know what the peer received.
func Take(conn net.Conn) (*Mark, error) {
	if t, ok := conn.(interface{ NetConn() net.Conn }); ok { // TLS
		conn = t.NetConn()
	}
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil, ErrUnsupported
	}
	return take(tc)
}

// State reports at once what the peer acknowledged of the bytes before
// the mark: all of them (Acked), or not all and the connection is gone
// (Lost), or not all yet (Pending).
func (m *Mark) State() (State, error) {
	s, acked, err := m.state()
	if err == nil {
		m.acked = acked
	}
	return s, err
}

// Poll intervals of Wait: the first look is at once; then from pollFirst,
// doubling up to pollMax. An acknowledgement takes a round trip, plus up
// to the peer's delayed-ACK timer (40 ms on Linux, up to 200 ms elsewhere)
// for the last small segment of an answer: most waits end within a few
// looks.
const (
	pollFirst = time.Millisecond
	pollMax   = 50 * time.Millisecond
)

// Wait looks at the mark until the peer acknowledged every byte before it
// (Acked), the connection is gone first or the peer acknowledged nothing
// more for stall (Lost), or ctx ends (Pending). An error of the system
// (the descriptor cannot be asked) is Lost: nothing says the bytes arrived.
func (m *Mark) Wait(ctx context.Context, stall time.Duration) State {
	s, err := m.State()
	if err != nil {
		return Lost
	}
	if s != Pending {
		return s
	}
	progress := time.Now()
	rp := retrypolicy.NewBuilder[State]().
		HandleResult(Pending).
		WithMaxAttempts(-1).
		WithBackoff(pollFirst, pollMax).
		ReturnLastFailure().
		Build()
	s, err = failsafe.With(rp).WithContext(ctx).Get(func() (State, error) {
		before := m.acked
		s, err := m.State()
		switch {
		case err != nil:
			return Lost, nil
		case s != Pending:
			return s, nil
		case m.acked != before:
			progress = time.Now()
		case time.Since(progress) >= stall:
			return Lost, nil
		}
		return Pending, nil
	})
	if err != nil {
		return Pending // ctx ended
	}
	return s
}

// Close gives the mark's descriptor back: the socket closes if its owner
// closed its own. Call it once.
func (m *Mark) Close() error { return m.close() }
