//go:build !linux

package detach

import "net"

// poller, outside Linux, watches nothing: each reader reads for itself
// (poll_linux.go says what it saves there).
type poller struct{}

func newPoller() *poller { return &poller{} }

func (p *poller) watch(_ net.Conn, ready func()) (stop func() bool) {
	go ready()
	return func() bool { return false }
}

func (p *poller) stop() {}
