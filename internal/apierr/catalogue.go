package apierr

import (
	"net/http"

	"github.com/reprise-dev/reprise/classify"
)

// Codes the proxy answers requests with.
const (
	NotFound           = "not_found"
	MethodNotAllowed   = "method_not_allowed"
	KeyNotFound        = "key_not_found"
	BadCursor          = "invalid_last_event_id"
	BadKey             = "invalid_idempotency_key"
	InvalidJSON        = "invalid_json"
	InvalidRequest     = "invalid_request"
	InvalidBody        = "invalid_body"
	TooLarge           = "request_too_large"
	MediaType          = "unsupported_media_type"
	Mismatch           = "idempotency_key_mismatch"
	InProgress         = "idempotency_key_in_progress"
	NoKey              = "missing_api_key"
	BadProxyKey        = "invalid_api_key"
	TooManyGenerations = "too_many_generations"
	TooManyReaders     = "too_many_readers"
	BadRange           = "invalid_range"
	Unsatisfiable      = "range_not_satisfiable"
	Unavailable        = "journal_unavailable"
	// JournalFull: JetStream refuses writes, its store full (journal.ErrStoreFull).
	JournalFull  = "journal_full"
	ShuttingDown = "shutting_down"
	NoStreaming  = "streaming_unsupported"
	// Overloaded refuses a new generation while the instance's journal is
	// behind (stream.Settings.ShedLag); attaches, replays and resumes are
	// still served.
	Overloaded = "overloaded"
	// OriginNotAllowed answers a CORS preflight from an origin that is
	// not in --cors-origins.
	OriginNotAllowed = "cors_origin_not_allowed"
	// InvalidPath refuses a request whose path could leave /v1/ or the
	// upstream's base path: a dot segment or an encoded slash.
	InvalidPath = "invalid_path"
	// ModelNotAllowed refuses a request for a model its proxy key may not
	// ask for (the key's models= in --proxy-keys).
	ModelNotAllowed = "model_not_allowed"
	// PathNotAllowed refuses a request to a path its proxy key may not
	// call (the key's paths= in --proxy-keys).
	PathNotAllowed = "path_not_allowed"
	// BudgetExceeded refuses a new generation of a proxy key whose spend
	// in the current window reached its budget (budget= in --proxy-keys),
	// fleet-wide; Retry-After says when the window ends. Resumes and
	// replays of what it already paid for are still served.
	BudgetExceeded = "budget_exceeded"
)

// Codes a generation ends with (in its error event and its record).
const (
	OwnerLost      = "owner_lost"
	Cancelled      = "cancelled"
	NotRunning     = "key_not_running"
	ProxyShutdown  = "proxy_shutdown"
	JournalFailure = "journal_failure"
	StreamTooLarge = "stream_too_large"
	InvalidEvent   = "upstream_invalid_event"
	UpstreamBody   = "upstream_invalid_response"
	// NoUpstream: no configured upstream serves the request's path and
	// model — the operator's configuration, not an upstream's failure (none
	// was called). 404, as OpenAI and Anthropic answer a model they do not
	// serve (model_not_found, not_found_error) and a server a path it does
	// not route: not a 502, which would blame an upstream and which the
	// SDKs retry, nor a 400, as the request itself is well-formed. Final:
	// X-Should-Retry: false.
	NoUpstream = "no_upstream"
	// UpstreamError is an upstream's own error answer that named no code;
	// its status is the upstream's.
	UpstreamError = "upstream_error"
)

// catalogue is every code's status, type (derived from the status when
// empty) and message, and its retry signal: what tells a client whether
// to send the request again (the OpenAI and Anthropic SDKs retry 408, 409,
// 429 and 5xx unless X-Should-Retry: false).
//
//   - An answer a retry cannot change, or whose retry would undo or pay
//     again for what it reports, says X-Should-Retry: false: a Final status
//     (4xx but 408, 409 and 429), or NoRetry with any other.
//   - An answer that asks to come back later (429, 503) says when:
//     Retry-After.
//   - Any other leaves the retry to the client: a 5xx a retry may get past
//     (on another instance, or as a fresh generation).
//
// TestRetrySignals holds the decision, and why, for every code: a code
// added here without one fails it.
var catalogue = map[string]Error{
	NotFound:           {Status: http.StatusNotFound, Message: "no such route"},
	MethodNotAllowed:   {Status: http.StatusMethodNotAllowed, Message: "method not allowed"},
	KeyNotFound:        {Status: http.StatusNotFound, Message: "no stream for this key"},
	BadCursor:          {Status: http.StatusBadRequest, Message: "Last-Event-ID is not a position this proxy issued"},
	BadKey:             {Status: http.StatusBadRequest, Message: "Idempotency-Key must be sent once, as 1-255 visible ASCII characters other than . and .. (bare or as a structured-field string)"},
	InvalidJSON:        {Status: http.StatusBadRequest, Message: "request body is not valid JSON"},
	InvalidRequest:     {Status: http.StatusBadRequest, Message: "request body must be a JSON object"},
	InvalidBody:        {Status: http.StatusBadRequest, Message: "request body could not be read"},
	TooLarge:           {Status: http.StatusRequestEntityTooLarge, Message: "request body is over the limit"},
	MediaType:          {Status: http.StatusUnsupportedMediaType, Message: "Content-Type must be application/json"},
	Mismatch:           {Status: http.StatusUnprocessableEntity, Message: "this Idempotency-Key was used with a different request body"},
	InProgress:         {Status: http.StatusConflict, Type: "invalid_request_error", Message: "a request with this Idempotency-Key is still in progress; retry later", RetryAfter: 1},
	NoKey:              {Status: http.StatusUnauthorized, Message: "this proxy needs an API key: Authorization: Bearer <key>"},
	BadProxyKey:        {Status: http.StatusUnauthorized, Message: "the API key is not valid for this proxy"},
	TooManyGenerations: {Status: http.StatusTooManyRequests, Message: "too many generations are running for this caller; retry later", RetryAfter: 1},
	TooManyReaders:     {Status: http.StatusTooManyRequests, Message: "too many readers are connected to this key", RetryAfter: 1},
	BadRange:           {Status: http.StatusBadRequest, Message: "the Range header is malformed; want bytes=<first>-[<last>] or bytes=-<suffix>"},
	Unsatisfiable:      {Status: http.StatusRequestedRangeNotSatisfiable, Message: "the Range is outside the stored result"},
	Unavailable:        {Status: http.StatusServiceUnavailable, Message: "the journal is not available", RetryAfter: 1},
	JournalFull:        {Status: http.StatusServiceUnavailable, Message: "the journal's store is full: nothing new is stored until space is freed (old events expire) or its limit is raised", RetryAfter: 10},
	ShuttingDown:       {Status: http.StatusServiceUnavailable, Message: "this instance is shutting down", RetryAfter: 1},
	NoStreaming:        {Status: http.StatusInternalServerError, Message: "the connection cannot stream", NoRetry: true},
	ModelNotAllowed:    {Status: http.StatusForbidden, Message: "this API key may not use this model"},
	PathNotAllowed:     {Status: http.StatusForbidden, Message: "this API key may not call this path"},
	BudgetExceeded:     {Status: http.StatusTooManyRequests, Message: "this API key's budget for the current period is spent; new generations are refused until Retry-After (resumes and replays are served)", RetryAfter: 60},
	Overloaded:         {Status: http.StatusTooManyRequests, Message: "this instance is behind on its running generations and refuses new ones for now; retry after Retry-After (running generations, their readers, replays and resumes are served)", RetryAfter: 1},
	OriginNotAllowed:   {Status: http.StatusForbidden, Message: "this origin may not call the proxy from a browser; add it to --cors-origins"},
	InvalidPath:        {Status: http.StatusBadRequest, Message: "the request path may not hold dot segments (. or ..) or encoded slashes (%2F, %5C), nor leave /v1/"},

	OwnerLost:      {Status: http.StatusBadGateway, Message: "the instance running this generation stopped before it completed"},
	Cancelled:      {Status: http.StatusConflict, Message: "the generation was cancelled; no result was stored", NoRetry: true},
	NotRunning:     {Status: http.StatusConflict, Message: "no generation of this key is running", NoRetry: true},
	ProxyShutdown:  {Status: http.StatusServiceUnavailable, Message: "the proxy shut down before the generation completed", RetryAfter: 1},
	JournalFailure: {Status: http.StatusServiceUnavailable, Message: "the journal could not store the stream", RetryAfter: 1},
	StreamTooLarge: {Status: http.StatusBadGateway, Message: "the upstream stream exceeded the proxy's events or bytes limit; no result was stored", NoRetry: true},
	InvalidEvent:   {Status: http.StatusBadGateway, Message: "the upstream sent an event that is not valid UTF-8 SSE; no result was stored"},
	UpstreamBody:   {Status: http.StatusBadGateway, Message: "the upstream response could not be read"},
	NoUpstream:     {Status: http.StatusNotFound, Message: "no upstream is configured for this path and model"},
	UpstreamError:  {Status: http.StatusBadGateway, Message: "the upstream answered with an error"},

	classify.CodeUnreachable: {Status: http.StatusBadGateway, Message: "the upstream could not be reached"},
	classify.CodeTimeout:     {Status: http.StatusGatewayTimeout, Message: "the upstream did not answer in time after the request was sent", NoRetry: true},
	classify.CodeNoResponse:  {Status: http.StatusBadGateway, Message: "the connection to the upstream broke after the request was sent", NoRetry: true},
	classify.CodeBadResponse: {Status: http.StatusBadGateway, Message: "the upstream's answer is not a valid response to this request (a broken head, a redirect, or not the event stream asked for); no result was stored", NoRetry: true},
	classify.CodeTLS:         {Status: http.StatusBadGateway, Message: "the upstream's TLS certificate is not trusted", NoRetry: true},
	classify.CodeUnavailable: {Status: http.StatusServiceUnavailable, Message: "the upstream is failing; the circuit breaker is open", RetryAfter: 1},
	classify.CodeSaturated:   {Status: http.StatusServiceUnavailable, Message: "too many generations are running toward the upstream", RetryAfter: 1},
	classify.CodeInterrupted: {Status: http.StatusBadGateway, Message: "the upstream stream broke before it completed; no result was stored"},
}
