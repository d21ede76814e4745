package engine

import (
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strings"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/stream/apierr"
)

// Generic is the format of an endpoint reprise does not know (embeddings,
// images, files …): a keyed request's answer is stored and replayed whole;
// an event stream completes only with data: [DONE], OpenAI's convention.
type Generic struct{}

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
func (Generic) Result(ct string, body []byte) (resume.Usage, bool) { return Chat{}.Result(ct, body) }

// Whole implements Protocol: a request of a format reprise does not know
// never asks for a stream (Streams), so any answer is whole.
func (Generic) Whole(string, []byte) bool { return true }

// Shape implements Protocol.
func (Generic) Shape() apierr.Shape { return apierr.OpenAI }

// Forward passes r through to the upstream as it is — body streamed, the
// answer flushed as it comes, status and headers kept — with the caller's
// credential set as the decorator says. It neither journals nor retries:
// it is for requests that carry no key.
func (e *Engine) Forward(w http.ResponseWriter, r *http.Request) {
	up := e.cfg.Upstream
	for _, u := range e.upstreams(r.URL.Path, "") { // the first whose breaker lets it be called
		if !u.Policy.BreakerOpen() {
			up = u
			break
		}
	}
	var trace classify.Trace // whether the request reached the upstream
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), trace.ClientTrace()))
			pr.SetURL(up.URL) // the base's path, then the request's; the query kept
			for _, h := range []string{"Authorization", "X-Api-Key", "Cookie", "Idempotency-Key"} {
				pr.Out.Header.Del(h)
			}
			shape := apierr.OpenAI
			if pr.In.Header.Get("Anthropic-Version") != "" || strings.HasPrefix(pr.In.URL.Path, "/v1/messages") {
				shape = apierr.Anthropic // an Anthropic client's call (count_tokens, models …)
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
			apierr.New(code).Write(w)
		},
	}
	rp.ServeHTTP(w, r)
}
