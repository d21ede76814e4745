package stream

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/rs/cors"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
)

// passThrough serves every other path under /v1/ (models, embeddings,
// files, moderations, images, transcriptions …), so that pointing an SDK's
// base URL at reprise breaks nothing. A POST that carries an
// Idempotency-Key is executed once and its stored answer replayed, under
// the same rules as a format reprise knows (422 on another body, 409 while
// it runs); anything else is forwarded as it is, its answer streamed back.
// The caller's tenant is checked as for every request; bodies stay under
// the request limit (413 before anything is sent when Content-Length says
// so); a browser's request from a foreign origin is refused (crossSite).
func (s *Server) passThrough(w http.ResponseWriter, r *http.Request) {
	who, err := s.caller(r)
	if err != nil {
		fail(w, r, authError(err))
		return
	}
	if s.crossSite(r) {
		w.Header().Add("Vary", "Origin")
		fail(w, r, apierr.New(apierr.OriginNotAllowed))
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		fail(w, r, apierr.New(apierr.TooLarge))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	key, err := requestKey(r)
	switch {
	case r.Method != http.MethodPost || key == "" && err == nil:
		if r.Method == http.MethodPost && len(who.Models) > 0 && !s.forwardAllowed(w, r, who) {
			return
		}
		s.engine.Forward(w, r)
		return
	case err != nil:
		fail(w, r, apierr.New(apierr.BadKey))
		return
	}
	body, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		fail(w, r, apierr.New(apierr.TooLarge))
		return
	case err != nil:
		fail(w, r, apierr.New(apierr.InvalidBody))
		return
	}
	s.begin(w, r, who, engine.Generic{Caller: engine.CallerShape(r.Header, r.URL.Path)}, body, false)
}

// sameOrigin tells a browser's request made by a page of another site
// (Sec-Fetch-Site, else Origin against Host) from the others: same-origin
// pages and clients that are no browser.
var sameOrigin = http.NewCrossOriginProtection()

// crossSite reports whether r is a browser's request that changes
// something (any method but GET, HEAD and OPTIONS), made by a page on an
// origin that is neither reprise's own nor one of Settings.CORSOrigins.
//
// Such a request is one a page sent without a preflight — reprise answers
// preflights only for CORSOrigins — so it is a "simple" one: a POST of
// text/plain, a form or a multipart upload, with no credential of its
// caller's (Authorization and x-api-key need a preflight). Forwarded, it
// would reach the upstream with the operator's key (static and none auth):
// any page a user visits could spend on it. What a page may do without a
// preflight is only reading (GET /v1/models), and that is not refused.
func (s *Server) crossSite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	if sameOrigin.Check(r) == nil {
		return false
	}
	return s.corsAllowed == nil || !s.corsAllowed.OriginAllowed(r)
}

// newCORSMatcher matches a request's Origin against origins
// (Settings.CORSOrigins); nil for none.
func newCORSMatcher(origins []string) *cors.Cors {
	if len(origins) == 0 {
		return nil
	}
	return cors.New(cors.Options{AllowedOrigins: origins})
}

// confine answers 400 invalid_path, in its caller's shape, a request under
// /v1/ whose path could leave /v1/ or an upstream's base path once
// forwarded (engine.CleanPath), before any route sees it; it passes the
// others to next. Reprise's own /v1/streams/ (spelled so: the router
// decodes each segment, so /v1/streams%2F… is a pass-through) forwards
// nothing, and a key there may hold any character.
func confine(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") && !strings.HasPrefix(r.URL.EscapedPath(), "/v1/streams/") {
			if _, err := engine.CleanPath(r.URL.EscapedPath()); err != nil {
				apierr.New(apierr.InvalidPath).WriteIn(w, engine.CallerShape(r.Header, r.URL.Path))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// forwardAllowed reads the body of a POST forwarded without a key, for a
// caller whose proxy key names the models it may use, and reports whether
// the model it names is one (it answered r otherwise); the body is put back
// for the upstream. A body that is not JSON names no model.
func (s *Server) forwardAllowed(w http.ResponseWriter, r *http.Request, who auth.Caller) bool {
	body, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		fail(w, r, apierr.New(apierr.TooLarge))
		return false
	case err != nil:
		fail(w, r, apierr.New(apierr.InvalidBody))
		return false
	}
	model := modelOf(body)
	noteModel(r, model)
	if !who.AllowsModel(model) {
		fail(w, r, apierr.New(apierr.ModelNotAllowed))
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}
