package auth_test

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/resume"
)

// TestProxyKeysParse: a named line carries its settings; a bare line stays
// a key named by a label derived from it.
func TestProxyKeysParse(t *testing.T) {
	keys, err := auth.ParseKeys("keys", `# team keys
team-a 3f9c1a7e5b2d8c40aa budget=25/day models=gpt-*,claude-*
Zq8xW2mN5pR7tY1u   # a bare key
ops 9d8c7b6a5f4e3d2c1b paths=/v1/embeddings,/v1/chat/completions budget=0.5/hour
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Fatalf("%d keys, want 3", len(keys))
	}
	a := keys[0]
	if a.Name != "team-a" || a.Value != "3f9c1a7e5b2d8c40aa" || a.Budget != (cost.Budget{Limit: 25, Period: cost.Day}) ||
		strings.Join(a.Models, ",") != "gpt-*,claude-*" || a.Line != 2 {
		t.Errorf("team-a: %+v", a)
	}
	if b := keys[1]; b.Name != "" || b.Value != "Zq8xW2mN5pR7tY1u" || b.Line != 3 {
		t.Errorf("bare: %+v", b)
	}
	if c := keys[2]; c.Budget != (cost.Budget{Limit: 0.5, Period: cost.Hour}) || len(c.Paths) != 2 {
		t.Errorf("ops: %+v", c)
	}
}

// TestProxyKeysRefused: a short or plain key, a bad name, an unknown or
// repeated setting, a duplicate name or key — each refused with its file
// and line.
func TestProxyKeysRefused(t *testing.T) {
	for text, want := range map[string]string{
		"\nteam-a short1":                         "keys:2: the key is 6 characters long",
		"pk-1":                                    "keys:1: the key is 4 characters long",
		"aaaaaaaabbbbbbbb1":                       "keys:1: the key has 3 different characters",
		"abcdefghijklmnopq":                       "keys:1: the key is of one class",
		"team/a 3f9c1a7e5b2d8c40aa":               "keys:1: the name",
		"team-a 3f9c1a7e5b2d8c40aa colour=red":    "keys:1: unknown setting \"colour\"",
		"team-a 3f9c1a7e5b2d8c40aa budget=5/week": "keys:1: cost: invalid budget",
		"team-a 3f9c1a7e5b2d8c40aa budget=5/day budget=6/day":  "keys:1: budget= given twice",
		"team-a 3f9c1a7e5b2d8c40aa paths=v1/chat":              "does not start with /",
		"team-a 3f9c1a7e5b2d8c40aa\nteam-a 9d8c7b6a5f4e3d2c1b": "keys:2: the name \"team-a\" again (first on line 1)",
		"team-a 3f9c1a7e5b2d8c40aa\nteam-b 3f9c1a7e5b2d8c40aa": "keys:2: the key of \"team-a\" again (first on line 1)",
		"# nothing": "keys holds no key",
	} {
		_, err := auth.ParseKeys("keys", text)
		if !errors.Is(err, auth.ErrInvalidKeys) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error with %q", text, err, want)
		}
	}
}

// TestProxyKeysCaller: a request names its key's name and limits; the
// tenant of a key is the HMAC it always was, so existing records still
// match; a bare key's name is derived from it, never the key; a path its
// key may not call is refused, and a model it may not use is told.
func TestProxyKeysCaller(t *testing.T) {
	keys, err := auth.ParseKeys("keys", "team-a 3f9c1a7e5b2d8c40aa budget=25/day models=gpt-*\nZq8xW2mN5pR7tY1u\nops 9d8c7b6a5f4e3d2c1b paths=/v1/embeddings\n")
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Mode: auth.Static, Secret: keysSecret, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer 3f9c1a7e5b2d8c40aa")
	who, err := a.Caller(r)
	if err != nil || who.Name != "team-a" || who.Tenant != a.TenantOf("3f9c1a7e5b2d8c40aa") || who.Budget.Limit != 25 {
		t.Fatalf("team-a: %+v, %v", who, err)
	}
	if !who.AllowsModel("gpt-4o") || who.AllowsModel("claude-3") || !who.AllowsModel("") {
		t.Error("models=gpt-*: gpt-4o allowed, claude-3 refused, no model allowed")
	}
	r.Header.Set("Authorization", "Bearer Zq8xW2mN5pR7tY1u")
	who, err = a.Caller(r)
	if want := "key-" + a.TenantOf("Zq8xW2mN5pR7tY1u")[:6]; err != nil || who.Name != want || strings.Contains(who.Name, "Zq8x") {
		t.Errorf("bare key: %+v, %v; want the name %s", who, err, want)
	}
	if got := a.NameOf(resume.TenantHash(who.Tenant)); got != who.Name {
		t.Errorf("NameOf(the record's tenant hash) = %q, want %q", got, who.Name)
	}
	r.Header.Set("Authorization", "Bearer 9d8c7b6a5f4e3d2c1b")
	if _, err := a.Caller(r); !errors.Is(err, auth.ErrPathNotAllowed) {
		t.Errorf("ops on /v1/chat/completions: %v, want ErrPathNotAllowed", err)
	}
	r2 := httptest.NewRequest("GET", "/v1/streams/k1", nil)
	r2.Header.Set("Authorization", "Bearer 9d8c7b6a5f4e3d2c1b")
	if _, err := a.Caller(r2); err != nil {
		t.Errorf("ops reading its stream: %v", err)
	}
	if a.Label("team-a") != "team-a" || a.Label("nobody") != auth.Other || a.Label("") != auth.Other {
		t.Error("Label: a configured name is its own label, anything else other")
	}
}

// TestProxyKeysSet: SetKeys replaces the keys in force; a bad set is
// refused and the keys in force stay.
func TestProxyKeysSet(t *testing.T) {
	a, err := auth.New(auth.Config{Mode: auth.Static, Secret: keysSecret, Keys: []auth.Key{{Name: "a", Value: "3f9c1a7e5b2d8c40aa"}}})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	r.Header.Set("Authorization", "Bearer 9d8c7b6a5f4e3d2c1b")
	if _, err := a.Caller(r); !errors.Is(err, auth.ErrBadKey) {
		t.Fatalf("b before it is added: %v", err)
	}
	if err := a.SetKeys([]auth.Key{{Name: "a", Value: "3f9c1a7e5b2d8c40aa"}, {Name: "a", Value: "9d8c7b6a5f4e3d2c1b", Line: 2}}); !errors.Is(err, auth.ErrInvalidKeys) {
		t.Fatalf("a duplicate name: %v", err)
	}
	if _, err := a.Caller(r); !errors.Is(err, auth.ErrBadKey) {
		t.Fatalf("b after a refused set: %v", err)
	}
	if err := a.SetKeys([]auth.Key{{Name: "a", Value: "3f9c1a7e5b2d8c40aa"}, {Name: "b", Value: "9d8c7b6a5f4e3d2c1b"}}); err != nil {
		t.Fatal(err)
	}
	if who, err := a.Caller(r); err != nil || who.Name != "b" {
		t.Fatalf("b once added: %+v, %v", who, err)
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"gpt-*", "gpt-4o", true}, {"gpt-*", "gpt-", true}, {"gpt-*", "claude", false}, {"*mini", "gpt-4o-mini", true},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxc", false}, {"exact", "exact", true}, {"exact", "exactly", false},
		{"meta/*", "meta/llama-3", true}, {"*", "", true}, {"a*a", "a", false},
	} {
		if got := auth.Glob(tc.pattern, tc.s); got != tc.want {
			t.Errorf("Glob(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

var keysSecret = []byte("proxy-keys-test-secret-0123456789")
