package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Get returns a record's value and revision, or ErrNotFound.
func (j *Journal) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	e, err := j.kv.Get(ctx, id)
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
	rev, err := j.kv.Create(ctx, id, value)
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
	nrev, err := j.kv.Update(ctx, id, value, rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return 0, ErrConflict
	}
	if err != nil {
		return 0, fmt.Errorf("journal: update record: %w", err)
	}
	return nrev, nil
}
