package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// A full store. JetStream refuses a write when its store has reached the
// server's or the account's storage limit (max_file_store, or the embedded
// server's EmbeddedConfig.MaxStore): an answer, so nothing was stored, and
// asking again stores nothing either until space is freed (the TTL drops
// old messages, or an operator raises the limit). Such a write fails at
// once with ErrStoreFull instead of being tried again for AppendTimeout —
// a generation that cannot be stored ends now, with journal_failure — and
// the journal is not Ready until a write goes through again (Ready writes
// one).

// ErrStoreFull is what a write JetStream refused for want of storage
// answers (errors.Is). Its error also says Refused() true: a store's
// callers that know nothing of the journal (resume) stop trying by it.
var ErrStoreFull = errors.New("journal: the store is full")

// Storage limits' error codes (nats-server's errors.json).
const (
	codeAccountResources jetstream.ErrorCode = 10002           // JSAccountResourcesExceededErr
	codeInsufficient     jetstream.ErrorCode = 10023           // JSInsufficientResourcesErr
	codeMemoryResources  jetstream.ErrorCode = 10028           // JSMemoryResourcesExceededErr
	codeStorageResources jetstream.ErrorCode = 10047           // JSStorageResourcesExceededErr
	readyKey                                 = "reprise-ready" // the record Ready writes
)

// isFull reports whether err is JetStream refusing a write for want of
// storage.
func isFull(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case codeAccountResources, codeInsufficient, codeMemoryResources, codeStorageResources:
		return true
	}
	return false
}

// fullError is a write refused for want of storage.
type fullError struct{ err error }

func (e fullError) Error() string        { return ErrStoreFull.Error() + ": " + e.err.Error() }
func (e fullError) Unwrap() error        { return e.err }
func (e fullError) Is(target error) bool { return target == ErrStoreFull }

// Refused says that the write failed for good: trying again now is
// useless.
func (e fullError) Refused() bool { return true }

// wrote notes a write's outcome for Ready: a refusal for want of storage
// marks the store full (and is returned as ErrStoreFull), a write that
// went through clears it.
func (j *Journal) wrote(err error) error {
	switch {
	case err == nil:
		if j.full.Load() {
			j.full.Store(false)
		}
		return nil
	case isFull(err):
		j.full.Store(true)
		return fullError{err}
	}
	return err
}

// writable is Ready's write: a small record, stored as any record is (at
// the bucket's replicas, so a cluster that lost its quorum cannot store
// it); it answers ErrStoreFull while the store refuses it for want of
// space.
func (j *Journal) writable(ctx context.Context) error {
	_, err := j.kv.Put(ctx, readyKey, []byte("ok"))
	if err = j.wrote(err); err != nil {
		return fmt.Errorf("journal: not ready: %w", err)
	}
	return nil
}
