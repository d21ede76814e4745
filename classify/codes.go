package classify

// Codes of the failures classify names itself (Error.Code). Each has its
// status, type and message in the proxy's one error catalogue.
const (
	// CodeUnreachable: the request never reached the upstream (connect
	// failure, a write that failed): retryable.
	CodeUnreachable = "upstream_unreachable"
	// CodeTimeout: the request was sent and no response head came in time.
	CodeTimeout = "upstream_timeout"
	// CodeNoResponse: the connection broke after the request was sent.
	CodeNoResponse = "upstream_no_response"
	// CodeBadResponse: the upstream's answer is none: a response that broke
	// before its head was whole, a redirect, or (the engine's) a 2xx that
	// is not the event stream the request asked for.
	CodeBadResponse = "upstream_bad_response"
	// CodeTLS: the upstream's certificate is not trusted.
	CodeTLS = "upstream_tls"
	// CodeUnavailable: the circuit breaker is open.
	CodeUnavailable = "upstream_unavailable"
	// CodeSaturated: the concurrency limit toward the upstream is full.
	CodeSaturated = "upstream_saturated"
	// CodeInterrupted: a stream broke after its first event.
	CodeInterrupted = "upstream_interrupted"
)

// Codes lists every code an Error of classify can carry.
func Codes() []string {
	return []string{CodeUnreachable, CodeTimeout, CodeNoResponse, CodeBadResponse, CodeTLS, CodeUnavailable, CodeSaturated, CodeInterrupted}
}

// Unanswered reports whether code names an answer the proxy made for a
// request the upstream got and did not answer (upstream_timeout,
// upstream_no_response, upstream_bad_response): the upstream may have acted
// on it, so a client's retry may bill a second time. upstream_timeout is
// also the answer to an attempt the call's deadline cut before it was sent:
// the time a retry would spend again.
func Unanswered(code string) bool {
	switch code {
	case CodeTimeout, CodeNoResponse, CodeBadResponse:
		return true
	}
	return false
}
