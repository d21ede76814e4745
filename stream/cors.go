package stream

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rs/cors"

	"github.com/reprise-dev/reprise/internal/apierr"
)

// corsExposed are the response headers a page on another origin may read:
// what a client needs to resume (Location, Idempotency-Key), to tell a
// replay (Idempotent-Replayed) and reprise's own, with the retry hints.
var corsExposed = []string{
	"Location", "Idempotency-Key", "Idempotent-Replayed", "Reprise-Attached", "Reprise-Attempts", "Reprise-Upstream",
	"Retry-After", "X-Should-Retry", "X-Request-Id", "Request-Id", "Content-Range", "Accept-Ranges",
}

// corsMaxAge is how long a browser may keep a preflight's answer.
const corsMaxAge = 10 * time.Minute

// withCORS wraps next with the CORS answers for origins (Settings.CORSOrigins);
// next itself when there are none. A preflight from an allowed origin is
// answered 204 here, on every path (the passed-through ones too): any
// method the API uses and any request header (Authorization, x-api-key,
// Idempotency-Key, Last-Event-ID, the SDKs' own…), reflected. Credentials
// (cookies) are never allowed: reprise reads its caller's key from a
// header, so "*" is safe to allow. A preflight from another origin gets
// 403 cors_origin_not_allowed, and its requests no CORS header.
func withCORS(origins []string, next http.Handler) (http.Handler, error) {
	if len(origins) == 0 {
		return next, nil
	}
	for _, o := range origins {
		if err := checkOrigin(o); err != nil {
			return nil, err
		}
	}
	c := cors.New(cors.Options{
		AllowedOrigins: origins,
		AllowedMethods: []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodDelete},
		AllowedHeaders: []string{"*"},
		ExposedHeaders: corsExposed,
		MaxAge:         int(corsMaxAge / time.Second),
	})
	h := c.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions && r.Header.Get("Origin") != "" &&
			r.Header.Get("Access-Control-Request-Method") != "" && !c.OriginAllowed(r) {
			w.Header().Add("Vary", "Origin")
			fail(w, r, apierr.New(apierr.OriginNotAllowed))
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

// ParseOrigins reads a comma-separated list of CORS origins (for
// Settings.CORSOrigins); each is "*" or scheme://host[:port], with at most
// one "*" in the host. Errors wrap ErrInvalidOption.
func ParseOrigins(list string) ([]string, error) {
	var out []string
	for o := range strings.SplitSeq(list, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		if err := checkOrigin(o); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}

// checkOrigin accepts "*" and scheme://host[:port] with at most one "*"
// (https://*.example.com), as a browser sends them: no path.
func checkOrigin(o string) error {
	if o == "*" {
		return nil
	}
	u, err := url.Parse(strings.Replace(o, "*", "x", 1))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.Path != "" || u.RawQuery != "" || u.User != nil || strings.Count(o, "*") > 1 {
		return fmt.Errorf("%w: CORS origin %q: want *, or scheme://host[:port] (one * allowed in the host)", ErrInvalidOption, o)
	}
	return nil
}
