package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/classify"
)

// Upstream is the series of one upstream: it takes its call policy's
// attempts, retries and retried calls (a classify.Observer).
type Upstream struct {
	m         *Metrics
	name      string
	firstByte prometheus.Observer
}

// Upstream returns the series of the upstream named name, exporting its
// attempts at zero; the same name returns the same Upstream.
func (m *Metrics) Upstream(name string) *Upstream {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.upstreams[name]; ok {
		return u
	}
	u := &Upstream{m: m, name: name, firstByte: m.firstByte.WithLabelValues(name)}
	m.attempts.WithLabelValues(name, strconv.Itoa(200), classify.KindSuccess)
	m.upstreams[name] = u
	return u
}

// Policy is what the series read of an upstream's call policy at each
// scrape. classify.Policy implements it.
type Policy interface {
	BreakerOpen() bool
	BudgetUse() float64
}

// Watch exports p's breaker state and retry budget use as u's. Only the
// first call for an upstream counts.
func (u *Upstream) Watch(p Policy) {
	u.m.mu.Lock()
	defer u.m.mu.Unlock()
	if u.m.watched[u.name] {
		return
	}
	u.m.watched[u.name] = true
	labels := prometheus.Labels{"upstream": u.name}
	u.m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "reprise_upstream_breaker_open", Help: "1 while the upstream's circuit breaker refuses calls, by upstream.", ConstLabels: labels,
	}, func() float64 {
		if p.BreakerOpen() {
			return 1
		}
		return 0
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "reprise_upstream_retry_budget_used_ratio", Help: "Share of the upstream's retry budget taken over its window (1: no retry allowed), by upstream.", ConstLabels: labels,
	}, p.BudgetUse))
}

// Attempt counts one upstream request (classify.Observer).
func (u *Upstream) Attempt(status int, kind string, firstByte time.Duration) {
	u.m.attempts.WithLabelValues(u.name, strconv.Itoa(status), kind).Inc()
	if status != 0 {
		u.firstByte.Observe(firstByte.Seconds())
	}
}

// Retry counts a retry scheduled after a failure of reason
// (classify.Observer).
func (u *Upstream) Retry(reason string) { u.m.retries.WithLabelValues(reason).Inc() }

// Retried counts how a call that retried ended (classify.Observer).
func (u *Upstream) Retried(success bool) {
	result := "failure"
	if success {
		result = "success"
	}
	u.m.retried.WithLabelValues(result).Inc()
}

var _ classify.Observer = (*Upstream)(nil)
