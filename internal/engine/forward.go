package engine

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strings"
	"sync"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
)

// Generic is the format of an endpoint reprise does not know (embeddings,
// images, files …): a keyed request's answer is stored and replayed whole;
// an event stream completes only with data: [DONE], OpenAI's convention.
// Caller is its caller's API shape (CallerShape): the credential the
// upstream gets and the errors its caller gets follow it.
type Generic struct{ Caller apierr.Shape }

// Path implements Protocol: Generic serves every path no other format
// does; it is not listed in Protocols.
func (Generic) Path() string { return "" }

// Streams implements Protocol: what the request asks for is the
// upstream's to decide; its answer's content type tells.
func (Generic) Streams([]byte) (bool, error) { return false, nil }

// Inspect implements Protocol.
func (Generic) Inspect(_ string, data []byte) Inspection {
	if string(data) == "[DONE]" {
		return Inspection{Terminal: true}
	}
	return Inspection{}
}

// Result implements Protocol: usage is read as chat's, where there is one
// (embeddings report prompt_tokens).
func (Generic) Result(ct string, body []byte) (cost.Usage, bool) { return Chat{}.Result(ct, body) }

// Whole implements Protocol: a request of a format reprise does not know
// never asks for a stream (Streams), so any answer is whole.
func (Generic) Whole(string, []byte) bool { return true }

// Shape implements Protocol: its caller's.
func (g Generic) Shape() apierr.Shape { return g.Caller }

// CallerShape is the error shape of a caller of path (decoded) whose
// request headers are h: Anthropic's for an Anthropic client's call (its
// Anthropic-Version header, a path under /v1/messages: count_tokens,
// batches …) or a format of Anthropic's, else OpenAI's.
func CallerShape(h http.Header, path string) apierr.Shape {
	if h.Get("Anthropic-Version") != "" || strings.HasPrefix(path, "/v1/messages") {
		return apierr.Anthropic
	}
	return ShapeOf(path)
}

// Forward passes r through to the upstream as it is — body streamed, the
// answer flushed as it comes, status and headers kept — with the caller's
// credential set as the decorator says. It neither journals nor retries:
// it is for requests that carry no key. A path CleanPath refuses is 400
// invalid_path; one no upstream serves is 404 no_upstream (configuration:
// not to be retried); a body that could not be read whole (over a
// http.MaxBytesReader's limit: 413, malformed: 400) is the caller's error,
// not the upstream's.
func (e *Engine) Forward(w http.ResponseWriter, r *http.Request) {
	path, err := CleanPath(r.URL.EscapedPath())
	if err != nil {
		apierr.New(apierr.InvalidPath).WriteIn(w, CallerShape(r.Header, r.URL.Path))
		return
	}
	shape := CallerShape(r.Header, path)
	ups := e.upstreams(path, "")
	if len(ups) == 0 {
		apierr.New(apierr.NoUpstream).WriteIn(w, shape) // no upstream was called: Final, a retry changes nothing
		return
	}
	up := ups[0]
	for _, u := range ups { // the first whose breaker lets it be called
		if !u.Policy.BreakerOpen() {
			up = u
			break
		}
	}
	target, err := upstreamURL(up.URL, path, "")
	if err != nil {
		apierr.New(apierr.InvalidPath).WriteIn(w, shape)
		return
	}
	var body *bodyReader
	if r.Body != nil && r.Body != http.NoBody {
		body = &bodyReader{rc: r.Body}
		r.Body = body
	}
	var trace classify.Trace // whether the request reached the upstream
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), trace.ClientTrace()))
			pr.SetURL(up.URL) // the scheme, host and query
			pr.Out.URL.Path, pr.Out.URL.RawPath = target.Path, target.RawPath
			for _, h := range []string{"Authorization", "X-Api-Key", "Api-Key", "Cookie", "Idempotency-Key"} {
				pr.Out.Header.Del(h)
			}
			up.Decorator.Decorate(pr.Out, pr.In.Header, shape)
		},
		Transport: up.Transport,
		ModifyResponse: func(resp *http.Response) error {
			up.Decorator.RedactResponse(resp)
			return nil
		},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(e.cfg.Logger.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			e.cfg.Logger.Warn("pass-through to the upstream failed", "path", r.URL.Path, "err", err)
			if r.Context().Err() != nil {
				return // the client left
			}
			if berr := body.Err(); berr != nil {
				// The caller's body, not the upstream, failed the request.
				var tooLarge *http.MaxBytesError
				code := apierr.InvalidBody
				if errors.As(berr, &tooLarge) {
					code = apierr.TooLarge
				}
				apierr.New(code).WriteIn(w, shape)
				return
			}
			// Sent or not decides, as for a generation: a request the
			// upstream got without answering (--header-timeout) is 504
			// upstream_timeout, which its client must not retry blindly.
			code := classify.CodeUnreachable
			if ce := classify.Transport(err, &trace); ce.Code != "" {
				code = ce.Code
			}
			if classify.Unanswered(code) {
				w.Header().Set("X-Should-Retry", "false")
			}
			apierr.New(code).WriteIn(w, shape)
		},
	}
	rp.ServeHTTP(w, r)
}

// bodyReader is a request body that keeps the first error reading it
// failed with (io.EOF aside): the transport reads it on a goroutine of its
// own, and its error reaches the ReverseProxy only as a failed round trip.
type bodyReader struct {
	rc  io.ReadCloser
	mu  sync.Mutex
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	return n, err
}

func (b *bodyReader) Close() error { return b.rc.Close() }

// Err is the error reading the body failed with; nil for no body.
func (b *bodyReader) Err() error {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}
