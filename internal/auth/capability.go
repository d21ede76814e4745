package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// A capability is a signed, expiring grant to read one key of one tenant,
// carried in the Location URL (?token=) so that EventSource, <audio> and
// WebSocket clients can resume without headers. Format:
//
//	v1.<expiry, unix seconds, base 36>.<tenant id>.<MAC, base64url>
//
// MAC = HMAC-SHA256(secret, "cap", tenant, key, expiry), 128 bits.
const capVersion = "v1"

func (a *Auth) capMAC(tenant, key, exp string) string {
	m := hmac.New(sha256.New, a.cfg.Secret)
	for _, part := range []string{"cap", tenant, key, exp} {
		m.Write([]byte(part))
		m.Write([]byte{0})
	}
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// Capability returns a token granting reads of key in tenant until exp.
func (a *Auth) Capability(tenant, key string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 36)
	return capVersion + "." + e + "." + tenant + "." + a.capMAC(tenant, key, e)
}

// Verify returns the tenant a valid, unexpired token grants key in.
func (a *Auth) Verify(token, key string, now time.Time) (string, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != capVersion || len(token) > 256 {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 36, 64)
	if err != nil || now.Unix() > exp {
		return "", false
	}
	want := a.capMAC(parts[2], key, parts[1])
	if !hmac.Equal([]byte(want), []byte(parts[3])) {
		return "", false
	}
	return parts[2], true
}
