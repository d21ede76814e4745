package metrics

import "github.com/prometheus/client_golang/prometheus"

// lostMetrics count the generations of owners that were lost (died, or cut
// off past their lease) that this instance settled.
type lostMetrics struct {
	settled *prometheus.CounterVec
}

func newLost(reg prometheus.Registerer) *lostMetrics {
	l := &lostMetrics{
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_generations_lost_total",
			Help: "Generations whose instance was lost (it died, or was cut off past its lease) that this instance settled, by state: failed (owner_lost: no result) or completed (its result was stored whole).",
		}, []string{"state"}),
	}
	for _, s := range []string{"failed", "completed"} {
		l.settled.WithLabelValues(s)
	}
	reg.MustRegister(l.settled)
	return l
}

// GenerationLost counts a lost owner's generation settled as state
// (resume.Failed or resume.Completed).
func (m *Metrics) GenerationLost(state string) { m.lost.settled.WithLabelValues(state).Inc() }
