package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/resume"
)

// costMetrics are the series of what generations billed and duplicates
// saved. Their model label is the price table's entry (a model name or
// pattern of the configuration), never a client's string.
type costMetrics struct {
	tokens *prometheus.CounterVec // by direction: prompt, completion
	cost   *prometheus.CounterVec // by model
	saved  *prometheus.CounterVec // by model
	guard  prometheus.Gauge       // 1 while the cost guard narrows retries
	guards *prometheus.CounterVec // cost guard switches, by to: narrowed, widened
}

func newCost(reg prometheus.Registerer) *costMetrics {
	c := &costMetrics{
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_tokens_total", Help: "Tokens the upstream reported for the generations this instance ran, once per generation (replays, attaches and resumes add none), by direction.",
		}, []string{"direction"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_cost_total", Help: "What the generations this instance ran cost by the price table, by price table model.",
		}, []string{"model"}),
		saved: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_cost_saved_total", Help: "What duplicates (attaches, replays, SDK retries) would have cost, by price table model.",
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
	}
	for _, to := range []string{"narrowed", "widened"} {
		c.guards.WithLabelValues(to)
	}
	reg.MustRegister(c.tokens, c.cost, c.saved, c.guard, c.guards)
	return c
}

// Billed counts one generation's usage (nil: unknown) and its cost, priced
// by the table entry entry (nil: no price known).
func (m *Metrics) Billed(u *resume.Usage, entry string, cost *float64) {
	if u != nil {
		m.costs.tokens.WithLabelValues("prompt").Add(float64(max(u.PromptTokens, 0)))
		m.costs.tokens.WithLabelValues("completion").Add(float64(max(u.CompletionTokens, 0)))
	}
	if cost != nil && entry != "" {
		m.costs.cost.WithLabelValues(entry).Add(max(*cost, 0))
	}
}

// Saved counts what duplicates of a generation priced by the table entry
// entry did not cost.
func (m *Metrics) Saved(entry string, cost float64) {
	if entry != "" {
		m.costs.saved.WithLabelValues(entry).Add(max(cost, 0))
	}
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
