package metrics

import "github.com/prometheus/client_golang/prometheus"

// keylessMetrics count what keyless retry recognition sees.
type keylessMetrics struct {
	left prometheus.Counter
}

func newKeyless(reg prometheus.Registerer) *keylessMetrics {
	k := &keylessMetrics{
		left: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_keyless_left_total",
			Help: "Requests without a key whose client left before its result: their key is kept for their retry.",
		}),
	}
	reg.MustRegister(k.left)
	return k
}

// KeylessLeft counts a keyless request whose client left before its result,
// once its key is kept for its retry.
func (m *Metrics) KeylessLeft() { m.keyless.left.Inc() }
