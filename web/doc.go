// Package web owns the browser demo page of reprise and nothing else.
//
// The page is plain HTML, CSS and JavaScript that the binary embeds. It talks
// to the proxy on the same origin through the public HTTP contract:
// POST /v1/chat/completions with an Idempotency-Key, and the resume URL from
// the Location header, read with an EventSource and a last_event_id. It lets a
// person drop the connection on purpose and watch the stream resume from the
// journal instead of starting a second generation.
//
// The package holds no proxy logic. [Handler] only serves the static files.
package web
