// Package metrics holds reprise's Prometheus series: what requests were
// allowed to do, generations and their events, upstream requests, readers,
// the breaker and the journal's retries.
//
// It only counts what the HTTP surface and the engine report to it; it
// decides nothing and must not be read back by the proxy's logic.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Metrics are the proxy's series, registered once per proxy.
type Metrics struct {
	decisions   *prometheus.CounterVec // by decision: start, attach, replay, mismatch, sdk_retry
	generations *prometheus.CounterVec // finished generations by state
	events      prometheus.Counter     // events journaled
	running     prometheus.Gauge       // generations running on this instance
	readers     *prometheus.GaugeVec   // connected readers by source: tail, journal
	attempts    prometheus.Counter     // upstream requests made
	costs       *costMetrics           // tokens, cost and cost saved: cost.go
}

// New registers the series on reg. breakerOpen and stats are read at each
// scrape.
func New(reg prometheus.Registerer, breakerOpen func() bool, stats func() journal.Stats) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_requests_total", Help: "Requests with a key, by what they were allowed to do.",
		}, []string{"decision"}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_generations_total", Help: "Upstream generations finished on this instance, by state.",
		}, []string{"state"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_events_journaled_total", Help: "Upstream events acknowledged by JetStream.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reprise_generations_running", Help: "Generations this instance is running now.",
		}),
		readers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reprise_readers", Help: "Connected stream readers, by where they read from.",
		}, []string{"source"}),
		attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_upstream_requests_total", Help: "Requests sent to the upstream, retries included.",
		}),
	}
	breaker := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "reprise_upstream_breaker_open", Help: "1 while the upstream's circuit breaker refuses calls.",
	}, func() float64 {
		if breakerOpen() {
			return 1
		}
		return 0
	})
	reg.MustRegister(m.decisions, m.generations, m.events, m.running, m.readers, m.attempts, breaker)
	m.costs = newCost(reg)
	for op, n := range map[string]func(journal.Stats) uint64{
		"append": func(s journal.Stats) uint64 { return s.AppendRetries },
		"read":   func(s journal.Stats) uint64 { return s.ReadRetries },
		"record": func(s journal.Stats) uint64 { return s.RecordRetries },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "reprise_journal_retries_total",
			Help:        "JetStream operations tried again after no answer (NATS failovers, leader elections), by operation.",
			ConstLabels: prometheus.Labels{"op": op},
		}, func() float64 { return float64(n(stats())) }))
	}
	return m
}

// Decision counts a request with a key by what it was allowed to do.
func (m *Metrics) Decision(decision string) { m.decisions.WithLabelValues(decision).Inc() }

// Reader counts a connected reader of source (tail or journal) until done
// is called.
func (m *Metrics) Reader(source string) (done func()) {
	g := m.readers.WithLabelValues(source)
	g.Inc()
	return g.Dec
}

// GenerationStarted counts a generation this instance runs now.
func (m *Metrics) GenerationStarted() { m.running.Inc() }

// GenerationEnded counts a generation that finished in state.
func (m *Metrics) GenerationEnded(state resume.State) {
	m.running.Dec()
	m.generations.WithLabelValues(string(state)).Inc()
}

// EventJournaled counts an upstream event JetStream acknowledged.
func (m *Metrics) EventJournaled() { m.events.Inc() }

// UpstreamRequests counts requests sent to the upstream.
func (m *Metrics) UpstreamRequests(n int) { m.attempts.Add(float64(n)) }
