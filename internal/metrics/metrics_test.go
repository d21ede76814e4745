package metrics_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
)

type policy struct{}

func (policy) BreakerOpen() bool  { return true }
func (policy) BudgetUse() float64 { return 0.25 }

func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
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
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// value is the value of the series of fam whose labels include labels
// (name=value pairs); a histogram's is its count.
func value(t *testing.T, fams map[string]*dto.MetricFamily, fam string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[fam]
	if !ok {
		t.Fatalf("no family %s", fam)
	}
	sum, found := 0.0, false
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if !match {
			continue
		}
		found = true
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
	}
	if !found {
		t.Fatalf("no series %s%v", fam, labels)
	}
	return sum
}

// TestFamiliesAtStart: right after New (and an upstream watched) every
// family is exported, with each known label value at zero, and passes
// promlint.
func TestFamiliesAtStart(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, func() journal.Stats { return journal.Stats{} })
	m.Upstream("up").Watch(policy{})
	fams := gather(t, reg)
	for _, name := range metrics.Families() {
		if _, ok := fams[name]; !ok {
			t.Errorf("family %s missing at start-up", name)
		}
	}
	for name := range fams {
		if !slices.Contains(metrics.Families(), name) {
			t.Errorf("family %s exported but not listed", name)
		}
	}
	zero := map[string][]string{
		"reprise_generations_total":           engine.Outcomes(),
		"reprise_duplicates_suppressed_total": {"attach", "replay", "retry"},
		"reprise_generations_saved_total":     {"attach", "replay", "resume", "retry"},
		"reprise_resumes_total":               {"sse", "websocket", "range"},
		"reprise_upstream_retries_total":      classify.RetryReasons(),
		"reprise_retry_outcomes_total":        {"success", "failure"},
	}
	labelOf := map[string]string{
		"reprise_generations_total": "outcome", "reprise_duplicates_suppressed_total": "how", "reprise_resumes_total": "transport",
		"reprise_generations_saved_total": "how",
		"reprise_upstream_retries_total":  "reason", "reprise_retry_outcomes_total": "result",
	}
	for fam, values := range zero {
		for _, v := range values {
			if got := value(t, fams, fam, labelOf[fam], v); got != 0 {
				t.Errorf("%s{%s=%q} = %v at start-up", fam, labelOf[fam], v, got)
			}
		}
	}
	if got := value(t, fams, "reprise_upstream_attempts_total", "upstream", "up", "status", "200", "kind", "success"); got != 0 {
		t.Errorf("attempts = %v at start-up", got)
	}
}

// TestReports: each report moves the series it names, and only those.
func TestReports(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, func() journal.Stats { return journal.Stats{AppendRetries: 3, AppendErrors: 2} })
	up := m.Upstream("up")
	up.Watch(policy{})
	if m.Upstream("up") != up {
		t.Error("Upstream of the same name is another")
	}
	up.Watch(policy{}) // a second Watch registers nothing (no panic)
	m.Decision("start")
	m.Duplicate(metrics.HowAttach)
	m.Duplicate(metrics.HowReplay)
	m.Duplicate(metrics.HowReplay)
	m.Resume(metrics.TransportWebSocket)
	done := m.Reader("tail")
	m.GenerationStarted()
	m.GenerationStarted()
	m.GenerationEnded(engine.OutcomeCompleted)
	m.GenerationEnded(engine.OutcomeInterrupted)
	m.EventJournaled()
	m.UpstreamRequests(2)
	m.FirstToken(time.Second)
	m.ResumeFirstEvent(time.Millisecond)
	m.JournalAppend(time.Millisecond)
	m.JournalAppend(time.Millisecond)
	var obs classify.Observer = up
	obs.Attempt(503, classify.KindRetryable, 10*time.Millisecond)
	obs.Retry(classify.ReasonOverloaded)
	obs.Attempt(200, classify.KindSuccess, 20*time.Millisecond)
	obs.Attempt(0, classify.KindRetryable, 0)
	obs.Retried(true)
	fams := gather(t, reg)
	tests := []struct {
		fam    string
		labels []string
		want   float64
	}{
		{"reprise_requests_total", []string{"decision", "start"}, 1},
		{"reprise_requests_total", nil, 1},
		{"reprise_duplicates_suppressed_total", []string{"how", "attach"}, 1},
		{"reprise_duplicates_suppressed_total", []string{"how", "replay"}, 2},
		{"reprise_duplicates_suppressed_total", []string{"how", "retry"}, 0},
		{"reprise_resumes_total", []string{"transport", "websocket"}, 1},
		{"reprise_resumes_total", nil, 1},
		{"reprise_stream_readers", []string{"source", "tail"}, 1},
		{"reprise_stream_readers", []string{"source", "journal"}, 0},
		{"reprise_generations_running", nil, 0},
		{"reprise_generations_total", []string{"outcome", "completed"}, 1},
		{"reprise_generations_total", []string{"outcome", "interrupted"}, 1},
		{"reprise_generations_total", nil, 2},
		{"reprise_events_journaled_total", nil, 1},
		{"reprise_upstream_requests_total", nil, 2},
		{"reprise_client_first_token_seconds", nil, 1},
		{"reprise_resume_first_event_seconds", nil, 1},
		{"reprise_journal_append_seconds", nil, 2},
		{"reprise_journal_retries_total", []string{"op", "append"}, 3},
		{"reprise_journal_errors_total", []string{"op", "append"}, 2},
		{"reprise_upstream_breaker_open", []string{"upstream", "up"}, 1},
		{"reprise_upstream_retry_budget_used_ratio", []string{"upstream", "up"}, 0.25},
		{"reprise_upstream_attempts_total", []string{"upstream", "up", "status", "503", "kind", "retryable"}, 1},
		{"reprise_upstream_attempts_total", []string{"upstream", "up", "status", "200", "kind", "success"}, 1},
		{"reprise_upstream_attempts_total", []string{"status", "0"}, 1},
		{"reprise_upstream_attempts_total", nil, 3},
		{"reprise_upstream_first_byte_seconds", []string{"upstream", "up"}, 2}, // attempts with an answer
		{"reprise_upstream_retries_total", []string{"reason", "overloaded"}, 1},
		{"reprise_upstream_retries_total", nil, 1},
		{"reprise_retry_outcomes_total", []string{"result", "success"}, 1},
		{"reprise_retry_outcomes_total", []string{"result", "failure"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.fam+strings.Join(tt.labels, ","), func(t *testing.T) {
			if got := value(t, fams, tt.fam, tt.labels...); got != tt.want {
				t.Errorf("%s%v = %v, want %v", tt.fam, tt.labels, got, tt.want)
			}
		})
	}
	done()
	if got := value(t, gather(t, reg), "reprise_stream_readers", "source", "tail"); got != 0 {
		t.Errorf("readers after done = %v", got)
	}
}
