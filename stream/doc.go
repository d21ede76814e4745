// Package stream is reprise's HTTP surface: it validates requests, asks
// package resume what each may do, runs one pump per generation (detached
// from any client) that journals the upstream's events, and writes events to
// clients as SSE, JSON or WebSocket frames.
//
// It owns the wire contract (headers, status codes, OpenAI-shaped errors).
// It must not make start/attach/replay decisions itself (resume does) nor
// talk to JetStream directly (journal does).
package stream
