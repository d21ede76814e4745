package metrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
)

// TestCostSeries: the tokens series are there from start-up; Billed adds a
// generation's usage (estimated usage to the estimated series too), cost
// and call, Saved the requests served without a generation by kind, their
// tokens, cost and calls; an unknown usage, cost or price entry, or a
// generation that was no call, adds nothing; the families pass promlint.
func TestCostSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, func() journal.Stats { return journal.Stats{} })
	for fam, want := range map[string]int{"reprise_tokens_total": 2, "reprise_tokens_estimated_total": 2, "reprise_tokens_saved_total": 2, "reprise_generations_saved_total": 4} {
		if n := series(t, reg)[fam]; n != want {
			t.Fatalf("%s at start-up: %d series, want %d", fam, n, want)
		}
	}
	c := 0.25
	m.Billed(&cost.Usage{PromptTokens: 7, CompletionTokens: 11}, cost.Reported, "gpt-*", &c, false)
	m.Billed(&cost.Usage{PromptTokens: 1, CompletionTokens: 1}, cost.Reported, "", nil, false) // no price
	m.Billed(&cost.Usage{PromptTokens: 5, CompletionTokens: 3}, cost.Estimated, "", nil, false)
	m.Billed(nil, cost.Unknown, "gpt-*", nil, false)
	perCall := 0.05
	m.Billed(nil, cost.Unknown, "deepseek-*", &perCall, true) // priced per call
	m.Billed(&cost.Usage{PromptTokens: 1}, cost.Estimated, "deepseek-*", &perCall, true)
	m.Billed(nil, cost.Unknown, "", nil, true) // no entry: nothing
	half := 0.5
	m.Saved(cost.SavedBy{Attach: 1, Resume: 2}, &cost.Usage{PromptTokens: 2, CompletionTokens: 10}, "gpt-*", &half, false)
	m.Saved(cost.SavedBy{Replay: 1}, nil, "", nil, false)
	m.Saved(cost.SavedBy{Replay: 1, Retry: 2}, nil, "deepseek-*", &perCall, true)
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
		"reprise_tokens_total{prompt}": 14, "reprise_tokens_total{completion}": 15,
		"reprise_tokens_estimated_total{prompt}": 6, "reprise_tokens_estimated_total{completion}": 3,
		"reprise_cost_total{gpt-*}": 0.25, "reprise_cost_saved_total{gpt-*}": 1.5,
		"reprise_cost_total{deepseek-*}": 0.1, "reprise_cost_saved_total{deepseek-*}": 0.15000000000000002,
		"reprise_calls_billed_total{deepseek-*}": 2, "reprise_calls_saved_total{deepseek-*}": 3,
		"reprise_generations_saved_total{attach}": 1, "reprise_generations_saved_total{replay}": 2,
		"reprise_generations_saved_total{resume}": 2, "reprise_generations_saved_total{retry}": 2,
		"reprise_tokens_saved_total{prompt}": 6, "reprise_tokens_saved_total{completion}": 30,
		"reprise_cost_guard_switches_total{narrowed}": 1, "reprise_cost_guard_switches_total{widened}": 0,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
	for fam, want := range map[string]int{"reprise_calls_billed_total": 1, "reprise_calls_saved_total": 1} {
		if n := series(t, reg)[fam]; n != want {
			t.Errorf("%s: %d series, want %d (deepseek-* alone)", fam, n, want)
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
