package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/reprise-dev/reprise/internal/engine"
)

// ServiceName is the service.name reprise reports unless OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) names another.
const ServiceName = "reprise"

// scope names the instrumentation in what is exported.
const scope = "github.com/reprise-dev/reprise/internal/telemetry"

// ErrInvalidOption wraps every configuration error New returns.
var ErrInvalidOption = errors.New("telemetry: invalid option")

// Telemetry exports generations' GenAI metrics and traces. It implements
// engine.Tracer.
type Telemetry struct {
	latest bool
	mp     *sdkmetric.MeterProvider // nil: no metrics exported
	tp     *sdktrace.TracerProvider // nil: no traces exported
	tracer trace.Tracer             // a no-op one without traces
	prop   propagation.TextMapPropagator
	inst   instruments
}

// instruments are the GenAI metrics of one naming: v1.36.0's (duration,
// tokens) or the latest (duration, usage counters, per-operation
// histograms).
type instruments struct {
	duration             metric.Float64Histogram
	tokens               metric.Int64Histogram   // v1.36.0
	usageIn, usageOut    metric.Int64Counter     // latest
	operationIn, operOut metric.Int64Histogram   // latest
	firstChunk           metric.Float64Histogram // latest
}

// Signals reports which signals getenv (os.Getenv) asks to export: metrics
// when OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT is
// set, traces when it or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is; neither when
// OTEL_SDK_DISABLED is true, and not a signal whose OTEL_METRICS_EXPORTER or
// OTEL_TRACES_EXPORTER is none.
func Signals(getenv func(string) string) (metrics, traces bool) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, false
	}
	all := getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	metrics = (all || getenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") != "") && getenv("OTEL_METRICS_EXPORTER") != "none"
	traces = (all || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") && getenv("OTEL_TRACES_EXPORTER") != "none"
	return metrics, traces
}

// New returns the telemetry the process's environment asks for (Signals),
// exporting over OTLP/HTTP, or nil when it asks for none. The SDK reads the
// rest of the standard OTEL_* variables itself: endpoints, headers,
// timeouts, compression, OTEL_METRIC_EXPORT_INTERVAL, OTEL_BSP_*, the
// sampler, OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
// OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental selects the
// latest GenAI names. Call Shutdown to flush what is left.
func New(ctx context.Context) (*Telemetry, error) {
	metrics, traces := Signals(os.Getenv)
	if !metrics && !traces {
		return nil, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := os.Getenv(v); p != "" && p != "http/protobuf" {
			return nil, fmt.Errorf("%w: %s=%s: reprise exports OTLP over HTTP only (http/protobuf)", ErrInvalidOption, v, p)
		}
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: after the default, so they win
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	t := &Telemetry{
		latest: latest(os.Getenv("OTEL_SEMCONV_STABILITY_OPT_IN")),
		tracer: tracenoop.NewTracerProvider().Tracer(scope),
		prop:   propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	if metrics {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("telemetry: OTLP metrics exporter: %w", err)
		}
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
		mp = t.mp
	}
	if traces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("telemetry: OTLP trace exporter: %w", err)
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		t.tracer = t.tp.Tracer(scope)
	}
	if t.inst, err = newInstruments(mp.Meter(scope), t.latest); err != nil {
		_ = t.Shutdown(ctx)
		return nil, err
	}
	return t, nil
}

// newInstruments makes the GenAI instruments of one naming on m.
func newInstruments(m metric.Meter, latest bool) (instruments, error) {
	var in instruments
	var errs []error
	hist := func(name, desc string) metric.Int64Histogram {
		h, err := m.Int64Histogram(name, metric.WithUnit("{token}"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(tokenBuckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit("{token}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	name, desc := MetricOperationDuration, "GenAI operation duration."
	if latest {
		name, desc = MetricInferenceDuration, "GenAI inference operation duration."
	}
	var err error
	in.duration, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(durationBuckets...))
	errs = append(errs, err)
	if latest {
		in.usageIn = counter(MetricUsageInputTokens, "The number of input (prompt) tokens used, including cached tokens.")
		in.usageOut = counter(MetricUsageOutputTokens, "The number of output (completion) tokens used, including reasoning tokens.")
		in.operationIn = hist(MetricOperationInputTokens, "The number of input (prompt) tokens used per inference operation.")
		in.operOut = hist(MetricOperationOutputTokens, "The number of output (completion) tokens used per inference operation.")
		in.firstChunk, err = m.Float64Histogram(MetricTimeToFirstChunk, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...),
			metric.WithDescription("Time to receive the first chunk, measured from when the client issues the generation request to when the first chunk is received in the response stream."))
		errs = append(errs, err)
	} else {
		in.tokens = hist(MetricTokenUsage, "Number of input and output tokens used.")
	}
	if err := errors.Join(errs...); err != nil {
		return instruments{}, fmt.Errorf("telemetry: instruments: %w", err)
	}
	return in, nil
}

// Shutdown exports what is left and stops the exporters, within ctx. Nil
// Telemetry: nothing to do.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.mp != nil {
		errs = append(errs, t.mp.Shutdown(ctx))
	}
	if t.tp != nil {
		errs = append(errs, t.tp.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

var _ engine.Tracer = (*Telemetry)(nil)
