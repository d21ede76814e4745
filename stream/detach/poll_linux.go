package detach

import (
	"errors"
	"net"
	"sync"

	"golang.org/x/sys/unix"
)

// poller watches the sockets of idle readers for their client's first
// word — bytes, a close, a reset — so that an idle reader needs no
// goroutine blocked in a read to notice its client leave: one goroutine of
// the Group, blocked in epoll_wait, does it for all of them. What it hears
// starts the reader's own reading goroutine (it reads, and sees the close);
// the socket is not watched again.
//
// Each socket is registered one-shot in the poller's own epoll instance (Go's
// netpoller keeps its registration in another), under a token that is never
// reused: a socket closed and its descriptor number reused meanwhile cannot
// wake the wrong reader (closing a socket removes it from every epoll
// instance, and a token already collected finds nothing).
type poller struct {
	mu      sync.Mutex
	ep      int // the epoll instance; -1 before the first watch
	stopFD  int // an eventfd that ends run
	next    uint64
	waiting map[uint64]func()
	stopped chan struct{} // closed when run returns
	off     bool          // failed to start, or stopped: readers read for themselves
}

func newPoller() *poller { return &poller{ep: -1, stopFD: -1} }

// stopToken is the stop eventfd's token; readers' start at 1.
const stopToken = 0

// watch calls ready on a goroutine of its own once conn has something to
// read (or at once when conn is not a socket the poller can watch). stop,
// called before conn is closed, cancels the watch: it reports whether ready
// was not called and will not be.
func (p *poller) watch(conn net.Conn, ready func()) (stop func() bool) {
	rc := RawConn(conn)
	p.mu.Lock()
	if rc == nil || !p.startLocked() {
		p.mu.Unlock()
		go ready()
		return never
	}
	ep := p.ep
	p.next++
	token := p.next
	p.waiting[token] = ready
	p.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT}
	ev.Fd, ev.Pad = int32(uint32(token)), int32(uint32(token>>32))
	var err error
	if cerr := rc.Control(func(fd uintptr) { err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, int(fd), &ev) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		if p.take(token) != nil {
			go ready()
		}
		return never
	}
	return func() bool { return p.take(token) != nil }
}

// never is the stop of a watch whose ready was called at once.
func never() bool { return false }

// take removes token's watch and returns its ready; nil when it was taken
// already (heard, or stopped).
func (p *poller) take(token uint64) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	ready := p.waiting[token]
	delete(p.waiting, token)
	return ready
}

// startLocked makes the epoll instance and starts run, once; false when it
// cannot, or was stopped (then readers read for themselves). The caller
// holds p.mu.
func (p *poller) startLocked() bool {
	if p.ep >= 0 || p.off {
		return !p.off
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		p.off = true
		return false
	}
	stopFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err == nil {
		ev := unix.EpollEvent{Events: unix.EPOLLIN} // token 0: stopToken
		err = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, stopFD, &ev)
		if err != nil {
			_ = unix.Close(stopFD)
		}
	}
	if err != nil {
		_ = unix.Close(ep)
		p.off = true
		return false
	}
	p.ep, p.stopFD = ep, stopFD
	p.waiting = map[uint64]func(){}
	p.stopped = make(chan struct{})
	go p.run(ep)
	return true
}

// run hands each socket heard to its ready until stop.
func (p *poller) run(ep int) {
	defer close(p.stopped)
	events := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(ep, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // not expected of a valid instance: readers left watched would never be heard
			p.mu.Lock()
			p.off = true
			waiting := p.waiting
			p.waiting = map[uint64]func(){}
			p.mu.Unlock()
			for _, ready := range waiting {
				go ready()
			}
			return
		}
		for _, ev := range events[:n] {
			token := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if token == stopToken {
				return
			}
			if ready := p.take(token); ready != nil {
				go ready()
			}
		}
	}
}

// stop ends run, if it started, waits for it and closes the instance;
// watch starts no more. Every watch must have been stopped or heard: a
// reader still watched is never told. It is idempotent.
func (p *poller) stop() {
	p.mu.Lock()
	ep, stopFD, stopped := p.ep, p.stopFD, p.stopped
	p.ep, p.stopFD, p.off = -1, -1, true
	p.mu.Unlock()
	if ep < 0 {
		return
	}
	one := [8]byte{1}
	_, _ = unix.Write(stopFD, one[:]) // run may have returned already (an error): the fd is still ours
	<-stopped
	_ = unix.Close(ep)
	_ = unix.Close(stopFD)
}
