package telemetry

import (
	"context"
	"errors"
	"testing"
)

func TestSignals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		env             map[string]string
		metrics, traces bool
	}{
		{"nothing set", nil, false, false},
		{"one endpoint for both", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true, true},
		{"metrics only", map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://c:4318/v1/metrics"}, true, false},
		{"traces only", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, false, true},
		{"traces exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, true, false},
		{"metrics exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_METRICS_EXPORTER": "none"}, false, true},
		{"SDK disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, false, false},
	} {
		m, tr := Signals(func(k string) string { return c.env[k] })
		if m != c.metrics || tr != c.traces {
			t.Errorf("%s: metrics %v traces %v, want %v %v", c.name, m, tr, c.metrics, c.traces)
		}
	}
}

func TestLatest(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"": false, "http": false, "gen_ai_latest_experimental": true, "http, gen_ai_latest_experimental": true,
		"gen_ai_latest_experimental_x": false, "database,gen_ai_latest_experimental,http": true,
	} {
		if got := latest(v); got != want {
			t.Errorf("latest(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestNewOffOrRefused: without an endpoint New returns no telemetry (off);
// an OTLP protocol other than HTTP's is refused with a clear error.
func TestNewOffOrRefused(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	tel, err := New(context.Background())
	if tel != nil || err != nil {
		t.Fatalf("New without an endpoint: %v, %v; want nil, nil", tel, err)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown of no telemetry: %v", err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	if _, err := New(context.Background()); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("New with protocol grpc: %v, want ErrInvalidOption", err)
	}
}
