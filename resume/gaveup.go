package resume

import (
	"errors"
	"sync"
)

// An owner that gave up on its generation without recording how it ended
// — its Finish failed (the store refused the write, or did not answer
// before Finish's context ended), or it abandoned the lease — leaves the
// record in progress under its name. Other instances judge it lapsed once
// its lease ran out. This instance knows at once: a request here is not
// attached to a generation nothing will write to again, but decides as
// for a lapsed one (the Salvager settles it; the key may generate again).

// maxGaveUp bounds the generations remembered as given up.
const maxGaveUp = 4096

// gaveUp is the generations this instance gave up on, by stream id: the
// attempt of the Begin that started each.
type gaveUp struct {
	mu  sync.Mutex
	ids map[string]string
}

func (g *gaveUp) add(id, attempt string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ids == nil {
		g.ids = map[string]string{}
	}
	if len(g.ids) >= maxGaveUp {
		for k := range g.ids { // a record this old has run out everywhere
			delete(g.ids, k)
			break
		}
	}
	g.ids[id] = attempt
}

// has reports whether rec, in progress under this instance's name, is a
// generation it gave up on.
func (g *gaveUp) has(id string, rec Record) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	a, ok := g.ids[id]
	return ok && rec.Attempt != "" && a == rec.Attempt
}

func (g *gaveUp) forget(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.ids, id)
}

// refused reports whether a store's write failed for good: its error says
// so (a Refused method answering true, as the journal's full store does),
// and trying it again before something changes stores nothing.
func refused(err error) bool {
	var r interface{ Refused() bool }
	return errors.As(err, &r) && r.Refused()
}
