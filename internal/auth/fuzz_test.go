package auth

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzVerifyCapability seeds: testdata/fuzz/.

// FuzzVerifyCapability: a made-up token never verifies; the ones that do are
// exactly the tokens the server issues, for their key, before their expiry.
func FuzzVerifyCapability(f *testing.F) {
	s := secServer(secSecret)
	now := time.Unix(1_800_000_000, 0)
	genuine := s.Capability("0123456789abcdef0123456789abcdef", "order-42", now.Add(time.Hour))
	f.Add(genuine, "order-42")
	f.Add(genuine, "order-43")
	f.Add(s.Capability(Anonymous, "k", now), "k")
	f.Add(s.Capability("t", "k", now.Add(-time.Second)), "k")
	f.Add("v1.abc.t.AAAAAAAAAAAAAAAAAAAAAA", "k")
	f.Add("v1...", "")
	f.Add("garbage", "k")
	f.Fuzz(func(t *testing.T, token, key string) {
		tenant, ok := s.Verify(token, key, now)
		if !ok {
			if tenant != "" {
				t.Fatalf("a refused token returned tenant %q", tenant)
			}
			return
		}
		parts := strings.Split(token, ".")
		exp, err := strconv.ParseInt(parts[1], 36, 64)
		if err != nil || exp < now.Unix() {
			t.Fatalf("token %q verified with expiry %q at %d", token, parts[1], now.Unix())
		}
		if tenant != parts[2] || token != s.Capability(tenant, key, time.Unix(exp, 0)) {
			t.Fatalf("token %q verified for key %q but is not the token the server issues", token, key)
		}
		if _, ok := secServer(secSecret2).Verify(token, key, now); ok {
			t.Fatalf("token %q verified under another secret", token)
		}
	})
}
