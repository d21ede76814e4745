package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
)

// costMetrics are the series of what generations billed and what the
// requests served without a generation saved. Their model label is the
// price table's entry (a model name or pattern of the configuration),
// never a client's string.
type costMetrics struct {
	tokens      *prometheus.CounterVec // by direction: prompt, completion
	estimated   *prometheus.CounterVec // the part of tokens estimated, by direction
	cost        *prometheus.CounterVec // by model
	savedGens   *prometheus.CounterVec // requests served without a generation, by how
	savedTokens *prometheus.CounterVec // by direction
	saved       *prometheus.CounterVec // by model
	calls       *prometheus.CounterVec // calls billed, by model
	savedCalls  *prometheus.CounterVec // calls saved, by model
	guard       prometheus.Gauge       // 1 while the cost guard narrows retries
	guards      *prometheus.CounterVec // cost guard switches, by to: narrowed, widened
}

func newCost(reg prometheus.Registerer) *costMetrics {
	c := &costMetrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_tokens_total", Help: "Tokens of the generations this instance ran, once per generation (replays, attaches and resumes add none), as the upstream reported them or, for a generation that failed or was cancelled before it did, as estimated; by direction.",
		}, []string{"direction"}),
		estimated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_tokens_estimated_total", Help: "The part of reprise_tokens_total of generations whose usage was estimated (in whole or in part), by direction.",
		}, []string{"direction"}),
		savedGens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_generations_saved_total", Help: "Requests served without the generation a naive client would have caused, by how: attach, replay, resume, retry.",
		}, []string{"how"}),
		savedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_tokens_saved_total", Help: "Tokens the requests served without a generation would have cost (the usage of the generation each was served), by direction.",
		}, []string{"direction"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_cost_total", Help: "What the generations this instance ran cost by the price table, by price table model.",
		}, []string{"model"}),
		saved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_cost_saved_total", Help: "What the requests served without a generation (attaches, replays, resumes, retries) would have cost, by price table model.",
		}, []string{"model"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_calls_billed_total", Help: "Calls billed: generations this instance ran that the upstream answered (completed, or failed after their stream began) of models the price table prices per call, by price table model.",
		}, []string{"model"}),
		savedCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_calls_saved_total", Help: "Calls the requests served without a generation (attaches, replays, resumes, retries) would have been billed, of models the price table prices per call, by price table model.",
		}, []string{"model"}),
		guard: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reprise_cost_guard_narrowed", Help: "1 while the cost guard narrows upstream retries to connect failures (spend over the hourly ratio or the daily budget).",
		}),
		guards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_cost_guard_switches_total", Help: "Times the cost guard narrowed or widened upstream retries, by what it switched to.",
		}, []string{"to"}),
	}
	for _, d := range []string{"prompt", "completion"} {
		c.tokens.WithLabelValues(d) // present from start-up
		c.estimated.WithLabelValues(d)
		c.savedTokens.WithLabelValues(d)
	}
	initLabels(c.savedGens, cost.SavedKinds()...)
	for _, to := range []string{"narrowed", "widened"} {
		c.guards.WithLabelValues(to)
	}
	reg.MustRegister(c.tokens, c.estimated, c.cost, c.savedGens, c.savedTokens, c.saved, c.calls, c.savedCalls, c.guard, c.guards)
	return c
}

var _ engine.CostMetrics = (*Metrics)(nil)

// Billed counts one generation's usage (nil: unknown) of basis (estimated
// usage is counted in reprise_tokens_estimated_total too), its cost,
// priced by the table entry entry (nil: no price known), and a call billed
// when call.
func (m *Metrics) Billed(u *cost.Usage, basis cost.Basis, entry string, spent *float64, call bool) {
	if u != nil {
		addTokens(m.costs.tokens, *u, 1)
		if basis == cost.Estimated {
			addTokens(m.costs.estimated, *u, 1)
		}
	}
	if spent != nil && entry != "" {
		m.costs.cost.WithLabelValues(entry).Add(max(*spent, 0))
	}
	if call && entry != "" {
		m.costs.calls.WithLabelValues(entry).Inc()
	}
}

// Saved counts the requests by served without a generation, each served
// one of usage u and cost, priced by the table entry entry (each nil:
// unknown), a call billed when call: reprise_generations_saved_total by
// kind, and what they did not cost in tokens, money and calls.
func (m *Metrics) Saved(by cost.SavedBy, u *cost.Usage, entry string, spent *float64, call bool) {
	for _, how := range cost.SavedKinds() {
		if n := by.Count(how); n > 0 {
			m.costs.savedGens.WithLabelValues(how).Add(float64(n))
		}
	}
	n := by.Total()
	if u != nil {
		addTokens(m.costs.savedTokens, *u, n)
	}
	if spent != nil && entry != "" {
		m.costs.saved.WithLabelValues(entry).Add(max(*spent, 0) * float64(n))
	}
	if call && entry != "" {
		m.costs.savedCalls.WithLabelValues(entry).Add(float64(n))
	}
}

// addTokens adds n times u to v's prompt and completion series.
func addTokens(v *prometheus.CounterVec, u cost.Usage, n uint64) {
	v.WithLabelValues("prompt").Add(float64(max(u.PromptTokens, 0)) * float64(n))
	v.WithLabelValues("completion").Add(float64(max(u.CompletionTokens, 0)) * float64(n))
}

// GuardSwitched counts the cost guard narrowing (or widening) retries.
func (m *Metrics) GuardSwitched(narrowed bool) {
	to, v := "widened", 0.0
	if narrowed {
		to, v = "narrowed", 1
	}
	m.costs.guard.Set(v)
	m.costs.guards.WithLabelValues(to).Inc()
}
