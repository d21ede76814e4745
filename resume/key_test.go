package resume_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/resume"
)

// quote formats key as an RFC 8941 sf-string.
func quote(key string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(key) + `"`
}

func TestParseKey(t *testing.T) {
	long := strings.Repeat("k", resume.MaxKeyLen)
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr error
	}{
		{name: "bare", in: "abc-123_XYZ", want: "abc-123_XYZ"},
		{name: "bare single char", in: "a", want: "a"},
		{name: "sf-string", in: `"abc"`, want: "abc"},
		{name: "sf-string escaped quote", in: `"a\"b"`, want: `a"b`},
		{name: "sf-string escaped backslash", in: `"a\\b"`, want: `a\b`},
		{name: "sf-string only escapes", in: `"\\\""`, want: `\"`},
		{name: "bare with inner quote", in: `a"b`, want: `a"b`},
		{name: "bare with backslash", in: `a\b`, want: `a\b`},
		{name: "bare all punctuation", in: "!#$%&'()*+,-./:;<=>?@[]^_`{|}~", want: "!#$%&'()*+,-./:;<=>?@[]^_`{|}~"},
		{name: "255 chars bare", in: long, want: long},
		{name: "255 chars quoted", in: `"` + long + `"`, want: long},
		{name: "256 chars bare", in: long + "k", wantErr: resume.ErrInvalidKey},
		{name: "256 chars quoted", in: `"` + long + `k"`, wantErr: resume.ErrInvalidKey},
		{name: "255 chars after unescaping", in: `"` + strings.Repeat(`\\`, resume.MaxKeyLen) + `"`, want: strings.Repeat(`\`, resume.MaxKeyLen)},
		{name: "256 chars after unescaping", in: `"` + strings.Repeat(`\"`, resume.MaxKeyLen+1) + `"`, wantErr: resume.ErrInvalidKey},
		{name: "empty", in: "", wantErr: resume.ErrInvalidKey},
		{name: "empty sf-string", in: `""`, wantErr: resume.ErrInvalidKey},
		{name: "lone quote", in: `"`, wantErr: resume.ErrInvalidKey},
		{name: "unterminated quote", in: `"abc`, wantErr: resume.ErrInvalidKey},
		{name: "escaped closing quote", in: `"abc\"`, wantErr: resume.ErrInvalidKey},
		{name: "trailing backslash", in: `"abc\`, wantErr: resume.ErrInvalidKey},
		{name: "invalid escape n", in: `"a\nb"`, wantErr: resume.ErrInvalidKey},
		{name: "invalid escape x", in: `"a\x41"`, wantErr: resume.ErrInvalidKey},
		{name: "unescaped inner quote", in: `"a"b"`, wantErr: resume.ErrInvalidKey},
		{name: "text after sf-string", in: `"ab"c`, wantErr: resume.ErrInvalidKey},
		{name: "sf-string with parameters", in: `"ab";p=1`, wantErr: resume.ErrInvalidKey},
		{name: "space bare", in: "a b", wantErr: resume.ErrInvalidKey},
		{name: "space quoted", in: `"a b"`, wantErr: resume.ErrInvalidKey},
		{name: "leading space", in: " abc", wantErr: resume.ErrInvalidKey},
		{name: "trailing space", in: "abc ", wantErr: resume.ErrInvalidKey},
		{name: "tab", in: "a\tb", wantErr: resume.ErrInvalidKey},
		{name: "newline", in: "a\nb", wantErr: resume.ErrInvalidKey},
		{name: "NUL", in: "a\x00b", wantErr: resume.ErrInvalidKey},
		{name: "DEL", in: "a\x7fb", wantErr: resume.ErrInvalidKey},
		{name: "control char quoted", in: "\"a\x01b\"", wantErr: resume.ErrInvalidKey},
		{name: "non-ASCII", in: "clé", wantErr: resume.ErrInvalidKey},
		{name: "non-ASCII quoted", in: `"clé"`, wantErr: resume.ErrInvalidKey},
		{name: "invalid UTF-8", in: "a\xffb", wantErr: resume.ErrInvalidKey},
		{name: "dot", in: ".", wantErr: resume.ErrInvalidKey},
		{name: "dot dot", in: "..", wantErr: resume.ErrInvalidKey},
		{name: "dot quoted", in: `"."`, wantErr: resume.ErrInvalidKey},
		{name: "dot dot quoted", in: `".."`, wantErr: resume.ErrInvalidKey},
		{name: "three dots", in: "...", want: "..."},
		{name: "leading dot", in: ".a", want: ".a"},
		{name: "dots around", in: "..a..", want: "..a.."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resume.ParseKey(tc.in)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ParseKey(%q) error = %v, want %v", tc.in, err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("ParseKey(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestParseKeyForms: the bare and the sf-string form name the same key.
func TestParseKeyForms(t *testing.T) {
	for _, key := range []string{"abc", "rk_0123", `a\b`, "x!y~z", resume.NewKey()} {
		bare, err := resume.ParseKey(key)
		if err != nil {
			t.Fatalf("ParseKey(%q): %v", key, err)
		}
		quoted, err := resume.ParseKey(quote(key))
		if err != nil {
			t.Fatalf("ParseKey(%q): %v", quote(key), err)
		}
		if bare != quoted || bare != key {
			t.Errorf("bare %q and quoted %q forms of %q differ", bare, quoted, key)
		}
	}
}

func TestNewKey(t *testing.T) {
	re := regexp.MustCompile(`^rk_[0-9a-f]{32}$`)
	seen := map[string]bool{}
	for range 100 {
		k := resume.NewKey()
		if !re.MatchString(k) {
			t.Fatalf("NewKey() = %q, want rk_ and 32 hex digits", k)
		}
		if got, err := resume.ParseKey(k); err != nil || got != k {
			t.Fatalf("ParseKey(NewKey()) = %q, %v", got, err)
		}
		if seen[k] {
			t.Fatalf("NewKey() repeated %q", k)
		}
		seen[k] = true
	}
}

func TestStreamID(t *testing.T) {
	subjectSafe := regexp.MustCompile(`^[0-9a-f]{32}$`)
	tests := []struct {
		name     string
		a, b     [2]string // tenant, key
		wantSame bool
	}{
		{name: "same tenant and key", a: [2]string{"t1", "k"}, b: [2]string{"t1", "k"}, wantSame: true},
		{name: "different tenant", a: [2]string{"t1", "k"}, b: [2]string{"t2", "k"}},
		{name: "different key", a: [2]string{"t1", "k1"}, b: [2]string{"t1", "k2"}},
		{name: "empty tenant", a: [2]string{"", "k"}, b: [2]string{"t", "k"}},
		{name: "boundary shifted", a: [2]string{"ab", "c"}, b: [2]string{"a", "bc"}},
		{name: "separator in key", a: [2]string{"a", "\x00b"}, b: [2]string{"a\x00", "b"}, wantSame: true}, // keys never hold NUL
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := resume.StreamID(tc.a[0], tc.a[1]), resume.StreamID(tc.b[0], tc.b[1])
			for _, id := range []string{a, b} {
				if !subjectSafe.MatchString(id) {
					t.Fatalf("StreamID = %q, want 32 lowercase hex digits", id)
				}
			}
			if (a == b) != tc.wantSame {
				t.Fatalf("StreamID%q = %s, StreamID%q = %s, want same: %t", tc.a, a, tc.b, b, tc.wantSame)
			}
		})
	}
}

func TestFingerprint(t *testing.T) {
	hex64 := regexp.MustCompile(`^[0-9a-f]{64}$`)
	base := resume.Fingerprint("/v1/chat/completions", []byte(`{"a":1}`))
	if !hex64.MatchString(base) {
		t.Fatalf("Fingerprint = %q, want 64 hex digits", base)
	}
	tests := []struct {
		name     string
		path     string
		body     []byte
		wantSame bool
	}{
		{name: "same", path: "/v1/chat/completions", body: []byte(`{"a":1}`), wantSame: true},
		{name: "other path", path: "/v1/completions", body: []byte(`{"a":1}`)},
		{name: "other body", path: "/v1/chat/completions", body: []byte(`{"a":2}`)},
		{name: "empty body", path: "/v1/chat/completions", body: nil},
		{name: "boundary shifted", path: "/v1/chat/completions{", body: []byte(`"a":1}`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := resume.Fingerprint(tc.path, tc.body)
			if (got == base) != tc.wantSame {
				t.Fatalf("Fingerprint(%q, %q) = %s, base %s, want same: %t", tc.path, tc.body, got, base, tc.wantSame)
			}
		})
	}
	if resume.Fingerprint("/p", nil) != resume.Fingerprint("/p", []byte{}) {
		t.Error("nil and empty bodies differ")
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{
		"", "a", "abc", `"abc"`, `"a\"b"`, `"a\\b"`, `"a\nb"`, `"abc`, `"`, `""`, `"\"`,
		"a b", "\x00", "clé", strings.Repeat("k", 255), strings.Repeat("k", 256),
		`"` + strings.Repeat(`\\`, 255) + `"`, "rk_0123456789abcdef0123456789abcdef",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		key, err := resume.ParseKey(in)
		if err != nil {
			if !errors.Is(err, resume.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q) error %v is not ErrInvalidKey", in, err)
			}
			if key != "" {
				t.Fatalf("ParseKey(%q) = %q with error %v", in, key, err)
			}
			return
		}
		if key == "." || key == ".." {
			t.Fatalf("ParseKey(%q) = %q, a dot segment", in, key)
		}
		if len(key) < 1 || len(key) > resume.MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q: length %d", in, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte %#x at %d is not visible ASCII", in, key, key[i], i)
			}
		}
		if !strings.HasPrefix(in, `"`) && key != in {
			t.Fatalf("bare ParseKey(%q) = %q, want it unchanged", in, key)
		}
		again, err := resume.ParseKey(quote(key))
		if err != nil || again != key {
			t.Fatalf("ParseKey(%q) = %q, %v; want %q back", quote(key), again, err, key)
		}
	})
}

func ExampleParseKey() {
	for _, v := range []string{`order-42`, `"order-42"`, `"say\"hi\""`, `has space`} {
		key, err := resume.ParseKey(v)
		if err != nil {
			fmt.Printf("%s: %v\n", v, err)
			continue
		}
		fmt.Printf("%s: %s\n", v, key)
	}
	// Output:
	// order-42: order-42
	// "order-42": order-42
	// "say\"hi\"": say"hi"
	// has space: resume: invalid idempotency key
}
