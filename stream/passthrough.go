package stream

import (
	"errors"
	"io"
	"net/http"

	"github.com/reprise-dev/reprise/stream/apierr"
	"github.com/reprise-dev/reprise/stream/engine"
)

// passThrough serves every other path under /v1/ (models, embeddings,
// files, moderations, images, transcriptions …), so that pointing an SDK's
// base URL at reprise breaks nothing. A POST that carries an
// Idempotency-Key is executed once and its stored answer replayed, under
// the same rules as a format reprise knows (422 on another body, 409 while
// it runs); anything else is forwarded as it is, its answer streamed back.
// The caller's tenant is checked as for every request; bodies stay under
// the request limit.
func (s *Server) passThrough(w http.ResponseWriter, r *http.Request) {
	tenant, err := s.auth.Tenant(r)
	if err != nil {
		fail(w, r, authError(err))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	key, err := requestKey(r)
	switch {
	case r.Method != http.MethodPost || key == "" && err == nil:
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
	s.begin(w, r, tenant, engine.Generic{}, body, false)
}
