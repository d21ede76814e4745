// Package web owns the browser demo page of reprise and nothing else.
//
// The page is plain HTML, CSS and JavaScript modules that the binary embeds
// (no build step). It talks to the proxy on the same origin through the
// public HTTP contract: POST /v1/chat/completions and POST /v1/audio/speech
// with an Idempotency-Key, and the resume URL from the Location header, read
// with an EventSource or a WebSocket after the last event id, and polled for
// the key's status (events journaled, generations, usage, cost). It lets a
// person drop the connection on purpose or through an "unreliable network"
// and watch the text and the speech resume from the journal instead of
// starting a second generation.
//
// It also serves /reprise.js (client/reprise.js): an ES module for other
// pages and for Node, a fetch that adds an Idempotency-Key and resumes a
// broken stream from its Location by itself. [Mount] registers the page and
// the helper; [MountClient] the helper alone, for a gateway that serves no
// demo (reprise --page=false).
//
// The package holds no proxy logic. [Handler] only serves the static files.
package web
