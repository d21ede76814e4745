package journal

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// attemptPrefix starts the subjects of the attempt log, one per stream id,
// in the journal's stream: the attempts of a key are kept as long as its
// events (the stream's MaxAge, the keys' TTL).
const attemptPrefix = "reprise.att."

// maxAttempts bounds how many attempt records Attempts returns for one id.
const maxAttempts = 1000

// LogAttempt adds one record (opaque to the journal) to id's attempt log.
// It does not wait for JetStream's acknowledgement: the log is a record of
// what happened, never a reason to delay or fail a generation; a record
// lost in a NATS failover is lost.
func (j *Journal) LogAttempt(id string, record []byte) error {
	if _, err := j.js.PublishAsync(attemptPrefix+id, record); err != nil {
		return fmt.Errorf("journal: log attempt: %w", err)
	}
	return nil
}

// Attempts returns id's attempt log, oldest first (at most 1000 records);
// none when there is none.
func (j *Journal) Attempts(ctx context.Context, id string) ([][]byte, error) {
	var out [][]byte
	for seq := uint64(1); len(out) < maxAttempts; {
		m, err := j.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(attemptPrefix+id))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("journal: read attempts: %w", err)
		}
		out = append(out, m.Data)
		seq = m.Sequence + 1
	}
	return out, nil
}
