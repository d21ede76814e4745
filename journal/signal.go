package journal

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// cancelPrefix is the subject space of cancel requests: core NATS messages,
// not stored (a generation that ended meanwhile has nothing to cancel).
const cancelPrefix = "reprise.cancel."

// Cancel asks whoever runs ref's generation to cancel it: every instance
// that listens with OnCancel hears it. It returns once the NATS server has
// the message.
func (j *Journal) Cancel(ctx context.Context, ref Ref) error {
	if err := j.nc.Publish(cancelPrefix+ref.ID+"."+strconv.FormatUint(ref.Gen, 10), nil); err != nil {
		return fmt.Errorf("journal: cancel: %w", err)
	}
	if err := j.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("journal: cancel: %w", err)
	}
	return nil
}

// OnCancel calls f, in a goroutine of the NATS connection's, for every
// cancel any instance asks for, until stop.
func (j *Journal) OnCancel(f func(Ref)) (stop func(), err error) {
	sub, err := j.nc.Subscribe(cancelPrefix+">", func(m *nats.Msg) {
		rest := strings.TrimPrefix(m.Subject, cancelPrefix)
		id, gen, ok := strings.Cut(rest, ".")
		if n, err := strconv.ParseUint(gen, 10, 64); ok && err == nil {
			f(Ref{ID: id, Gen: n})
		}
	})
	if err != nil {
		return nil, fmt.Errorf("journal: listen for cancels: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// readingPrefix is the subject space of reading signals: core NATS
// messages an instance sends while it has readers of a key.
const readingPrefix = "reprise.reading."

// Reading tells every instance that listens with OnReading that a reader
// of id is connected here.
func (j *Journal) Reading(id string) error {
	if err := j.nc.Publish(readingPrefix+id, nil); err != nil {
		return fmt.Errorf("journal: reading: %w", err)
	}
	return nil
}

// OnReading calls f, in a goroutine of the NATS connection's, for every
// reading signal any instance sends, until stop.
func (j *Journal) OnReading(f func(id string)) (stop func(), err error) {
	sub, err := j.nc.Subscribe(readingPrefix+">", func(m *nats.Msg) {
		f(strings.TrimPrefix(m.Subject, readingPrefix))
	})
	if err != nil {
		return nil, fmt.Errorf("journal: listen for readers: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
