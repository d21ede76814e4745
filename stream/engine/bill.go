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
// reader, an attach or a replay): res's usage and cost, priced by entry
// (Engine.price), and what the saved duplicates that attached to it did not
// cost (0 when its result was not recorded).
func (e *Engine) bill(res resume.Result, entry string, saved uint64) {
	if res.Cost != nil && e.cfg.Spend != nil {
		e.cfg.Spend.Spent(*res.Cost)
	}
	m, ok := e.cfg.Metrics.(CostMetrics)
	if !ok || res.Usage == nil && res.Cost == nil {
		return
	}
	m.Billed(res.Usage, entry, res.Cost)
	if saved > 0 && res.Cost != nil {
		m.Saved(entry, *res.Cost*float64(saved))
	}
}

// bill reports what the generation billed (Engine.bill) and, when its
// result was recorded, what the duplicates that attached to it saved.
func (p *pump) bill(res resume.Result, entry string, recorded bool) {
	var saved uint64
	if recorded {
		saved = p.g.Lease.Settled()
	}
	p.e.bill(res, entry, saved)
}
