// Package testutil holds the helpers reprise's tests share: waits with a
// deadline that say what they waited for, loopback ports (free ones, and
// reserved ones that refuse connections), HTTP requests with a deadline, a server's readiness, a key's JSON status and
// the OpenAI-shaped error answers. It is for tests only; every helper that
// can fail takes a testing.TB, calls tb.Helper() and fails the test itself.
//
// It imports only the standard library and internal/mockllm (the fake upstream
// whose ledger [Settled] reads), so that the helper packages of the lower
// layers (internal/journaltest) may build on it without an import cycle.
// Helpers that know JetStream live in internal/journaltest.
package testutil
