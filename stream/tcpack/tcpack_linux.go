package tcpack

import (
	"net"

	"golang.org/x/sys/unix"
)

// take duplicates conn's descriptor and notes, as the mark's target, what
// tcpi_bytes_acked will read once every byte written so far is
// acknowledged: what it reads now plus the send queue (SIOCOUTQ: written
// and not yet acknowledged). The queue is read first: an acknowledgement
// that comes between the two reads then makes the target too high, never
// too low — and a send queue seen empty later settles the mark all the
// same (state).
func take(conn *net.TCPConn) (*Mark, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	m := &Mark{fd: -1}
	var opErr error
	if err := rc.Control(func(fd uintptr) {
		var queued int
		if queued, opErr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); opErr != nil {
			return
		}
		var info *unix.TCPInfo
		if info, opErr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); opErr != nil {
			return
		}
		m.target, m.acked = info.Bytes_acked+uint64(queued), info.Bytes_acked
		m.fd, opErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil {
		return nil, err
	}
	if opErr != nil {
		return nil, opErr
	}
	return m, nil
}

// tcpClose is Linux's TCP_CLOSE: the connection was reset or timed out
// (or closed on both sides, which a held socket is not).
const tcpClose = 7

// state is the mark's State and the socket's tcpi_bytes_acked. The bytes
// are acknowledged when tcpi_bytes_acked reached the target, or when the
// send queue is empty (all written, the mark's bytes and any since, is
// acknowledged: this also holds on kernels before 4.1, whose TCP_INFO
// lacks tcpi_bytes_acked). A reset leaves both as they were: bytes
// acknowledged before it stay so.
func (m *Mark) state() (State, uint64, error) {
	info, err := unix.GetsockoptTCPInfo(m.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil {
		return Lost, 0, err
	}
	if info.Bytes_acked >= m.target {
		return Acked, info.Bytes_acked, nil
	}
	queued, err := unix.IoctlGetInt(m.fd, unix.SIOCOUTQ)
	if err != nil {
		return Lost, 0, err
	}
	switch {
	case queued == 0:
		return Acked, info.Bytes_acked, nil
	case info.State == tcpClose:
		return Lost, info.Bytes_acked, nil
	}
	return Pending, info.Bytes_acked, nil
}

func (m *Mark) close() error { return unix.Close(m.fd) }
