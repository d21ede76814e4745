package resume

import (
	"context"
	"fmt"

	"github.com/reprise-dev/reprise/internal/cost"
)

// Save counts a request of kind how (one of SavedKinds) that was served
// generation gen of the key id without calling the upstream. One served a
// running generation is counted in Record.Attached (AttachedBy for its
// kind), and moved into Record.Saved with the generation's usage and cost
// when it completes (Lease.Finish); one served a completed generation
// goes into Saved at once, and now is true: the record returned holds the
// usage, cost, call and model it saved. A generation that failed, was cancelled
// or was replaced meanwhile spared nothing: the request is not counted.
// The record written (or read, when nothing was counted) is returned.
func (m *Manager) Save(ctx context.Context, id string, gen uint64, how string) (rec Record, now bool, err error) {
	one, ok := cost.SavedOne(how)
	if !ok {
		return Record{}, false, fmt.Errorf("%w: saving kind %q", ErrInvalidOption, how)
	}
	for range maxCAS {
		val, rev, found, err := m.cfg.Store.Get(ctx, id)
		if err != nil {
			return Record{}, false, err
		}
		if !found {
			return Record{}, false, ErrNotFound
		}
		rec, err := decode(val)
		if err != nil {
			return Record{}, false, fmt.Errorf("resume: corrupt record: %w", err)
		}
		switch {
		case rec.Generation != gen:
			return rec, false, nil
		case rec.State == InProgress:
			rec.attach(one)
		case rec.State == Completed:
			rec.saveBy(one, rec.Usage, rec.Cost, rec.Call)
		default:
			return rec, false, nil
		}
		if _, ok, err := m.cfg.Store.Update(ctx, id, rec.encode(), rev); err != nil {
			return Record{}, false, err
		} else if ok {
			return rec, rec.State == Completed, nil
		}
	}
	return Record{}, false, ErrContended
}
