// Package engine runs generations: for each one that package resume lets
// start, a pump detached from any client calls the upstream through the
// call policy (package classify), reads its SSE with go-sse, journals every
// event (package journal), keeps an in-memory tail for the readers on this
// instance, and records how the generation ended. Salvage settles a
// generation whose owner died; with an upstream in background mode, the
// Engine adopts it instead (a resume.Adopter) and continues it from the
// upstream where the journal left off (reattach.go).
//
// What a format's stream looks like — the terminal event, error events,
// usage, what asks for a stream — lives in one Protocol per format (chat.go,
// speech.go); the pump is the same for all. A new upstream format is a new
// Protocol listed in Protocols. A text format is also an Assembler: it
// builds, from the events of a completed stream, the answer the upstream
// gives the same request not streamed (assemble*.go).
//
// The engine does no HTTP serving and makes no start/attach/replay decision;
// it reaches the proxy's other parts only through its Config (journal,
// upstream, limits, metrics) and the Generation it is handed.
package engine
