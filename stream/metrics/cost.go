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
	}
	for _, d := range []string{"prompt", "completion"} {
		c.tokens.WithLabelValues(d) // present from start-up
	}
	reg.MustRegister(c.tokens, c.cost, c.saved)
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
