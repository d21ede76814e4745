// Package tests holds reprise's end-to-end tests: real embedded JetStream,
// real HTTP servers and clients, the fake upstream in internal/mockllm (which
// counts generations so tests can assert "billed once"), the official
// openai-go SDK and, for the chaos suite, dropped links.
//
// What a test here can rely on, and what it must do:
//
//   - newEnv gives a test its own embedded JetStream, fake upstream and
//     proxy; a test that owns everything it touches calls t.Parallel()
//     first. The few that kill processes or nodes and time leases run
//     alone, and say so. TestMain runs 4 parallel tests per CPU (they
//     mostly wait); -parallel overrides it.
//   - The fake upstream books a generation as finished after its last
//     write: read its ledger after a stream through testutil.Settled,
//     never with Ledger.Get at once.
//   - A reader gets [DONE] before the key's record says completed: wait
//     for the state (waitState, testutil.WaitState) before asserting a
//     replay or the record.
//   - Waits have a deadline and say what they waited for:
//     testutil.Eventually, WaitState, Settled, WaitReady.
//   - A port freed by testutil.FreeAddr may be taken by anyone; an address
//     that must refuse connections comes from testutil.ReserveAddr.
//
// Shared helpers live in internal/testutil (waits, ports, HTTP, a key's
// status, OpenAI-shaped errors) and internal/journaltest (embedded
// JetStream servers and clusters); this package's own are the files named
// helpers_*_test.go (the environment, clients, links, clusters, chaos runs).
//
// tests/ is a Go module of its own (tests/go.mod, joined to reprise's by the
// root go.work): the SDKs, chromedp, toxiproxy, compose-go and the
// Kubernetes types it needs stay out of reprise's go.mod. Its other
// packages: kubernetes (deploy/kubernetes checked without a cluster),
// webpage (the demo page in Chromium against a fake proxy) and webtest (the
// Chromium driver). From the repository's root, go test ./... ./tests/...
// runs both modules.
package tests
