package resume

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// MaxKeyLen is the longest Idempotency-Key accepted.
const MaxKeyLen = 255

// ErrInvalidKey means an Idempotency-Key is empty, too long, not visible
// ASCII, or a dot segment ("." or "..").
var ErrInvalidKey = errors.New("resume: invalid idempotency key")

// ParseKey parses an Idempotency-Key header value. The IETF structured-field
// string form ("abc", with \" and \\ escapes) and the bare form (abc) name the
// same key. The key itself is 1–255 visible ASCII characters, and not "."
// or "..": a key is a path segment of its stream URL, where those two mean
// this and the parent directory, so clients and the router would resolve
// its Location to another path.
func ParseKey(v string) (string, error) {
	if strings.HasPrefix(v, `"`) {
		var err error
		if v, err = unquote(v); err != nil {
			return "", err
		}
	}
	if len(v) == 0 || len(v) > MaxKeyLen || v == "." || v == ".." {
		return "", ErrInvalidKey
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x21 || v[i] > 0x7e {
			return "", ErrInvalidKey
		}
	}
	return v, nil
}

// unquote decodes an RFC 8941 sf-string.
func unquote(v string) (string, error) {
	if len(v) < 2 || v[len(v)-1] != '"' {
		return "", ErrInvalidKey
	}
	in := v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch c {
		case '\\':
			i++
			if i == len(in) || (in[i] != '"' && in[i] != '\\') {
				return "", ErrInvalidKey
			}
			b.WriteByte(in[i])
		case '"':
			return "", ErrInvalidKey
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// NewKey returns a fresh random key for requests that came without one.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "rk_" + hex.EncodeToString(b[:])
}

// StreamID is the opaque, subject-safe id of key within tenant. Two tenants
// using the same key get different ids.
func StreamID(tenant, key string) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// TenantHash is what records, logs and the attempt log show of a tenant
// id (itself derived from a credential): it tells tenants apart and
// reveals neither.
func TenantHash(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(h[:8])
}
