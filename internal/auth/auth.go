// Package auth says who a caller is and what reaches the upstream on its
// behalf: the tenant a request's credential names (an HMAC under the server
// secret, so credentials are never stored), the capability tokens that let
// a Location URL be read without headers, and the credential the upstream
// gets in each auth mode.
//
// It does no I/O and knows nothing of keys' records or streams; it must
// never log or return a credential.
package auth

import (
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
)

// Mode says who may call the proxy and what reaches the upstream.
type Mode string

// Auth modes.
const (
	// Passthrough forwards the caller's Authorization to the upstream; the
	// tenant is derived from it (no credential: the anonymous tenant).
	Passthrough Mode = "passthrough"
	// Static accepts only the configured proxy keys; the upstream gets
	// Config.UpstreamKey, which never reaches clients.
	Static Mode = "static"
	// None serves one anonymous tenant (the demo); the upstream gets
	// Config.UpstreamKey if set.
	None Mode = "none"
)

// Anonymous is the tenant of callers without a credential (and of every
// caller in None).
const Anonymous = "anonymous"

// DefaultCapabilityTTL is how long a capability token is valid by default.
const DefaultCapabilityTTL = 24 * time.Hour

// The headers an upstream key can be sent in (Config.UpstreamHeader).
const (
	// HeaderBearer sends the key as Authorization: Bearer KEY (OpenAI and
	// the OpenAI-compatible APIs).
	HeaderBearer = "bearer"
	// HeaderXAPIKey sends it as x-api-key: KEY (Anthropic).
	HeaderXAPIKey = "x-api-key"
	// HeaderAPIKey sends it as api-key: KEY (Azure OpenAI).
	HeaderAPIKey = "api-key"
)

// ErrInvalidOption wraps every configuration error.
var ErrInvalidOption = errors.New("auth: invalid option")

// ErrNoKey is returned by Tenant in Static mode for a request without a
// credential.
var ErrNoKey = errors.New("auth: no API key")

// ErrBadKey is returned by Tenant in Static mode for a credential that is
// not one of the proxy keys.
var ErrBadKey = errors.New("auth: API key not valid for this proxy")

// Config configures an Auth.
type Config struct {
	// Mode is the auth mode. Default Passthrough.
	Mode Mode
	// Secret keys tenant ids and capabilities. Required, at least 16 bytes.
	Secret []byte
	// TenantHeader, when set, names the header whose value is the caller's
	// credential instead of the bearer token. Default "" (Authorization).
	TenantHeader string
	// ProxyKeys are keys callers may present in Static mode, each named by
	// Auth.DerivedName.
	ProxyKeys []string
	// Keys are further keys callers may present in Static mode, named and
	// with their limits (ParseKeys reads them from a file).
	Keys []Key
	// UpstreamKey is sent to the upstream in Static and None, in the
	// UpstreamHeader. It never reaches clients. Default none.
	UpstreamKey string
	// UpstreamHeader says how UpstreamKey is sent: HeaderBearer
	// (Authorization: Bearer), HeaderXAPIKey (x-api-key, Anthropic's) or
	// HeaderAPIKey (api-key, Azure OpenAI's). Default "": x-api-key toward
	// an Anthropic-shaped API, a bearer token toward the others.
	UpstreamHeader string
	// CapabilityTTL is how long a Location's capability token is valid.
	// Default DefaultCapabilityTTL.
	CapabilityTTL time.Duration
}

// Auth derives tenants and upstream credentials under one configuration.
type Auth struct {
	cfg  Config
	keys *keyring    // the proxy keys in force (SetKeys)
	aead cipher.AEAD // Seal's
}

// New returns an Auth.
func New(cfg Config) (*Auth, error) {
	if len(cfg.Secret) < 16 {
		return nil, fmt.Errorf("%w: secret must be at least 16 bytes", ErrInvalidOption)
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = Passthrough
	case Passthrough, None:
	case Static:
		if len(cfg.ProxyKeys)+len(cfg.Keys) == 0 {
			return nil, fmt.Errorf("%w: auth static needs proxy keys", ErrInvalidOption)
		}
	default:
		return nil, fmt.Errorf("%w: auth mode %q (passthrough, static or none)", ErrInvalidOption, cfg.Mode)
	}
	if err := checkHeader(cfg.UpstreamHeader); err != nil {
		return nil, err
	}
	if cfg.CapabilityTTL <= 0 {
		cfg.CapabilityTTL = DefaultCapabilityTTL
	}
	a := &Auth{cfg: cfg, keys: &keyring{}, aead: sealer(cfg.Secret)}
	keys := append([]Key(nil), cfg.Keys...)
	for _, k := range cfg.ProxyKeys {
		keys = append(keys, Key{Value: k})
	}
	if err := a.SetKeys(keys); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return a, nil
}

// WithUpstreamKey returns an Auth like a that sends key to the upstream in
// Static and None (an upstream of its own, with its own key).
func (a *Auth) WithUpstreamKey(key string) *Auth {
	b := *a
	b.cfg.UpstreamKey = key
	return &b
}

// WithUpstreamHeader returns an Auth like a that sends its upstream key in
// header (Config.UpstreamHeader; "" the default), or an error wrapping
// ErrInvalidOption for an unknown header.
func (a *Auth) WithUpstreamHeader(header string) (*Auth, error) {
	if err := checkHeader(header); err != nil {
		return nil, err
	}
	b := *a
	b.cfg.UpstreamHeader = header
	return &b, nil
}

func checkHeader(h string) error {
	switch h {
	case "", HeaderBearer, HeaderXAPIKey, HeaderAPIKey:
		return nil
	}
	return fmt.Errorf("%w: upstream key header %q (%s, %s or %s)", ErrInvalidOption, h, HeaderBearer, HeaderXAPIKey, HeaderAPIKey)
}

// SharesKey reports whether callers reach the upstream with a key of the
// proxy's own that several tenants share (Static): what one caller asks
// the upstream by an id, another's creation could answer.
func (a *Auth) SharesKey() bool { return a.cfg.Mode == Static }

// CapabilityTTL is how long the capabilities Capability issues are valid.
func (a *Auth) CapabilityTTL() time.Duration { return a.cfg.CapabilityTTL }

// credential returns the caller's credential: the configured tenant header,
// or the bearer token, or Anthropic's x-api-key, or Azure OpenAI's api-key
// (a bearer is what Claude Code sends with ANTHROPIC_AUTH_TOKEN; each names
// the same tenant).
func (a *Auth) credential(r *http.Request) string {
	if a.cfg.TenantHeader != "" {
		return strings.TrimSpace(r.Header.Get(a.cfg.TenantHeader))
	}
	// RFC 9110: the scheme is case-insensitive, any whitespace separates it.
	v := strings.TrimSpace(r.Header.Get("Authorization"))
	if i := strings.IndexAny(v, " \t"); i >= 0 && strings.EqualFold(v[:i], "Bearer") {
		if c := strings.TrimSpace(v[i+1:]); c != "" {
			return c
		}
	}
	if c := strings.TrimSpace(r.Header.Get("X-Api-Key")); c != "" {
		return c
	}
	return strings.TrimSpace(r.Header.Get("Api-Key"))
}

// TenantOf derives a tenant id from a credential: HMAC-SHA256 under the
// server secret, so the credential itself is never stored.
func (a *Auth) TenantOf(credential string) string {
	m := hmac.New(sha256.New, a.cfg.Secret)
	m.Write([]byte("tenant\x00"))
	m.Write([]byte(credential))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// Tenant returns the caller's tenant; ErrNoKey, ErrBadKey or
// ErrPathNotAllowed when Static mode refuses it (Caller).
func (a *Auth) Tenant(r *http.Request) (string, error) {
	c, err := a.Caller(r)
	return c.Tenant, err
}

// Decorate sets the upstream's credential on req: the caller's in
// Passthrough, the configured key otherwise — in the UpstreamHeader, by
// default as x-api-key toward an Anthropic-shaped API and as a bearer
// token toward the others. With a key of
// the proxy's own it drops req's Accept-Encoding, so that the answer comes
// readable (the transport then asks for gzip and decodes it) and
// RedactResponse can find the key in it.
func (a *Auth) Decorate(req *http.Request, caller http.Header, shape apierr.Shape) {
	if a.hidden() != "" {
		req.Header.Del("Accept-Encoding")
	}
	if a.cfg.Mode == Passthrough {
		// The caller's own account: its credential, organization and project.
		for _, h := range forwarded {
			if v := caller.Values(h); len(v) > 0 {
				req.Header[http.CanonicalHeaderKey(h)] = v
			}
		}
		return
	}
	// The proxy's key, and its owner's choice of organization and project:
	// a caller must not pick which of them is billed.
	for _, h := range forwarded {
		req.Header.Del(h)
	}
	if a.cfg.UpstreamKey == "" {
		return
	}
	header := a.cfg.UpstreamHeader
	if header == "" && shape == apierr.Anthropic {
		header = HeaderXAPIKey
	}
	switch header {
	case HeaderXAPIKey:
		req.Header.Set("X-Api-Key", a.cfg.UpstreamKey)
	case HeaderAPIKey:
		req.Header.Set("Api-Key", a.cfg.UpstreamKey)
	default:
		req.Header.Set("Authorization", "Bearer "+a.cfg.UpstreamKey)
	}
}
