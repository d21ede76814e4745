package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// keyMetrics are the series of each proxy key (static auth). Their key
// label is a key's name from the proxy keys file (or the name derived for
// a bare key), or "other" (auth.Other): never a client's string, so the
// label's values are bounded by the configuration.
type keyMetrics struct {
	requests *prometheus.CounterVec // by key and status class
	cost     *prometheus.CounterVec // by key
	spent    *prometheus.GaugeVec   // spend in the budget's window, fleet-wide, by key
	budget   *prometheus.GaugeVec   // the budget, by key
	refused  *prometheus.CounterVec // new generations refused over budget, by key
}

func newKeys(reg prometheus.Registerer) *keyMetrics {
	k := &keyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_key_requests_total", Help: "Requests by proxy key (its name; other for none configured) and status class (2xx, 4xx, 5xx …).",
		}, []string{"key", "class"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_key_cost_total", Help: "What the generations this instance ran cost by the price table, by proxy key.",
		}, []string{"key"}),
		spent: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reprise_key_budget_spent", Help: "What a proxy key with a budget spent in the budget's current window, the whole fleet's generations, as this instance last learnt it.",
		}, []string{"key"}),
		budget: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reprise_key_budget", Help: "A proxy key's budget per window (its period: hour, day or month).",
		}, []string{"key", "period"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_key_budget_refused_total", Help: "New generations refused with 429 budget_exceeded, by proxy key.",
		}, []string{"key"}),
	}
	reg.MustRegister(k.requests, k.cost, k.spent, k.budget, k.refused)
	return k
}

// KeyRequest counts a request of the proxy key labelled key answered with
// status.
func (m *Metrics) KeyRequest(key string, status int) {
	if m == nil {
		return
	}
	m.keys.requests.WithLabelValues(key, strconv.Itoa(status/100)+"xx").Inc()
}

// KeyCost adds what a generation of the proxy key labelled key cost.
func (m *Metrics) KeyCost(key string, cost float64) {
	if m == nil {
		return
	}
	m.keys.cost.WithLabelValues(key).Add(cost)
}

// KeyBudget sets what the proxy key labelled key spent in its budget's
// window and its budget (limit per period).
func (m *Metrics) KeyBudget(key, period string, limit, spent float64) {
	if m == nil {
		return
	}
	m.keys.spent.WithLabelValues(key).Set(spent)
	m.keys.budget.WithLabelValues(key, period).Set(limit)
}

// KeyRefused counts a new generation of the proxy key labelled key
// refused over its budget.
func (m *Metrics) KeyRefused(key string) {
	if m == nil {
		return
	}
	m.keys.refused.WithLabelValues(key).Inc()
}

// ForgetKey drops the series of a proxy key that is no longer configured.
func (m *Metrics) ForgetKey(key string) {
	if m == nil {
		return
	}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{m.keys.requests, m.keys.cost, m.keys.spent, m.keys.budget, m.keys.refused} {
		v.DeletePartialMatch(prometheus.Labels{"key": key})
	}
}
