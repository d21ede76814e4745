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

// Get returns a record's value and revision, or ErrNotFound.
func (j *Journal) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	var e jetstream.KeyValueEntry
	err := retry(ctx, j.recordTries(), readRetryable, func(ctx context.Context) (err error) {
		e, err = j.kv.Get(ctx, id)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, 0, ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("journal: get record: %w", err)
	}
	return e.Value(), e.Revision(), nil
}

// Create stores a new record; ErrConflict if it exists.
func (j *Journal) Create(ctx context.Context, id string, value []byte) (uint64, error) {
	var rev uint64
	err := retry(ctx, j.recordTries(), writeRetryable, func(ctx context.Context) (err error) {
		rev, err = j.kv.Create(ctx, id, value)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("journal: create record: %w", err)
	}
	return rev, nil
}

// Update replaces a record if its revision is still rev; ErrConflict if not.
func (j *Journal) Update(ctx context.Context, id string, value []byte, rev uint64) (uint64, error) {
	var nrev uint64
	err := retry(ctx, j.recordTries(), writeRetryable, func(ctx context.Context) (err error) {
		nrev, err = j.kv.Update(ctx, id, value, rev)
		return err
	})
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("journal: update record: %w", err)
	}
	return nrev, nil
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
