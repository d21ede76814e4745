package stream

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpClose is Linux's TCP_CLOSE state: a connection the peer reset (or
// that timed out) while this side still holds the socket. A peer that
// closed cleanly leaves it in CLOSE_WAIT.
const tcpClose = 7

// tcpCloseWait is Linux's TCP_CLOSE_WAIT state: the peer closed its end
// (a FIN), this side has not yet.
const tcpCloseWait = 8

// socketReset reports whether rc's TCP connection is in TCP_CLOSE.
func socketReset(rc syscall.RawConn) bool {
	return tcpState(rc) == tcpClose
}

// socketClosed reports whether rc's peer closed or reset the connection
// (TCP_CLOSE_WAIT or TCP_CLOSE).
func socketClosed(rc syscall.RawConn) bool {
	s := tcpState(rc)
	return s == tcpClose || s == tcpCloseWait
}

// tcpState is rc's TCP state (TCP_INFO), 0 when it cannot be read.
func tcpState(rc syscall.RawConn) uint8 {
	state := uint8(0)
	err := rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			state = info.State
		}
	})
	if err != nil {
		return 0
	}
	return state
}
