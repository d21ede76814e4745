// Package tests holds reprise's end-to-end tests: real embedded JetStream,
// real HTTP servers and clients, the fake upstream in web/mockllm (which
// counts generations so tests can assert "billed once"), the official
// openai-go SDK and, for the chaos suite, dropped links.
package tests
