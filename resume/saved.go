package resume

import (
	"context"
	"fmt"
)

// Duplicate counts a request that attached to or replayed generation gen of
// the key id instead of calling the upstream (an SDK retry does one or the
// other). A duplicate of a running generation is counted in
// Record.Attached, and moved into Record.Saved with the generation's cost
// when it ends (Lease.Settled); one of a completed generation goes into
// Saved at once, and saved is the cost it added (nil: none known). A
// generation that failed or was replaced meanwhile spared nothing: it is
// not counted. The record written is returned.
func (m *Manager) Duplicate(ctx context.Context, id string, gen uint64) (rec Record, saved *float64, err error) {
	for range maxCAS {
		val, rev, found, err := m.cfg.Store.Get(ctx, id)
		if err != nil {
			return Record{}, nil, err
		}
		if !found {
			return Record{}, nil, ErrNotFound
		}
		rec, err := decode(val)
		if err != nil {
			return Record{}, nil, fmt.Errorf("resume: corrupt record: %w", err)
		}
		saved = nil
		switch {
		case rec.Generation != gen:
			return rec, nil, nil
		case rec.State == InProgress:
			rec.Attached++
		case rec.State == Completed:
			rec.save(1, rec.Cost)
			saved = rec.Cost
		default:
			return rec, nil, nil
		}
		if _, ok, err := m.cfg.Store.Update(ctx, id, rec.encode(), rev); err != nil {
			return Record{}, nil, err
		} else if ok {
			return rec, saved, nil
		}
	}
	return Record{}, nil, ErrContended
}
