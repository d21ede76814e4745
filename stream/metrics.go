package stream

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/journal"
)

// metrics are the proxy's Prometheus series.
type metrics struct {
	decisions   *prometheus.CounterVec // by decision: start, attach, replay, mismatch
	generations *prometheus.CounterVec // finished generations by state
	events      prometheus.Counter     // events journaled
	running     prometheus.Gauge       // generations running on this instance
	readers     *prometheus.GaugeVec   // connected readers by source: tail, journal
	attempts    prometheus.Counter     // upstream requests made
	breakerOpen prometheus.GaugeFunc   // 1 while the breaker refuses calls
	retries     []prometheus.Collector // journal operations tried again, by op
}

func newMetrics(reg prometheus.Registerer, breakerOpen func() bool, stats func() journal.Stats) *metrics {
	m := &metrics{
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
		breakerOpen: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "reprise_upstream_breaker_open", Help: "1 while the upstream's circuit breaker refuses calls.",
		}, func() float64 {
			if breakerOpen() {
				return 1
			}
			return 0
		}),
	}
	for op, n := range map[string]func(journal.Stats) uint64{
		"append": func(s journal.Stats) uint64 { return s.AppendRetries },
		"read":   func(s journal.Stats) uint64 { return s.ReadRetries },
		"record": func(s journal.Stats) uint64 { return s.RecordRetries },
	} {
		m.retries = append(m.retries, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "reprise_journal_retries_total",
			Help:        "JetStream operations tried again after no answer (NATS failovers, leader elections), by operation.",
			ConstLabels: prometheus.Labels{"op": op},
		}, func() float64 { return float64(n(stats())) }))
	}
	reg.MustRegister(m.decisions, m.generations, m.events, m.running, m.readers, m.attempts, m.breakerOpen)
	reg.MustRegister(m.retries...)
	return m
}
