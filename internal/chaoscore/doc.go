// Package chaoscore is what reprise's two chaos harnesses share: the
// in-process suite (tests/chaos_*_test.go, which adds toxiproxy links, NATS
// node kills and instance kills) and the black-box command reprise-chaos
// (which adds its flags, its HTTP targets and its report).
//
// It owns a run's plan skeleton (tokens, pace, 1..N drops and how each is
// resumed), the client protocol (one attempt: POST, GET or WebSocket with
// Last-Event-ID, dropped by the client after k events, after the answer's
// head or in flight, or by the harness's link), what counts as a refusal
// waited out ("throttled") and as a broken generation asked again
// ("regenerated"), and every per-key check: no event id skipped or repeated
// on a resume, the content byte-equal to the upstream's completed
// generation, at most one upstream generation per key plus one per broken
// generation, and an identical replay afterwards (GET and POST) that costs
// no generation.
//
// It must not inject faults on the server side (links, nodes, instances:
// those are the harnesses'), import the tests package, or be linked by the
// production binary cmd/reprise. It talks to reprise over HTTP only, and to
// the fake upstream (internal/mockllm) through its ledger.
package chaoscore
