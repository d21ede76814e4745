// Package telemetry exports what reprise's generations did through the
// OpenTelemetry SDK, over OTLP/HTTP: the GenAI semantic conventions'
// client metrics (operation duration and token usage; the newer
// gen_ai.client.inference.* names when OTEL_SEMCONV_STABILITY_OPT_IN lists
// gen_ai_latest_experimental) and traces — a span per generation and a
// child per upstream attempt, whose W3C trace context goes upstream.
//
// It is fed by the engine's Tracer hook only, so it sees generations and
// never a replay, an attach or a resume: tokens are reported once per
// generation, as the Prometheus series count them. It decides nothing and
// is never read back by the proxy's logic; the Prometheus series (package
// metrics) are unchanged by it. It is off unless an OTLP endpoint is set
// in the environment (OTEL_EXPORTER_OTLP_ENDPOINT, or the metrics or
// traces one); the SDK reads the other OTEL_* variables itself.
package telemetry
