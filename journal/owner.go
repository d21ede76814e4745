package journal

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// An instance that dies holds its generations' leases until they run out.
// NATS knows sooner: the connection of a process that died closes (its
// kernel closes the socket), and the server drops its subscriptions at
// once. So every instance answers a core NATS request on a subject of its
// own (AnswerOwner), subscribed on the connection that writes its
// generations, and another instance can ask (OwnerGone): an answer, the
// owner lives; "no responders" — the server's own word that nothing on the
// whole cluster subscribes to the subject — its connection is gone; no
// answer in time (an owner paused, busy, or NATS slow) says nothing, and
// is never taken for gone.
//
// A process that is paused (SIGSTOP, a long GC, a frozen VM) keeps its
// socket open: the server still holds its subscription and the ask times
// out, until the server itself gives the connection up (its pings
// unanswered, minutes). Its generations are left to their lease.
//
// An owner whose NATS server died reconnects to another at once (the
// client tries every other known server before it waits), and subscribes
// again there; for that moment the subject has no responders. So gone
// takes two such answers, ownerConfirm apart. When the server it asks
// through came back from a restart, every client reconnects, each within
// its reconnect wait: an instance whose own connection is back asks
// nothing until the others had the time to be (conn.settled). An owner
// cut off for longer is taken for gone: it cannot write its generations
// meanwhile, and the instance that settles them seals them, which fences
// it when it returns.

// ownerPrefix is the subject space of the owners' answers.
const ownerPrefix = "reprise.owner."

// ownerConfirm is the time between the two asks that find an owner gone:
// longer than an owner takes to reconnect to another NATS server.
const ownerConfirm = 250 * time.Millisecond

// ownerAsk bounds one ask: an owner that does not answer within it is not
// found gone.
const ownerAsk = time.Second

// ownerSubject is owner's subject: its name encoded, since an owner's name
// (a host name) may hold dots, which separate a subject's tokens.
func ownerSubject(owner string) string {
	return ownerPrefix + base64.RawURLEncoding.EncodeToString([]byte(owner))
}

// AnswerOwner answers, on the journal's connection, every instance that
// asks whether owner lives (OwnerGone), until stop. An instance answers
// for its own name for as long as it may write a generation.
func (j *Journal) AnswerOwner(owner string) (stop func(), err error) {
	sub, err := j.nc.Subscribe(ownerSubject(owner), func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		return nil, fmt.Errorf("journal: answer for owner: %w", err)
	}
	// The subscription reaches the server before any generation of
	// owner's is stored: an ask never finds a live owner gone because
	// its interest was still on the way.
	if err := j.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("journal: answer for owner: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// OwnerGone reports whether owner's connection to NATS is gone: nothing
// answers for it (AnswerOwner), twice, ownerConfirm apart. It is false
// when the owner answers, and false with an error when an ask got no
// answer at all (a timeout, NATS away): that says nothing of the owner.
func (j *Journal) OwnerGone(ctx context.Context, owner string) (bool, error) {
	if !j.conn.settled(j.nc) {
		return false, errUnsettled
	}
	for i := range 2 {
		if i > 0 {
			t := time.NewTimer(ownerConfirm)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return false, ctx.Err()
			}
		}
		gone, err := j.askOwner(ctx, owner)
		if !gone || err != nil {
			return false, err
		}
	}
	if !j.conn.settled(j.nc) { // reconnected between the asks
		return false, errUnsettled
	}
	return true, nil
}

// errUnsettled: this instance's connection to NATS is back too lately for
// a missing answer to mean anything.
var errUnsettled = errors.New("journal: ask for owner: the connection to NATS is back too lately to tell")

// conn is what OwnerGone knows of the journal's connection: the number of
// its reconnects, and when a new one was first seen.
type conn struct {
	mu         sync.Mutex
	reconnects uint64
	seen       time.Time // zero: none seen since Open
}

// settled reports whether nc has been connected long enough for every
// other client of a server that came back to be connected again: no
// reconnect seen for a reconnect wait and its jitter, and a margin. A
// reconnect is seen at an ask, not when it happened: one seen late holds
// the next asks for that long, never makes one too early.
func (c *conn) settled(nc *nats.Conn) bool {
	if !nc.IsConnected() {
		return false
	}
	n, now := nc.Stats().Reconnects, time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n != c.reconnects {
		c.reconnects, c.seen = n, now
	}
	wait := nc.Opts.ReconnectWait + max(nc.Opts.ReconnectJitter, nc.Opts.ReconnectJitterTLS) + 2*ownerConfirm
	return c.seen.IsZero() || now.Sub(c.seen) >= wait
}

// askOwner asks once whether anything answers for owner.
func (j *Journal) askOwner(ctx context.Context, owner string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, ownerAsk)
	defer cancel()
	_, err := j.nc.RequestWithContext(ctx, ownerSubject(owner), nil)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("journal: ask for owner: %w", err)
	}
	return false, nil
}
