//go:build !linux

package tcpack

import "net"

// take cannot tell outside Linux.
func take(*net.TCPConn) (*Mark, error) { return nil, ErrUnsupported }

// state is never asked: take made no Mark.
func (*Mark) state() (State, uint64, error) { return Lost, 0, ErrUnsupported }

func (*Mark) close() error { return nil }
