package stream

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// AuthMode says who may call the proxy and what reaches the upstream.
type AuthMode string

// Auth modes.
const (
	// AuthPassthrough forwards the caller's Authorization to the upstream;
	// the tenant is derived from it (no credential: the anonymous tenant).
	AuthPassthrough AuthMode = "passthrough"
	// AuthStatic accepts only the configured proxy keys; the upstream gets
	// Config.UpstreamKey, which never reaches clients.
	AuthStatic AuthMode = "static"
	// AuthNone serves one anonymous tenant (the demo); the upstream gets
	// Config.UpstreamKey if set.
	AuthNone AuthMode = "none"
)

const anonymous = "anonymous"

// credential returns the caller's credential: the configured tenant header,
// or the bearer token.
func (s *Server) credential(r *http.Request) string {
	if s.cfg.TenantHeader != "" {
		return strings.TrimSpace(r.Header.Get(s.cfg.TenantHeader))
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return strings.TrimSpace(token)
}

// tenantOf derives a tenant id from a credential: HMAC-SHA256 under the
// server secret, so the credential itself is never stored.
func (s *Server) tenantOf(credential string) string {
	m := hmac.New(sha256.New, s.cfg.Secret)
	m.Write([]byte("tenant\x00"))
	m.Write([]byte(credential))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// authenticate returns the caller's tenant, or the error to answer.
func (s *Server) authenticate(r *http.Request) (string, *apiError) {
	switch s.cfg.Auth {
	case AuthNone:
		return anonymous, nil
	case AuthStatic:
		c := s.credential(r)
		if c == "" {
			return "", errNoKey
		}
		t := s.tenantOf(c)
		if !s.proxyKeys[t] {
			return "", errBadProxyKey
		}
		return t, nil
	}
	if c := s.credential(r); c != "" {
		return s.tenantOf(c), nil
	}
	return anonymous, nil
}

// upstreamAuth sets the upstream's credential on req: the caller's in
// passthrough, the configured key otherwise.
func (s *Server) upstreamAuth(req *http.Request, caller http.Header) {
	switch {
	case s.cfg.Auth == AuthPassthrough:
		if v := caller.Values("Authorization"); len(v) > 0 {
			req.Header["Authorization"] = v
		}
	case s.cfg.UpstreamKey != "":
		req.Header.Set("Authorization", "Bearer "+s.cfg.UpstreamKey)
	}
}
