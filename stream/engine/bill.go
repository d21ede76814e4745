package engine

import "github.com/reprise-dev/reprise/resume"

// price sets res's cost by the price table (when a price is known for its
// Model) and returns the price table entry that gave it. A generation that
// got an answer costs, a failed one too when its usage is known; one
// refused before any answer (no usage, not completed) costs nothing.
func (e *Engine) price(res *resume.Result) string {
	res.Cost = nil
	if e.cfg.Prices == nil || res.Usage == nil && res.State != resume.Completed {
		return ""
	}
	c, entry, ok := e.cfg.Prices.Cost(res.Model, res.Usage)
	if !ok {
		return ""
	}
	res.Cost = &c
	return entry
}

// price sets res's model and cost (Engine.price).
func (p *pump) price(res *resume.Result) string {
	res.Model = p.g.Model
	return p.e.price(res)
}

// bill reports what a generation billed, once per generation (never for a
// reader, an attach or a replay): res's usage (reported or estimated) and
// cost, priced by entry (Engine.price), and the requests served from it
// while it ran that its completion made savings (saved, by kind; none when
// its result was not recorded), at its usage and cost.
func (e *Engine) bill(res resume.Result, entry string, saved resume.SavedBy) {
	if res.Cost != nil && e.cfg.Spend != nil {
		e.cfg.Spend.Spent(*res.Cost)
	}
	m, ok := e.cfg.Metrics.(CostMetrics)
	if !ok {
		return
	}
	if res.Usage != nil || res.Cost != nil {
		basis := res.Basis
		if basis == "" {
			basis = resume.Reported
		}
		m.Billed(res.Usage, basis, entry, res.Cost)
	}
	if saved.Total() > 0 {
		m.Saved(saved, res.Usage, entry, res.Cost)
	}
}

// bill reports what the generation billed (Engine.bill) and, when its
// result was recorded, the requests served from it that it saved.
func (p *pump) bill(res resume.Result, entry string, recorded bool) {
	var saved resume.SavedBy
	if recorded {
		saved = p.g.Lease.Settled()
	}
	p.e.bill(res, entry, saved)
}
