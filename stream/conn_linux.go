package stream

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// tcpClose is Linux's TCP_CLOSE state: a connection the peer reset (or
// that timed out) while this side still holds the socket. A peer that
// closed cleanly leaves it in CLOSE_WAIT.
const tcpClose = 7

// socketReset reports whether rc's TCP connection is in TCP_CLOSE.
func socketReset(rc syscall.RawConn) bool {
	state := uint8(0)
	err := rc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			state = info.State
		}
	})
	return err == nil && state == tcpClose
}
