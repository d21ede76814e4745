package stream

import "github.com/prometheus/client_golang/prometheus"

// metrics are the proxy's Prometheus series.
type metrics struct {
	decisions   *prometheus.CounterVec // by decision: start, attach, replay, mismatch
	generations *prometheus.CounterVec // finished generations by state
	events      prometheus.Counter     // events journaled
	running     prometheus.Gauge       // generations running on this instance
	readers     *prometheus.GaugeVec   // connected readers by source: tail, journal
}

func newMetrics(reg prometheus.Registerer) *metrics {
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
	}
	reg.MustRegister(m.decisions, m.generations, m.events, m.running, m.readers)
	return m
}
