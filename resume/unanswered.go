package resume

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
)

// Unanswered is the Error of a record whose generation was started by a
// write that got no answer: its request was refused (the store was away),
// and nothing runs the generation the write recorded when it was applied
// late.
const Unanswered = "journal_unavailable"

// withdrawFor bounds how long a write that got no answer is watched for.
const withdrawFor = 2 * time.Minute

// A write that starts a generation (a record's create, or its update to a
// new generation) may get no answer — a NATS stall, a failover — and be
// applied all the same, when the store answers again. Begin then has
// answered an error (its caller got 503), and nobody runs the generation
// the record names: its readers would wait for a first event nobody
// writes, then for the lease to lapse — a lapse that attaches, which
// write the record, keep putting off. So such a write is watched once
// Begin gave up on it: when the store answers, a record it applied is
// failed at once (Unanswered), and the key's next request generates.

// withdrawLater fails id's record if the write of attempt, which got no
// answer, turns out applied; in the background, for at most withdrawFor.
func (m *Manager) withdrawLater(id, attempt string) {
	if m.watched.Add(1) > maxWatched {
		m.watched.Add(-1)
		return
	}
	go func() {
		defer m.watched.Add(-1)
		ctx, cancel := context.WithTimeout(context.Background(), withdrawFor)
		defer cancel()
		rp := retrypolicy.NewBuilder[any]().
			HandleIf(func(_ any, err error) bool { return err != nil }).
			WithBackoff(100*time.Millisecond, 2*time.Second).
			WithMaxAttempts(-1).
			Build()
		_ = failsafe.With(rp).WithContext(ctx).Run(func() error { return m.withdraw(ctx, id, attempt) })
	}()
}

// errMoved: the record changed while it was being withdrawn; look again.
var errMoved = errors.New("resume: record changed meanwhile")

// errNotYet: the write is not applied, as far as the store says now.
var errNotYet = errors.New("resume: write not applied yet")

// maxWatched bounds the writes watched at once: past it (a long outage
// refusing many requests), a write applied late is left to its lease.
const maxWatched = 1024

// withdraw fails id's record if it is still the generation attempt wrote.
func (m *Manager) withdraw(ctx context.Context, id, attempt string) error {
	val, rev, found, err := m.cfg.Store.Get(ctx, id)
	switch {
	case err != nil:
		return err
	case !found:
		// Not applied yet: a write held on a connection the client gave
		// up (it reconnected) may still arrive after a later one's answer.
		return errNotYet
	}
	rec, err := decode(val)
	if err != nil || rec.Attempt != attempt || rec.State != InProgress {
		return nil // another request's, or already settled
	}
	rec.State, rec.Error, rec.Owner, rec.LeaseUntil, rec.UpdatedAt = Failed, Unanswered, "", time.Time{}, m.cfg.Now()
	rec.Caller = nil
	if _, ok, err := m.cfg.Store.Update(ctx, id, rec.encode(), rev); err != nil {
		return err
	} else if !ok {
		return errMoved
	}
	m.contact.forget(id)
	return nil
}
