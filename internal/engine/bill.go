package engine

import (
	"cmp"
	"context"
	"log/slog"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/resume"
)

// price sets res's cost by the price table (when a price is known for its
// Model) and Call (when that price is per call), and returns the price
// table entry that gave them. A generation the upstream answered costs and
// is a call: a completed one, and a failed or cancelled one whose usage is
// known (reported or estimated: the upstream began its stream). One
// refused before any answer (no usage, not completed) costs nothing and is
// no call.
func (e *Engine) price(res *resume.Result) string {
	res.Cost, res.Call = nil, false
	if e.cfg.Prices == nil || res.Usage == nil && res.State != resume.Completed {
		return ""
	}
	p, entry, ok := e.cfg.Prices.Lookup(res.Model)
	if !ok {
		return ""
	}
	res.Call = p.PerCall > 0
	if c, ok := p.Cost(res.Usage); ok {
		res.Cost = &c
	}
	return entry
}

// price sets res's model and cost (Engine.price).
func (p *pump) price(res *resume.Result) string {
	res.Model = p.g.Model
	return p.e.price(res)
}

// bill reports what a generation billed, once per generation (never for a
// reader, an attach or a replay): res's usage (reported or estimated),
// cost and call, priced by entry (Engine.price), and the requests served from it
// while it ran that its completion made savings (saved, by kind; none when
// its result was not recorded), at its usage and cost.
// It logs one line of it, with key (the generation's key), its tenant
// (tenantHash, its resume.TenantHash) and its proxy key's name.
func (e *Engine) bill(res resume.Result, entry, key, tenantHash string, saved cost.SavedBy) {
	if (res.Usage != nil || res.Cost != nil) && e.cfg.Logger.Enabled(context.Background(), slog.LevelInfo) {
		attrs := []any{"key", key, "tenant", tenantHash}
		if e.cfg.KeyName != nil {
			if name := e.cfg.KeyName(tenantHash); name != "" {
				attrs = append(attrs, "key_name", name)
			}
		}
		attrs = append(attrs, "model", res.Model, "state", res.State)
		if res.Usage != nil {
			attrs = append(attrs, "prompt_tokens", res.Usage.PromptTokens, "completion_tokens", res.Usage.CompletionTokens, "usage_basis", cmp.Or(res.Basis, cost.Reported))
		}
		if res.Cost != nil {
			attrs = append(attrs, "cost", *res.Cost)
		}
		e.cfg.Logger.Info("generation billed", attrs...)
	}
	if res.Cost != nil && e.cfg.Spend != nil {
		e.cfg.Spend.Spent(*res.Cost)
	}
	if res.Cost != nil && e.cfg.KeySpend != nil {
		e.cfg.KeySpend.KeySpent(tenantHash, *res.Cost)
	}
	m, ok := e.cfg.Metrics.(CostMetrics)
	if !ok {
		return
	}
	if res.Usage != nil || res.Cost != nil || res.Call {
		basis := res.Basis
		if basis == "" {
			basis = cost.Reported
		}
		m.Billed(res.Usage, basis, entry, res.Cost, res.Call)
	}
	if saved.Total() > 0 {
		m.Saved(saved, res.Usage, entry, res.Cost, res.Call)
	}
}

// bill reports what the generation billed (Engine.bill) and, when its
// result was recorded, the requests served from it that it saved.
func (p *pump) bill(res resume.Result, entry string, recorded bool) {
	var saved cost.SavedBy
	if recorded {
		saved = p.g.Lease.Settled()
	}
	p.e.bill(res, entry, p.g.Key, p.tenant, saved)
}
