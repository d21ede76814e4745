// Package mockllm is the demo model: a deterministic, honest fake of an
// OpenAI-compatible upstream. `reprise --upstream demo` (the default) serves
// it on a loopback port, cmd/mockllm runs it on its own, and the tests and
// the benchmark use it as the upstream they cannot run for real.
//
// It is production code in that it ships in the binary, but it is never a
// proxy path: reprise reaches it over HTTP like any other upstream, and it
// must not import the proxy's packages.
//
// The fake owns three things:
//
//   - An http.Handler ([Server]) serving POST /v1/chat/completions (streamed
//     SSE or plain JSON) and POST /v1/audio/speech (SSE audio deltas, raw PCM
//     or WAV).
//   - A [Ledger] that counts every request, every generation started, every
//     token written and every generation completed or aborted, per prompt, so
//     tests can assert that the proxy caused an upstream generation exactly
//     once ("billed once"). A generation is booked as finished after its
//     last write returned, so a client holding the whole stream may be ahead
//     of the ledger: read it through [Ledger.WaitSettled] (or [Ledger.Wait]).
//   - Deterministic content: [Content] and [Audio] return exactly what the
//     fake generates for a given prompt, so tests can compute expectations.
//
// Behaviour is controlled by bracketed directives inside the prompt text, so
// they pass through any proxy unchanged, for example:
//
//	"hello [tokens=50] [delay=5ms] [abort_after=10]"
//	"hello [status=503,502] [retry_after=1] [retry_after_ms=300]"
//	"hello [hang]"  or  "hello [hang_after=5]"
//
// See [ParseDirectives] for the full grammar.
package mockllm
