//go:build !linux

package stream

import "syscall"

// socketReset cannot tell outside Linux: no connection counts as reset.
func socketReset(syscall.RawConn) bool { return false }

// socketClosed cannot tell outside Linux: no connection counts as closed.
func socketClosed(syscall.RawConn) bool { return false }
