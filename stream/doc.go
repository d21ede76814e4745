// Package stream is reprise's HTTP surface: it authenticates a request
// (package auth), validates it, asks package resume what it may do, hands a
// new generation to package engine, and serves readers: SSE (on connections
// package detach takes over for GETs), JSON status, WebSocket frames,
// stored results and byte ranges. Errors come from the one catalogue
// (package apierr).
//
// It owns the wire contract (routes, headers, status codes, negotiation,
// cursors). It must not make start/attach/replay decisions (resume does),
// call the upstream (engine does) nor write to JetStream (journal does). It
// reads the journal to serve readers, and sends two core-NATS signals
// through it, which store nothing: a client's cancel of a generation, to
// the instance that runs it (journal.Cancel), and which keys this instance
// has readers of, to every instance (journal.Reading, for the owners'
// cancel of unread generations).
//
// The files: decide.go is the POST decision (with keyless.go, inflight.go,
// received.go and fallback.go for requests without a key, shed.go for
// shedding); get.go, responses.go, cancel.go, attempts.go and
// passthrough.go the other routes; serve.go serves a key's generation to
// whichever route asked (follow.go reads it, write.go writes it);
// request.go is a request's lifecycle, access.go its access log; errors.go
// the error answers.
package stream
