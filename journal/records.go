package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// recordRetry bounds how long a record operation waits out a NATS failover
// (a node the connection moves off, a bucket leader election).
const recordRetry = 10 * time.Second

// Get returns a record's value and revision; found is false when there is
// no record.
func (j *Journal) Get(ctx context.Context, id string) (value []byte, rev uint64, found bool, err error) {
	var e jetstream.KeyValueEntry
	err = retry(ctx, j.recordTries(), readRetryable, func(ctx context.Context) (err error) {
		e, err = j.kv.Get(ctx, id)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("journal: get record: %w", err)
	}
	return e.Value(), e.Revision(), true, nil
}

// Create stores a new record; created is false when one exists.
func (j *Journal) Create(ctx context.Context, id string, value []byte) (rev uint64, created bool, err error) {
	err = retry(ctx, j.recordTries(), writeRetryable, func(ctx context.Context) (err error) {
		rev, err = j.kv.Create(ctx, id, value)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, false, nil
	}
	if err = j.wrote(err); err != nil {
		return 0, false, fmt.Errorf("journal: create record: %w", err)
	}
	return rev, true, nil
}

// Update replaces a record if its revision is still rev; updated is false
// when it changed (or there is none).
func (j *Journal) Update(ctx context.Context, id string, value []byte, rev uint64) (nrev uint64, updated bool, err error) {
	err = retry(ctx, j.recordTries(), writeRetryable, func(ctx context.Context) (err error) {
		nrev, err = j.kv.Update(ctx, id, value, rev)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, false, nil
	}
	if err = j.wrote(err); err != nil {
		return 0, false, fmt.Errorf("journal: update record: %w", err)
	}
	return nrev, true, nil
}

func (j *Journal) recordTries() tries {
	return tries{budget: recordRetry, each: tryTimeout, count: &j.recordRetries}
}

// readRetryable: a read can be asked again after any failure to answer.
func readRetryable(err error) bool {
	return writeRetryable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// writeRetryable: a write only when nobody received it (no responders); a
// write that went unanswered may have been applied.
func writeRetryable(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// WatchRecords calls seen, from one goroutine and in the bucket's order,
// with every record the bucket holds (its id, value and revision), then
// with every change to one as it is stored (value nil: deleted or
// purged), until ctx ends or the watch does (its connection closed); the
// channel it returns is closed after seen's last call. It reads on the
// events' connection, not on Config.Records': every instance hears every
// record write, and the owners' lease renewals must not queue behind them.
// The watch is an ordered consumer, remade where it was after a lost
// message or a reconnect. A record removed by the TTL is not told of.
func (j *Journal) WatchRecords(ctx context.Context, seen func(id string, value []byte, rev uint64)) (<-chan struct{}, error) {
	w, err := j.watchKV.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("journal: watch records: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			// The watch's delivery blocks while its channel is full: it
			// ends (and closes the channel) once drained. The drain does
			// not hold done: a context that ends while the watch opens
			// may end its subscription before the watch hears of it, and
			// then nobody closes the channel (nats.go).
			_ = w.Stop()
			go func() {
				for range w.Updates() {
				}
			}()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					return
				case e == nil: // every record held at the start was told of
				case e.Operation() == jetstream.KeyValuePut:
					seen(e.Key(), e.Value(), e.Revision())
				default:
					seen(e.Key(), nil, e.Revision())
				}
			}
		}
	}()
	return done, nil
}
