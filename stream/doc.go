// Package stream is reprise's HTTP surface: it authenticates a request
// (package auth), validates it, asks package resume what it may do, hands a
// new generation to package engine, and serves readers: SSE (on connections
// package detach takes over for GETs), JSON status, WebSocket frames,
// stored results and byte ranges. Errors come from the one catalogue
// (package apierr).
//
// It owns the wire contract (routes, headers, status codes, negotiation,
// cursors). It must not make start/attach/replay decisions (resume does),
// call the upstream (engine does) nor write to JetStream (journal does); it
// reads the journal only to serve readers.
package stream
