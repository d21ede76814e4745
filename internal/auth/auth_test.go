package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
)

// White-box tests of the capability tokens (capability.go) and the tenant
// derivation (auth.go). End-to-end: tests/security_test.go.

var (
	secSecret  = []byte("stream-security-test-secret-0123")
	secSecret2 = []byte("stream-security-test-secret-4567")
)

func secServer(secret []byte) *Auth { return secAuth(Config{Secret: secret}) }

func secAuth(cfg Config) *Auth {
	a, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return a
}

// secExp is a fixed expiry with a sub-second part (tokens keep whole seconds).
var secExp = time.Unix(1_900_000_000, 700_000_000)

func TestCapabilityRoundTrip(t *testing.T) {
	s := secServer(secSecret)
	for _, tc := range []struct{ tenant, key string }{
		{"0123456789abcdef0123456789abcdef", "k1"},
		{Anonymous, "rk_00112233445566778899aabbccddeeff"},
		{"0123456789abcdef0123456789abcdef", strings.Repeat("~", 255)},
		{"t", `"quoted-looking"`},
	} {
		tok := s.Capability(tc.tenant, tc.key, secExp)
		parts := strings.Split(tok, ".")
		if len(parts) != 4 || parts[0] != "v1" || parts[2] != tc.tenant || len(parts[3]) != 22 {
			t.Fatalf("token %q: want v1.<exp>.<tenant>.<22-char MAC>", tok)
		}
		if exp, err := strconv.ParseInt(parts[1], 36, 64); err != nil || exp != secExp.Unix() {
			t.Errorf("expiry %q = %d, want %d", parts[1], exp, secExp.Unix())
		}
		if strings.ContainsAny(tok, "+/=?&# %") {
			t.Errorf("token %q is not URL-safe", tok)
		}
		got, ok := s.Verify(tok, tc.key, secExp.Add(-time.Hour))
		if !ok || got != tc.tenant {
			t.Errorf("verify(%q) = %q, %v; want %q", tok, got, ok, tc.tenant)
		}
		if again := s.Capability(tc.tenant, tc.key, secExp); again != tok {
			t.Errorf("capability is not deterministic: %q then %q", tok, again)
		}
	}
}

// TestCapabilityExpiryBoundary: a token is valid through its expiry second
// (whole seconds, the sub-second part dropped) and not a second later.
func TestCapabilityExpiryBoundary(t *testing.T) {
	s := secServer(secSecret)
	tok := s.Capability("tenant", "key", secExp)
	whole := time.Unix(secExp.Unix(), 0)
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{
		{time.Unix(0, 0), true},
		{whole.Add(-time.Nanosecond), true},
		{whole, true},
		{secExp, true},
		{whole.Add(999 * time.Millisecond), true},
		{whole.Add(time.Second), false},
		{whole.Add(time.Second + time.Nanosecond), false},
		{whole.Add(24 * time.Hour), false},
	} {
		if _, ok := s.Verify(tok, "key", tc.now); ok != tc.want {
			t.Errorf("now = expiry %+v: valid %v, want %v", tc.now.Sub(whole), ok, tc.want)
		}
	}
	// An expiry in the past (or before 1970) never verifies.
	for _, exp := range []time.Time{time.Unix(-1, 0), time.Unix(-1<<40, 0), time.Unix(0, 0)} {
		if _, ok := s.Verify(s.Capability("tenant", "key", exp), "key", time.Unix(1, 0)); ok {
			t.Errorf("a token that expired at %d verified", exp.Unix())
		}
	}
}

// TestCapabilityTampering: changing any field, any single character or the
// shape of a token makes it invalid.
func TestCapabilityTampering(t *testing.T) {
	s := secServer(secSecret)
	const tenant, key = "0123456789abcdef0123456789abcdef", "order-42"
	now := secExp.Add(-time.Minute)
	tok := s.Capability(tenant, key, secExp)
	p := strings.Split(tok, ".")
	join := func(parts ...string) string { return strings.Join(parts, ".") }
	later := strconv.FormatInt(secExp.Unix()+3600, 36)
	forged := map[string]string{
		"version v2":           join("v2", p[1], p[2], p[3]),
		"version V1":           join("V1", p[1], p[2], p[3]),
		"version empty":        join("", p[1], p[2], p[3]),
		"expiry later":         join(p[0], later, p[2], p[3]),
		"expiry with plus":     join(p[0], "+"+p[1], p[2], p[3]),
		"expiry leading zero":  join(p[0], "0"+p[1], p[2], p[3]),
		"expiry upper case":    join(p[0], strings.ToUpper(p[1]), p[2], p[3]),
		"expiry not a number":  join(p[0], "zz!", p[2], p[3]),
		"expiry empty":         join(p[0], "", p[2], p[3]),
		"tenant Anonymous":     join(p[0], p[1], Anonymous, p[3]),
		"tenant empty":         join(p[0], p[1], "", p[3]),
		"tenant prefix":        join(p[0], p[1], tenant[:31], p[3]),
		"tenant upper case":    join(p[0], p[1], strings.ToUpper(tenant), p[3]),
		"tenant with NUL":      join(p[0], p[1], tenant+"\x00"+key, p[3]),
		"mac empty":            join(p[0], p[1], p[2], ""),
		"mac truncated":        join(p[0], p[1], p[2], p[3][:21]),
		"mac extended":         join(p[0], p[1], p[2], p[3]+"A"),
		"mac padded":           join(p[0], p[1], p[2], p[3]+"=="),
		"mac std base64":       join(p[0], p[1], p[2], strings.NewReplacer("-", "+", "_", "/").Replace(p[3])+"x"),
		"three parts":          join(p[0], p[1], p[3]),
		"five parts":           tok + ".",
		"leading dot":          "." + tok,
		"spaces":               " " + tok,
		"empty":                "",
		"MAC of the full HMAC": join(p[0], p[1], p[2], fullMAC(tenant, key, p[1])),
	}
	for name, f := range forged {
		if f == tok {
			t.Fatalf("%s: not a change", name)
		}
		if got, ok := s.Verify(f, key, now); ok {
			t.Errorf("%s: %q verified (tenant %q)", name, f, got)
		}
	}
	// Every single-byte change anywhere.
	for i := range len(tok) {
		for _, c := range []byte{'A', 'a', '0', '.', '-', '_', 0, 0xff} {
			if tok[i] == c {
				continue
			}
			b := []byte(tok)
			b[i] = c
			if _, ok := s.Verify(string(b), key, now); ok {
				t.Errorf("byte %d set to %q: %q verified", i, c, b)
			}
		}
	}
	if _, ok := s.Verify(tok, key, now); !ok {
		t.Fatal("the genuine token does not verify")
	}
	// Genuine but over 256 bytes (tenant ids are 32): refused before any MAC.
	long := strings.Repeat("t", 230)
	if _, ok := s.Verify(s.Capability(long, key, secExp), key, now); ok {
		t.Error("a token over 256 bytes verified")
	}
	if _, ok := s.Verify(s.Capability(long[:200], key, secExp), key, now); !ok {
		t.Error("a genuine token under 256 bytes did not verify")
	}
}

// fullMAC is the untruncated HMAC, base64url: a guess at the MAC's form.
func fullMAC(tenant, key, exp string) string {
	m := hmac.New(sha256.New, secSecret)
	for _, part := range []string{"cap", tenant, key, exp} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// TestCapabilityOtherKeyOrSecret: a token grants its key only, under its
// server secret only.
func TestCapabilityOtherKeyOrSecret(t *testing.T) {
	s, s2 := secServer(secSecret), secServer(secSecret2)
	now := secExp.Add(-time.Minute)
	tok := s.Capability("tenant", "key-1", secExp)
	for _, other := range []string{"key-2", "key-1 ", "Key-1", "key-", "key-10", `"key-1"`, ""} {
		if _, ok := s.Verify(tok, other, now); ok {
			t.Errorf("the token of key-1 opened %q", other)
		}
	}
	if _, ok := s2.Verify(tok, "key-1", now); ok {
		t.Error("a token verified under another secret")
	}
	if s.Capability("tenant", "key-1", secExp) == s2.Capability("tenant", "key-1", secExp) {
		t.Error("two secrets make the same token")
	}
	// Tenant/key boundaries are unambiguous: ("ab", "c") is not ("a", "bc").
	if s.capMAC("ab", "c", "1") == s.capMAC("a", "bc", "1") || s.capMAC("a", "b", "c1") == s.capMAC("a", "bc", "1") {
		t.Error("capMAC's fields are not separated")
	}
	// A token's MAC is not the tenant id of anything (separate HMAC domains).
	if s.capMAC("tenant", "key-1", "x") == s.TenantOf("tenant") {
		t.Error("capability and tenant MACs share a domain")
	}
}

// TestTenantOf: a tenant id is a keyed, deterministic, one-way function of
// the credential.
func TestTenantOf(t *testing.T) {
	s, s2 := secServer(secSecret), secServer(secSecret2)
	seen := map[string]string{}
	creds := []string{"", " ", "a", "A", "sk-live-1234", "sk-live-1234 ", "Anonymous", strings.Repeat("x", 10000), "\x00", "tenant\x00"}
	for i := range 2000 {
		creds = append(creds, "cred-"+strconv.Itoa(i))
	}
	for _, c := range creds {
		id := s.TenantOf(c)
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("tenantOf(%q) = %q: want 32 lowercase hex digits", c, id)
		}
		if id == Anonymous {
			t.Fatal("a credential maps to the Anonymous tenant")
		}
		if c != "" && len(c) >= 4 && strings.Contains(id, c) {
			t.Errorf("tenantOf(%q) contains the credential", c)
		}
		if prev, dup := seen[id]; dup {
			t.Fatalf("tenantOf(%q) == tenantOf(%q)", c, prev)
		}
		seen[id] = c
		if s.TenantOf(c) != id {
			t.Fatalf("tenantOf(%q) is not deterministic", c)
		}
		if s2.TenantOf(c) == id {
			t.Errorf("tenantOf(%q) is the same under another secret", c)
		}
	}
	// Not a plain hash or HMAC of the credential: domain-separated.
	plain := hmac.New(sha256.New, secSecret)
	plain.Write([]byte("sk-live-1234"))
	if hex.EncodeToString(plain.Sum(nil)[:16]) == s.TenantOf("sk-live-1234") {
		t.Error("tenantOf is HMAC(secret, credential) without a domain")
	}
	h := sha256.Sum256([]byte("sk-live-1234"))
	if hex.EncodeToString(h[:16]) == s.TenantOf("sk-live-1234") {
		t.Error("tenantOf is an unkeyed hash")
	}
}

func secRequest(header ...string) *http.Request {
	r := httptest.NewRequest("GET", "/v1/streams/k", nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// TestAuthenticate: the tenant and refusal of every auth mode.
func TestAuthenticate(t *testing.T) {
	pass := secAuth(Config{Secret: secSecret, Mode: Passthrough})
	none := secAuth(Config{Secret: secSecret, Mode: None})
	static := secAuth(Config{Secret: secSecret, Mode: Static, ProxyKeys: []string{"pk-1"}})
	header := secAuth(Config{Secret: secSecret, Mode: Passthrough, TenantHeader: "X-Tenant"})

	tests := []struct {
		name   string
		s      *Auth
		header []string
		tenant string
		err    error
	}{
		{"passthrough bearer", pass, []string{"Authorization", "Bearer sk-a"}, pass.TenantOf("sk-a"), nil},
		{"passthrough bearer spaces", pass, []string{"Authorization", "Bearer   sk-a  "}, pass.TenantOf("sk-a"), nil},
		{"passthrough none", pass, nil, Anonymous, nil},
		{"passthrough empty bearer", pass, []string{"Authorization", "Bearer "}, Anonymous, nil},
		{"passthrough first header wins", pass, []string{"Authorization", "Bearer sk-a", "Authorization", "Bearer sk-b"}, pass.TenantOf("sk-a"), nil},
		{"none ignores bearers", none, []string{"Authorization", "Bearer sk-a"}, Anonymous, nil},
		{"static right key", static, []string{"Authorization", "Bearer pk-1"}, static.TenantOf("pk-1"), nil},
		{"static no key", static, nil, "", ErrNoKey},
		{"static empty bearer", static, []string{"Authorization", "Bearer  "}, "", ErrNoKey},
		{"static basic", static, []string{"Authorization", "Basic cGstMQ=="}, "", ErrNoKey},
		{"static wrong key", static, []string{"Authorization", "Bearer pk-2"}, "", ErrBadKey},
		{"static key prefix", static, []string{"Authorization", "Bearer pk-"}, "", ErrBadKey},
		{"tenant header", header, []string{"X-Tenant", " team-a ", "Authorization", "Bearer sk-a"}, header.TenantOf("team-a"), nil},
		{"tenant header, bearer only", header, []string{"Authorization", "Bearer sk-a"}, Anonymous, nil},
	}
	for _, tc := range tests {
		tenant, err := tc.s.Tenant(secRequest(tc.header...))
		if tenant != tc.tenant || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, tenant, err, tc.tenant, tc.err)
		}
	}
}

// TestUpstreamAuth: what credential each mode sends upstream.
func TestUpstreamAuth(t *testing.T) {
	caller := http.Header{"Authorization": {"Bearer sk-caller", "Bearer sk-second"}}
	for _, tc := range []struct {
		mode        Mode
		upstreamKey string
		caller      http.Header
		want        []string
	}{
		{Passthrough, "", caller, []string{"Bearer sk-caller", "Bearer sk-second"}},
		{Passthrough, "sk-up", caller, []string{"Bearer sk-caller", "Bearer sk-second"}},
		{Passthrough, "sk-up", http.Header{}, nil},
		{Static, "sk-up", caller, []string{"Bearer sk-up"}},
		{Static, "", caller, nil},
		{None, "sk-up", caller, []string{"Bearer sk-up"}},
		{None, "", caller, nil},
	} {
		cfg := Config{Secret: secSecret, Mode: tc.mode, UpstreamKey: tc.upstreamKey}
		if tc.mode == Static {
			cfg.ProxyKeys = []string{"pk-1"}
		}
		s := secAuth(cfg)
		req := httptest.NewRequest("POST", "http://upstream/v1/chat/completions", nil)
		s.Decorate(req, tc.caller, apierr.OpenAI)
		if got := req.Header.Values("Authorization"); strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s with upstream key %q: %q, want %q", tc.mode, tc.upstreamKey, got, tc.want)
		}
	}
}

// TestBearerSchemeCaseInsensitive: RFC 9110 §11.1, the scheme is
// case-insensitive; passthrough forwards the header anyway, so such a
// caller must not be anonymous.
func TestBearerSchemeCaseInsensitive(t *testing.T) {
	s := secAuth(Config{Secret: secSecret, Mode: Passthrough})
	for _, h := range []string{"bearer sk-a", "BEARER sk-a", "Bearer\tsk-a"} {
		if tenant, _ := s.Tenant(secRequest("Authorization", h)); tenant == Anonymous {
			t.Errorf("Authorization %q is the Anonymous tenant", h)
		}
	}
}

// TestAnthropicCredential: x-api-key names the same tenant as a bearer of
// the same credential (Claude Code sends either); static mode sends the
// upstream key as x-api-key toward an Anthropic-shaped API, and
// passthrough forwards the caller's.
func TestAnthropicCredential(t *testing.T) {
	pass := secAuth(Config{Secret: secSecret, Mode: Passthrough})
	bearer, _ := pass.Tenant(secRequest("Authorization", "Bearer sk-ant-1"))
	key, _ := pass.Tenant(secRequest("X-Api-Key", "sk-ant-1"))
	if bearer == Anonymous || bearer != key {
		t.Errorf("bearer tenant %q, x-api-key tenant %q: want the same, not anonymous", bearer, key)
	}
	if both, _ := pass.Tenant(secRequest("Authorization", "Bearer sk-a", "X-Api-Key", "sk-b")); both != pass.TenantOf("sk-a") {
		t.Errorf("with both, the tenant is %q, want the bearer's", both)
	}
	static := secAuth(Config{Secret: secSecret, Mode: Static, ProxyKeys: []string{"pk-1"}, UpstreamKey: "sk-up"})
	if tenant, err := static.Tenant(secRequest("X-Api-Key", "pk-1")); err != nil || tenant != static.TenantOf("pk-1") {
		t.Errorf("static x-api-key: %q, %v", tenant, err)
	}
	req := httptest.NewRequest("POST", "http://upstream/v1/messages", nil)
	static.Decorate(req, http.Header{"X-Api-Key": {"pk-1"}}, apierr.Anthropic)
	if req.Header.Get("X-Api-Key") != "sk-up" || req.Header.Get("Authorization") != "" {
		t.Errorf("static toward Anthropic: x-api-key %q, authorization %q", req.Header.Get("X-Api-Key"), req.Header.Get("Authorization"))
	}
	req = httptest.NewRequest("POST", "http://upstream/v1/messages", nil)
	pass.Decorate(req, http.Header{"X-Api-Key": {"sk-ant-1"}}, apierr.Anthropic)
	if req.Header.Get("X-Api-Key") != "sk-ant-1" {
		t.Errorf("passthrough x-api-key %q", req.Header.Get("X-Api-Key"))
	}
}

// TestUpstreamHeader: an upstream key goes in the header its upstream
// names (Azure OpenAI's api-key, Anthropic's x-api-key, a bearer token),
// whatever the caller's shape; an api-key names the caller's tenant and
// passes through in Passthrough; an unknown header is refused.
func TestUpstreamHeader(t *testing.T) {
	static := secAuth(Config{Secret: secSecret, Mode: Static, ProxyKeys: []string{"pk-1"}, UpstreamKey: "sk-up"})
	for _, c := range []struct {
		header, want, wantValue string
		shape                   apierr.Shape
	}{
		{HeaderAPIKey, "Api-Key", "sk-up", apierr.OpenAI},
		{HeaderXAPIKey, "X-Api-Key", "sk-up", apierr.OpenAI},
		{HeaderBearer, "Authorization", "Bearer sk-up", apierr.Anthropic},
		{"", "Authorization", "Bearer sk-up", apierr.OpenAI},
		{"", "X-Api-Key", "sk-up", apierr.Anthropic},
	} {
		a, err := static.WithUpstreamHeader(c.header)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("POST", "http://upstream/v1/chat/completions", nil)
		a.Decorate(req, http.Header{"Api-Key": {"pk-1"}, "Authorization": {"Bearer pk-1"}}, c.shape)
		if got := req.Header.Get(c.want); got != c.wantValue {
			t.Errorf("header %q, shape %v: %s %q, want %q", c.header, c.shape, c.want, got, c.wantValue)
		}
		for _, h := range []string{"Authorization", "X-Api-Key", "Api-Key"} {
			if h != c.want && req.Header.Get(h) != "" {
				t.Errorf("header %q: %s %q sent too", c.header, h, req.Header.Get(h))
			}
		}
	}
	if _, err := static.WithUpstreamHeader("cookie"); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("an unknown header: %v, want ErrInvalidOption", err)
	}
	pass := secAuth(Config{Secret: secSecret, Mode: Passthrough})
	if tenant, _ := pass.Tenant(secRequest("Api-Key", "az-1")); tenant != pass.TenantOf("az-1") {
		t.Errorf("api-key tenant %q, want the credential's", tenant)
	}
	req := httptest.NewRequest("POST", "http://upstream/openai/v1/chat/completions", nil)
	pass.Decorate(req, http.Header{"Api-Key": {"az-1"}}, apierr.OpenAI)
	if req.Header.Get("Api-Key") != "az-1" {
		t.Errorf("passthrough api-key %q", req.Header.Get("Api-Key"))
	}
}
