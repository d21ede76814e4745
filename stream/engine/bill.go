package engine

import "github.com/reprise-dev/reprise/resume"

// price sets res's model and cost (when a price is known) and returns the
// price table entry that gave it. A generation that got an answer costs,
// a failed one too when its usage is known; one refused before any answer
// (no usage, not completed) costs nothing.
func (p *pump) price(res *resume.Result) string {
	res.Model = p.g.Model
	if p.e.cfg.Prices == nil || res.Usage == nil && res.State != resume.Completed {
		return ""
	}
	c, entry, ok := p.e.cfg.Prices.Cost(p.g.Model, res.Usage)
	if !ok {
		return ""
	}
	res.Cost = &c
	return entry
}

// bill reports what the generation billed, once per generation (never for
// a reader, an attach or a replay), and, when its result was recorded,
// what the duplicates that attached to it saved.
func (p *pump) bill(res resume.Result, entry string, recorded bool) {
	if res.Cost != nil && p.e.cfg.Spend != nil {
		p.e.cfg.Spend.Spent(*res.Cost)
	}
	m, ok := p.e.cfg.Metrics.(CostMetrics)
	if !ok || res.Usage == nil && res.Cost == nil {
		return
	}
	m.Billed(res.Usage, entry, res.Cost)
	if n := p.g.Lease.Settled(); recorded && n > 0 && res.Cost != nil {
		m.Saved(entry, *res.Cost*float64(n))
	}
}
