package stream

import (
	"bytes"
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
	// RFC 9110: the scheme is case-insensitive, any whitespace separates it.
	v := strings.TrimSpace(r.Header.Get("Authorization"))
	i := strings.IndexAny(v, " \t")
	if i < 0 || !strings.EqualFold(v[:i], "Bearer") {
		return ""
	}
	return strings.TrimSpace(v[i+1:])
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
		// The caller's own account: its credential, organization and project.
		for _, h := range []string{"Authorization", "OpenAI-Organization", "OpenAI-Project"} {
			if v := caller.Values(h); len(v) > 0 {
				req.Header[h] = v
			}
		}
	case s.cfg.UpstreamKey != "":
		req.Header.Set("Authorization", "Bearer "+s.cfg.UpstreamKey)
	}
}

// redact removes the proxy's own upstream key from what a client may see
// (an upstream error body that echoes the request's credential).
func (s *Server) redact(b []byte) []byte {
	if s.cfg.Auth == AuthPassthrough || s.cfg.UpstreamKey == "" {
		return b
	}
	return bytes.ReplaceAll(b, []byte(s.cfg.UpstreamKey), []byte("[redacted]"))
}
