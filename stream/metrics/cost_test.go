package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream/metrics"
)

// TestCostSeries: the tokens series are there from start-up; Billed adds a
// generation's usage and cost, Saved a duplicate's saving; an unknown
// usage, cost or price entry adds nothing; the families pass promlint.
func TestCostSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, func() journal.Stats { return journal.Stats{} })
	if n := series(t, reg)["reprise_tokens_total"]; n != 2 {
		t.Fatalf("reprise_tokens_total at start-up: %d series, want prompt and completion", n)
	}
	c := 0.25
	m.Billed(&resume.Usage{PromptTokens: 7, CompletionTokens: 11}, "gpt-*", &c)
	m.Billed(&resume.Usage{PromptTokens: 1, CompletionTokens: 1}, "", nil) // no price
	m.Billed(nil, "gpt-*", nil)
	m.Saved("gpt-*", 0.5)
	m.Saved("", 3)
	m.GuardSwitched(true)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			name := f.GetName()
			for _, l := range s.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			got[name] = s.GetCounter().GetValue()
		}
	}
	for name, want := range map[string]float64{
		"reprise_tokens_total{prompt}": 8, "reprise_tokens_total{completion}": 12,
		"reprise_cost_total{gpt-*}": 0.25, "reprise_cost_saved_total{gpt-*}": 0.5,
		"reprise_cost_guard_switches_total{narrowed}": 1, "reprise_cost_guard_switches_total{widened}": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v", err, problems)
	}
}

// series counts the series of each family reg gathers.
func series(tb testing.TB, reg prometheus.Gatherer) map[string]int {
	tb.Helper()
	fams, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	n := map[string]int{}
	for _, f := range fams {
		n[f.GetName()] = len(f.GetMetric())
	}
	return n
}
