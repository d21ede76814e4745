package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/fair"
)

// Batched gets take turns. Each reader asks the stream for its messages
// a batch at a time (a direct get: the server answers with the messages,
// then an end-of-batch); a thousand long replays asking at once had the
// server queue gigabytes for the connection, which it then cut as a slow
// consumer, and every reader on it gave up. So an instance has at most
// Config.MaxReads batched gets in flight, the others wait their turn,
// and each reply fits the subscription made for it.
//
// Fairness, first by size: a reader's first get (one message: a resume's
// first event), and its gets while about headBytes or less of its
// generation is left to read (the server says how many messages follow
// each one it sends; their size is guessed at the average of those read:
// a short replay, a reader caught up with a live generation), take their
// turns in a lane of their own, as wide, and ask for at most headBytes:
// a short replay does not queue behind long ones, and the lane's gets
// stay small however many readers start together. Then by tenant (For):
// in each lane the turns go round the tenants whose readers wait (package
// fair), so one tenant's thousand replays starting together, whose first
// gets all take the short lane, do not hold up another's. And the short
// lane's gets may have a connection of their own (Config.ShortReads),
// whose replies do not queue behind the long ones'.
const (
	// headBytes is the most a read may have left for its gets to take the
	// short reads' lane, and the most one of them asks for.
	headBytes = 64 << 10
)

// DefaultMaxReads is Config.MaxReads's default.
const DefaultMaxReads = 16

// lanes hold the turns of an instance's batched gets. A turn counts until
// it is given back: the bound is the connection's, not the CPU's.
type lanes struct {
	head, long *fair.Scheduler
}

func newLanes(n int) (*lanes, error) {
	head, err := fair.New(fair.Config{Turns: n, Quantum: -1})
	if err != nil {
		return nil, err
	}
	long, err := fair.New(fair.Config{Turns: n, Quantum: -1})
	return &lanes{head: head, long: long}, err
}

// waiting is how many gets wait for their turn now.
func (l *lanes) waiting() int { return l.head.Waiting() + l.long.Waiting() }

// batchRequest is a direct get of a batch (the server's JSApiMsgGetRequest).
type batchRequest struct {
	Seq      uint64 `json:"seq"`
	NextBy   string `json:"next_by_subj"`
	Batch    int    `json:"batch"`
	MaxBytes int    `json:"max_bytes"`
}

// errBatchStatus is a batched get the server answered with an error status.
var errBatchStatus = errors.New("journal: read: batch refused")

// readConn is the connection a get of the short reads' lane (short) or
// the long ones' goes over (Config.ShortReads).
func (j *Journal) readConn(short bool) *nats.Conn {
	if short && j.cfg.ShortReads != nil {
		return j.cfg.ShortReads
	}
	return j.nc
}

// getBatch asks the stream, over nc, for up to n messages of subject from
// seq on, at most maxBytes of them (the server sends at least one), and
// calls each with every message in order, its sequence, and how many of
// subject's messages follow it. It returns the number of messages got and
// nil at the batch's end (0: none is stored from seq on); on an error
// after some messages, those were given to each. No answer before ctx
// ends is errNoAnswer.
//
// The reply comes on an inbox of its own, not under the connection's
// request inbox (whose wildcard subscription would get every message a
// second time), subscribed with pending limits that fit the whole batch:
// none of it is dropped as a slow consumer's.
func (j *Journal) getBatch(ctx context.Context, nc *nats.Conn, subject string, seq uint64, n, maxBytes int, each func(m *nats.Msg, seq, pending uint64)) (int, error) {
	req, err := json.Marshal(batchRequest{Seq: seq, NextBy: subject, Batch: n, MaxBytes: maxBytes})
	if err != nil {
		return 0, fmt.Errorf("journal: read: %w", err)
	}
	inbox := nc.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, fmt.Errorf("journal: read: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The batch and its end-of-batch, in messages; in bytes, what the
	// server sends before it stops past maxBytes, and its headers.
	if err := sub.SetPendingLimits(n+1, 2*(maxBytes+int(nc.MaxPayload()))); err != nil {
		return 0, fmt.Errorf("journal: read: %w", err)
	}
	if err := nc.PublishRequest(j.direct, inbox, req); err != nil {
		return 0, fmt.Errorf("journal: read: %w", err)
	}
	got := 0
	for {
		m, err := sub.NextMsgWithContext(ctx)
		switch {
		case err != nil && got == 0 && ctx.Err() != nil:
			return 0, errNoAnswer
		case err != nil:
			return got, fmt.Errorf("journal: read: %w", err)
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			switch m.Header.Get("Status") {
			case "204", "404": // the batch's end; nothing (more) stored
				return got, nil
			default:
				return got, fmt.Errorf("%w: %s %s", errBatchStatus, m.Header.Get("Status"), m.Header.Get("Description"))
			}
		}
		s, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return got, fmt.Errorf("journal: read: a message without its sequence: %w", err)
		}
		pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
		got++
		each(m, s, pending)
	}
}

// directSubject is where the stream's direct gets are asked.
func directSubject(prefix, stream string) string {
	if prefix == "" {
		prefix = jetstream.DefaultAPIPrefix
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	return prefix + "DIRECT.GET." + stream
}
