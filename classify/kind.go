package classify

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"
)

// Kinds of upstream outcome. Match them with errors.Is.
var (
	ErrRetryable   = errors.New("classify: retryable upstream failure")
	ErrFatal       = errors.New("classify: fatal upstream answer")
	ErrAmbiguous   = errors.New("classify: request sent, no response")
	ErrInterrupted = errors.New("classify: upstream stream interrupted")
	ErrUnavailable = errors.New("classify: upstream unavailable")
)

// Error is a classified upstream outcome: what went wrong and what the
// client should see.
type Error struct {
	// Kind is one of the sentinel kinds.
	Kind error
	// Status is the HTTP status for the client: the upstream's when it
	// answered, else the proxy's (502, 503, 504).
	Status int
	// Code names the failure when the proxy made the answer (one of
	// Codes); "" when the upstream answered.
	Code string
	// RetryAfter is how long the client should wait, when known.
	RetryAfter time.Duration
	// ContentType and Body are the upstream's error answer, if it gave one.
	ContentType string
	Body        []byte
	// Attempts is how many upstream requests were made.
	Attempts int
	// Err is the underlying transport error, if any.
	Err error
}

func (e *Error) Error() string {
	msg := e.Kind.Error()
	if e.Status != 0 {
		msg += ": status " + strconv.Itoa(e.Status)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is matches the error's kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the transport error.
func (e *Error) Unwrap() error { return e.Err }

// StatusOverloaded is Anthropic's 529: the API is overloaded.
const StatusOverloaded = 529

// Status classifies an upstream answer's status code: nil for 2xx,
// ErrRetryable for 429, 500, 502, 503, 504 and 529, ErrFatal otherwise.
func Status(code int) error {
	switch {
	case code >= 200 && code < 300:
		return nil
	case code == http.StatusTooManyRequests, code == http.StatusInternalServerError, code == http.StatusBadGateway,
		code == http.StatusServiceUnavailable, code == http.StatusGatewayTimeout, code == StatusOverloaded:
		return ErrRetryable
	}
	return ErrFatal
}

// Response classifies a non-2xx upstream answer whose body (already read,
// bounded) is body. now dates an HTTP-date Retry-After. A redirect (3xx) is
// no answer (CodeBadResponse, fatal): the upstream is configuration, never
// followed, and neither its status nor its body may reach the caller, which
// would follow the proxy's own Location instead.
func Response(resp *http.Response, body []byte, now time.Time) *Error {
	kind := Status(resp.StatusCode)
	if kind == nil {
		return nil
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return &Error{Kind: ErrFatal, Status: http.StatusBadGateway, Code: CodeBadResponse, Err: fmt.Errorf("%w: %d", errRedirect, resp.StatusCode)}
	}
	ra, _ := RetryAfter(resp.Header, body, now)
	return &Error{Kind: kind, Status: resp.StatusCode, RetryAfter: ra, ContentType: resp.Header.Get("Content-Type"), Body: body}
}

// errRedirect is the cause of a redirect's CodeBadResponse.
var errRedirect = errors.New("classify: the upstream answered with a redirect")

// Trace records, for one attempt, whether the request was fully written and
// whether any response byte came back.
type Trace struct {
	wrote     atomic.Bool
	firstByte atomic.Bool
	firstAt   atomic.Int64 // when the first response byte came, Unix nanoseconds
}

// ClientTrace returns the httptrace hooks that fill t.
func (t *Trace) ClientTrace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				t.wrote.Store(true)
			}
		},
		GotFirstResponseByte: func() {
			t.firstAt.Store(time.Now().UnixNano())
			t.firstByte.Store(true)
		},
	}
}

// Wrote reports whether the whole request reached the connection.
func (t *Trace) Wrote() bool { return t.wrote.Load() }

// Transport classifies a failed round trip: untrusted TLS is fatal; a
// request that was never fully written is retryable (the upstream cannot
// have started); one that was written is ambiguous (it may be generating).
func Transport(err error, t *Trace) *Error {
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &certErr) || errors.As(err, &unknownAuth) || errors.As(err, &hostErr) || errors.As(err, &invalid) {
		return &Error{Kind: ErrFatal, Status: http.StatusBadGateway, Code: CodeTLS, Err: err}
	}
	// net/http reports WroteRequest once the request is in its write
	// buffer, before the buffer reaches the socket: a failed socket write
	// means the upstream never got the whole request.
	var op *net.OpError
	if !t.Wrote() || (errors.As(err, &op) && op.Op == "write" && !t.firstByte.Load()) {
		return &Error{Kind: ErrRetryable, Status: http.StatusBadGateway, Code: CodeUnreachable, Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &Error{Kind: ErrAmbiguous, Status: http.StatusGatewayTimeout, Code: CodeTimeout, Err: err}
	}
	if t.firstByte.Load() { // a response began and broke before its head was complete
		return &Error{Kind: ErrAmbiguous, Status: http.StatusBadGateway, Code: CodeBadResponse, Err: err}
	}
	return &Error{Kind: ErrAmbiguous, Status: http.StatusBadGateway, Code: CodeNoResponse, Err: err}
}

// Interrupted is the outcome of a stream that broke after its first event.
func Interrupted(err error) *Error {
	return &Error{Kind: ErrInterrupted, Status: http.StatusBadGateway, Code: CodeInterrupted, Err: err}
}
