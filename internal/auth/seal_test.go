package auth

import (
	"bytes"
	"errors"
	"net/http"
	"reflect"
	"testing"
)

func TestSealOpens(t *testing.T) {
	a := secServer(secSecret)
	caller := http.Header{
		"Authorization":       {"Bearer sk-caller-secret"},
		"Openai-Organization": {"org-1"},
		"Accept":              {"text/event-stream"}, // not a credential: not kept
	}
	sealed := a.Seal("stream-1", caller)
	if sealed == nil {
		t.Fatal("a passthrough caller with a credential sealed to nil")
	}
	if bytes.Contains(sealed, []byte("sk-caller-secret")) || bytes.Contains(sealed, []byte("org-1")) {
		t.Fatal("the sealed caller holds its credential in clear")
	}
	got, err := a.Open("stream-1", sealed)
	if err != nil {
		t.Fatal(err)
	}
	want := http.Header{"Authorization": {"Bearer sk-caller-secret"}, "Openai-Organization": {"org-1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("opened %v, want %v", got, want)
	}
	// Another instance with the same secret, and an Auth with another
	// upstream key (a route's), open it too.
	if _, err := secServer(secSecret).WithUpstreamKey("k").Open("stream-1", sealed); err != nil {
		t.Fatalf("another instance: %v", err)
	}
	// Two seals of one caller differ (a fresh nonce each).
	if bytes.Equal(sealed, a.Seal("stream-1", caller)) {
		t.Fatal("two seals are equal")
	}
}

func TestSealRefuses(t *testing.T) {
	a := secServer(secSecret)
	sealed := a.Seal("stream-1", http.Header{"Authorization": {"Bearer sk-1"}})
	flipped := bytes.Clone(sealed)
	flipped[len(flipped)-1] ^= 1
	for name, open := range map[string]func() (http.Header, error){
		"another key's":    func() (http.Header, error) { return a.Open("stream-2", sealed) },
		"another secret's": func() (http.Header, error) { return secServer(secSecret2).Open("stream-1", sealed) },
		"damaged":          func() (http.Header, error) { return a.Open("stream-1", flipped) },
		"short":            func() (http.Header, error) { return a.Open("stream-1", sealed[:5]) },
	} {
		if h, err := open(); !errors.Is(err, ErrSealed) || h != nil {
			t.Errorf("%s: opened %v, %v; want ErrSealed", name, h, err)
		}
	}
}

func TestSealKeepsOnlyWhatDecorateTakes(t *testing.T) {
	withKey := http.Header{"Authorization": {"Bearer sk-1"}}
	for name, tc := range map[string]struct {
		a      *Auth
		caller http.Header
	}{
		"static: the proxy's key":    {secAuth(Config{Secret: secSecret, Mode: Static, ProxyKeys: []string{"p"}, UpstreamKey: "u"}), withKey},
		"none: the proxy's key":      {secAuth(Config{Secret: secSecret, Mode: None, UpstreamKey: "u"}), withKey},
		"passthrough, no credential": {secServer(secSecret), http.Header{"Accept": {"*/*"}}},
	} {
		if got := tc.a.Seal("stream-1", tc.caller); got != nil {
			t.Errorf("%s: sealed %d bytes, want nil", name, len(got))
		}
	}
	if h, err := secServer(secSecret).Open("stream-1", nil); h != nil || err != nil {
		t.Errorf("nothing sealed opened to %v, %v", h, err)
	}
}

// FuzzOpen: a sealed caller read from the store never panics Open, and
// opens only if it is a seal.
func FuzzOpen(f *testing.F) {
	a := secServer(secSecret)
	f.Add(a.Seal("stream-1", http.Header{"Authorization": {"Bearer sk-1"}}))
	f.Add([]byte{})
	f.Add([]byte("not sealed at all, but long enough for a nonce"))
	f.Fuzz(func(t *testing.T, sealed []byte) {
		h, err := a.Open("stream-1", sealed)
		if err != nil && h != nil {
			t.Fatalf("Open failed with headers %v", h)
		}
	})
}
