package tests

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// metric returns the value of a counter or gauge series with the given label value.
func metric(tb testing.TB, e *env, name, label string) float64 {
	tb.Helper()
	return gathered(tb, e.reg, name, label)
}

// gathered returns the value of a counter or gauge series of reg with the
// given label value.
func gathered(tb testing.TB, reg prometheus.Gatherer, name, label string) float64 {
	tb.Helper()
	fams, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if label != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestMetrics: decisions, generations and journaled events are counted.
func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := chatBody(uniquePrompt(t, "[tokens=5]"), true)
	readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-metrics"), -1)
	waitState(t, e, "k-metrics", "completed")
	readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "k-metrics"), -1)
	readBody(t, do(t, "POST", e.URL+chatPath, chatBody("other", true), "Idempotency-Key", "k-metrics"))
	for _, c := range []struct {
		name, label string
		want        float64
	}{
		{"reprise_requests_total", "start", 1},
		{"reprise_requests_total", "replay", 1},
		{"reprise_requests_total", "mismatch", 1},
		{"reprise_generations_total", "completed", 1},
		{"reprise_events_journaled_total", "", 8}, // not the usage chunk no client asked for
		{"reprise_generations_running", "", 0},
		{"reprise_upstream_requests_total", "", 1},
		{"reprise_upstream_breaker_open", "", 0},
		{"reprise_journal_retries_total", "append", 0}, // a calm journal; failovers: journal.TestWriterSurvivesNodeLoss
		{"reprise_journal_retries_total", "read", 0},
		{"reprise_journal_retries_total", "record", 0},
	} {
		if got := metric(t, e, c.name, c.label); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.label, got, c.want)
		}
	}
}
