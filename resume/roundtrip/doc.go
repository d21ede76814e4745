// Package roundtrip is the client side of reprise for Go: an
// [http.RoundTripper] that makes a streamed answer survive a broken
// connection, for any SDK that takes an *http.Client (openai-go's and
// anthropic-sdk-go's option.WithHTTPClient).
//
// For a POST to a streaming endpoint (/v1/chat/completions, /v1/responses,
// /v1/messages, /v1/audio/speech) the [Transport] adds an Idempotency-Key
// when the request has none (the same key again for the SDK's own retry of
// the same request, X-Stainless-Retry-Count ≥ 1, so that retry attaches to
// the generation instead of starting another). When the event stream that
// answers breaks before the format's terminal event, the response body
// reconnects to the answer's Location with the Last-Event-ID it read and
// goes on: the SDK reads one stream, cut only at event boundaries, every
// event once, and the POST is never sent again. Every other request goes
// to the base transport unchanged.
//
// A stop is not a drop. When the caller stops before the terminal event —
// its request context ends (before the answer, while reading, or while
// waiting to reconnect), or it closes the body, as an SDK's stream.Close
// does — the transport cancels the generation: a POST to the Location with
// /cancel appended to its path (before the answer: /v1/streams/{key}/cancel
// on the POST's origin), on a context of its own for at most
// [CancelTimeout], so that the same request again generates anew. A broken
// connection cancels nothing: it is resumed, and the upstream's generation
// runs on. [Transport.NoCancelOnAbort] leaves the generation running for a
// caller that stops, too. The cancel goes where a reconnection would, with
// what it sends.
//
// A reconnection sends the POST's credential (Authorization, x-api-key)
// again only when the Location has the POST's origin: the same scheme,
// host and port. A Location on another origin is still resumed, with none
// of the caller's credential headers: its capability token (?token=) is
// all a reader of the Location needs, and the credential never reaches an
// origin the caller did not send it to. A redirect answering a
// reconnection is not followed: it ends the stream with [ErrResume].
//
// It owns nothing on the server: the proxy's documented contract is all it
// relies on, in README.md ("Client helpers: streams that resume by
// themselves", with a Go snippet that builds as written) and
// docs/security.md ("Client helpers and other origins"). The same helper
// for JavaScript is the npm package in web/client (web/client/reprise.js,
// served by reprise at /reprise.js).
package roundtrip
