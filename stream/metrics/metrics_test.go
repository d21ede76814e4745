package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream/metrics"
)

// TestSeriesLint: every series reprise exports passes promlint (names,
// units, help), and each report moves the series it names.
func TestSeriesLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, func() bool { return true }, func() journal.Stats { return journal.Stats{AppendRetries: 3} })
	m.Decision("start")
	done := m.Reader("tail")
	m.GenerationStarted()
	m.GenerationEnded(resume.Completed)
	m.EventJournaled()
	m.UpstreamRequests(2)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	want := map[string]float64{
		"reprise_requests_total": 1, "reprise_readers": 1, "reprise_generations_running": 0, "reprise_generations_total": 1,
		"reprise_events_journaled_total": 1, "reprise_upstream_requests_total": 2, "reprise_upstream_breaker_open": 1,
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			v := s.GetCounter().GetValue() + s.GetGauge().GetValue()
			if f.GetName() == "reprise_journal_retries_total" && s.GetLabel()[0].GetValue() != "append" {
				continue
			}
			got[f.GetName()] += v
		}
	}
	want["reprise_journal_retries_total"] = 3
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
	done()
}
