package telemetry

import (
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/reprise-dev/reprise/internal/engine"
)

// The GenAI semantic conventions' attributes, as the conventions name them
// (docs/metrics.md says which version each comes from).
const (
	keyOperation     = attribute.Key("gen_ai.operation.name")
	keySystem        = attribute.Key("gen_ai.system")        // v1.36.0 and before
	keyProvider      = attribute.Key("gen_ai.provider.name") // since v1.37.0
	keyRequestModel  = attribute.Key("gen_ai.request.model")
	keyResponseModel = attribute.Key("gen_ai.response.model")
	keyTokenType     = attribute.Key("gen_ai.token.type")     // v1.36.0: input, output
	keyTokenModality = attribute.Key("gen_ai.token.modality") // inference usage counters
	keyInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	keyOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	keyStream        = attribute.Key("gen_ai.request.stream")
	keyFirstChunk    = attribute.Key("gen_ai.response.time_to_first_chunk") // latest
	keyErrorType     = attribute.Key("error.type")
	keyServerAddress = attribute.Key("server.address")
	keyServerPort    = attribute.Key("server.port")

	// HTTP client attributes of an attempt's span.
	keyMethod      = attribute.Key("http.request.method")
	keyStatusCode  = attribute.Key("http.response.status_code")
	keyResendCount = attribute.Key("http.request.resend_count")
	keyURL         = attribute.Key("url.full")

	// reprise's own.
	keyKeyID       = attribute.Key("reprise.key_id") // the key's opaque id (a hash of tenant and key), as the logs name it
	keyGeneration  = attribute.Key("reprise.generation")
	keyFormat      = attribute.Key("reprise.format") // the API path
	keyOutcome     = attribute.Key("reprise.outcome")
	keyUpstream    = attribute.Key("reprise.upstream")
	keyAttempt     = attribute.Key("reprise.attempt")      // the generation's attempt number, from 1, across upstreams
	keyAttemptKind = attribute.Key("reprise.attempt.kind") // ok, retryable, fatal, ambiguous, unavailable, cancelled
	keyAttemptCode = attribute.Key("reprise.attempt.code")
	keyCost        = attribute.Key("reprise.cost")
	keyEvents      = attribute.Key("reprise.events")
)

// Metric names: the GenAI conventions of v1.36.0, reprise's default, and
// the latest experimental ones (OTEL_SEMCONV_STABILITY_OPT_IN=
// gen_ai_latest_experimental).
//
//nolint:gosec // metric names, not credentials
const (
	MetricOperationDuration = "gen_ai.client.operation.duration"
	MetricTokenUsage        = "gen_ai.client.token.usage"

	MetricInferenceDuration     = "gen_ai.client.inference.duration"
	MetricTimeToFirstChunk      = "gen_ai.client.inference.time_to_first_chunk"
	MetricUsageInputTokens      = "gen_ai.client.inference.usage.input_tokens"
	MetricUsageOutputTokens     = "gen_ai.client.inference.usage.output_tokens"
	MetricOperationInputTokens  = "gen_ai.client.inference.operation.input_tokens"
	MetricOperationOutputTokens = "gen_ai.client.inference.operation.output_tokens"
)

// Bucket boundaries the conventions advise: seconds for durations, tokens
// for token counts.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// OptInLatest is the OTEL_SEMCONV_STABILITY_OPT_IN value that selects the
// latest experimental GenAI conventions instead of v1.36.0's.
const OptInLatest = "gen_ai_latest_experimental"

// latest reports whether optIn, OTEL_SEMCONV_STABILITY_OPT_IN's value (a
// comma-separated list), asks for the latest GenAI conventions.
func latest(optIn string) bool {
	for v := range strings.SplitSeq(optIn, ",") {
		if strings.TrimSpace(v) == OptInLatest {
			return true
		}
	}
	return false
}

// operation names the GenAI operation and provider of a generation of
// format p: the conventions' well-known values where one applies.
func operation(p engine.Protocol) (op, provider string) {
	switch p.(type) {
	case engine.Messages:
		return "chat", "anthropic"
	case engine.Speech:
		return "speech", "openai" // no well-known operation: a custom value
	}
	return "chat", "openai" // chat completions and Responses
}
