package engine

import (
	"context"
	"errors"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/resume"
)

// Holding. A generation's lease runs out by its owner's clock once no
// renewal reached the store for a whole lease (resume.Lease.Lapse): from
// then on another instance that sees the store may take the key over and
// generate it again, and the owner cannot tell whether it has until the
// store answers it. So the pump holds the generation before it journals
// the next event: it reads nothing more from the upstream (one that waits
// for its reader then stops generating once the connection's buffers are
// full), and shows nothing more to its readers. Once a
// renewal is stored it reads on — an outage that nobody could take over
// in loses nothing; once it finds the takeover it stops the upstream call
// at once (lost: owner_lost). A keyless generation nobody can be waiting
// for (Generation.Reachable: its client left, and its retry could not find
// it while the store was away, so it started the generation it needed) is
// cancelled instead of held.

// errUnreachable ends a generation whose lease ran out and that nobody can
// be waiting for (Generation.Reachable).
var errUnreachable = errors.New("engine: the generation's lease ran out, and nobody can be waiting for it")

// held returns at once while the generation's lease runs; once it ran out,
// it holds the generation until the lease is renewed. It returns
// resume.ErrFenced when the lease was lost meanwhile, errUnreachable for a
// generation nobody can be waiting for, or ctx's error.
func (p *pump) held(ctx context.Context) error {
	lease := p.g.Lease
	since, lapsed := lease.Lapse()
	if !lapsed {
		return nil
	}
	reachable := func() bool { return p.g.Reachable == nil || p.g.Reachable(since) }
	if !reachable() {
		p.log.Warn("generation cancelled: its lease ran out, and its client left before its retry could find it", "gen", p.g.Ref.Gen, "since", since)
		return errUnreachable
	}
	p.log.Warn("generation held: its lease ran out without a renewal; its upstream is read again once the lease is renewed", "gen", p.g.Ref.Gen, "since", since)
	if err := lease.Renewed(ctx); err != nil {
		return err
	}
	if !reachable() { // its client left while it was held
		p.log.Warn("generation cancelled: its lease ran out, and its client left before its retry could find it", "gen", p.g.Ref.Gen, "since", since)
		return errUnreachable
	}
	p.log.Info("generation's lease renewed; it reads on", "gen", p.g.Ref.Gen, "since", since)
	return nil
}

// heldError is the error a generation whose held returned err ends with;
// false when err is not held's own.
func heldError(err error) (apierr.Error, bool) {
	switch {
	case errors.Is(err, resume.ErrFenced):
		return apierr.New(apierr.OwnerLost), true
	case errors.Is(err, errUnreachable):
		return apierr.New(apierr.Cancelled), true
	}
	return apierr.Error{}, false
}
