package engine

import (
	"errors"
	"net/url"
	"path"
	"strings"
	"testing"
)

// TestCleanPath: dot segments (plain, encoded, any case, encoded twice) and
// encoded slashes or backslashes are refused; ordinary paths, encoded
// characters included, are accepted and decoded.
func TestCleanPath(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		wantErr        error
	}{
		{"models", "/v1/models", "/v1/models", nil},
		{"encoded colon", "/v1/models/ft%3Agpt-4o", "/v1/models/ft:gpt-4o", nil},
		{"dots inside a name", "/v1/files/a..b/.c/d.", "/v1/files/a..b/.c/d.", nil},
		{"trailing slash", "/v1/models/", "/v1/models/", nil},
		{"encoded percent", "/v1/files/100%25", "/v1/files/100%", nil},
		{"dot dot", "/v1/../admin", "", ErrInvalidPath},
		{"dot", "/v1/./models", "", ErrInvalidPath},
		{"encoded dot dot", "/v1/%2e%2e/%2e%2e/etc/escape", "", ErrInvalidPath},
		{"upper case", "/v1/%2E%2E/metrics", "", ErrInvalidPath},
		{"half encoded", "/v1/.%2E/x", "", ErrInvalidPath},
		{"encoded slash", "/v1/x/..%2f..%2fescape2", "", ErrInvalidPath},
		{"encoded slash alone", "/v1/a%2Fb", "", ErrInvalidPath},
		{"encoded backslash", "/v1/x%5c..%5cadmin", "", ErrInvalidPath},
		{"raw backslash", `/v1/x\..\admin`, "", ErrInvalidPath},
		{"double encoded dots", "/v1/%252e%252e/admin", "", ErrInvalidPath},
		{"double encoded slash", "/v1/a%252fb", "", ErrInvalidPath},
		{"bad escape", "/v1/%zz", "", ErrInvalidPath},
		{"not v1", "/v2/models", "", ErrInvalidPath},
		{"encoded v1", "/%761/models", "", ErrInvalidPath},
		{"v1 alone", "/v1", "", ErrInvalidPath},
		{"path parameter dot dot", "/v1/..;/admin", "", ErrInvalidPath},
		{"path parameter", "/v1/models;jsessionid=1", "", ErrInvalidPath},
		{"encoded semicolon", "/v1/models%3Bx", "", ErrInvalidPath},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := CleanPath(c.in)
			if !errors.Is(err, c.wantErr) || got != c.want {
				t.Errorf("CleanPath(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.wantErr)
			}
		})
	}
}

// TestUpstreamURL: a base URL names the API's version root (a client's
// /v1/X goes to its path + /X; a base without a path is /v1); the path is
// appended, never resolved; the base's query comes before the client's; a
// path that could escape is refused.
func TestUpstreamURL(t *testing.T) {
	for _, c := range []struct{ base, path, query, want string }{
		{"http://up.example/gw/openai/", "/v1/files/a b/100%", "", "http://up.example/gw/openai/files/a%20b/100%25"},
		{"https://api.openai.com", "/v1/chat/completions", "", "https://api.openai.com/v1/chat/completions"},
		{"https://api.openai.com/", "/v1/models", "limit=2", "https://api.openai.com/v1/models?limit=2"},
		{"https://api.openai.com/v1", "/v1/chat/completions", "", "https://api.openai.com/v1/chat/completions"},
		{"https://generativelanguage.googleapis.com/v1beta/openai", "/v1/chat/completions", "", "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"},
		{"https://open.bigmodel.cn/api/paas/v4/", "/v1/chat/completions", "", "https://open.bigmodel.cn/api/paas/v4/chat/completions"},
		{"https://res.openai.azure.com/openai/v1?api-version=preview", "/v1/responses/r1", "stream=true", "https://res.openai.azure.com/openai/v1/responses/r1?api-version=preview&stream=true"},
	} {
		base, _ := url.Parse(c.base)
		if u, err := upstreamURL(base, c.path, c.query); err != nil || u.String() != c.want {
			t.Errorf("upstreamURL(%s, %s, %q) = %v, %v; want %s", c.base, c.path, c.query, u, err, c.want)
		}
	}
	base, _ := url.Parse("http://up.example/gw/openai/")
	if u, err := upstreamURL(base, "/v1/../../admin", ""); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("a dot segment: %v, %v; want ErrInvalidPath", u, err)
	}
	if u, err := upstreamURL(base, "/v1/responses/../../admin/cancel", ""); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("an upstream's id with dot segments: %v, %v; want ErrInvalidPath", u, err)
	}
	if u, err := upstreamURL(base, "/v1/responses/..;/admin", ""); !errors.Is(err, ErrInvalidPath) {
		t.Errorf("an upstream's id with a path parameter: %v, %v; want ErrInvalidPath", u, err)
	}
}

// FuzzCleanPath: a path CleanPath accepts, joined to a base as the engine
// joins it (upstreamURL), stays under the base's version root as the
// upstream resolves what it is sent — decoded once or twice, backslashes
// taken for slashes, path parameters (;…) cut from each segment, dot
// segments removed.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{
		"/v1/models", "/v1/%2e%2e/%2e%2e/etc/escape", "/v1/x/..%2f..%2fescape2", "/v1/%2E%2E/metrics",
		"/v1/messages/%2e%2e/%2e%2e/admin", "/v1/a%252e%252e/b", "/v1/files/x%5cy", "/v1//models/", "/v1/%25",
		"/v1/.%2e/x", "/v1/files/%00", "/v1/a%2", "/v1/a?b", "/v1/a#b", "/v1/..;/x", "/v1/a%3B/..",
	} {
		f.Add(s)
	}
	const baseDir = "/gw/openai"
	base, _ := url.Parse("http://up.example" + baseDir)
	under := baseDir + "/"
	f.Fuzz(func(t *testing.T, escaped string) {
		clean, err := CleanPath(escaped)
		if err != nil {
			return
		}
		if !strings.HasPrefix(clean, "/v1/") {
			t.Fatalf("CleanPath(%q) = %q: not under /v1/", escaped, clean)
		}
		u, err := upstreamURL(base, clean, "")
		if err != nil {
			t.Fatalf("CleanPath accepted %q, upstreamURL refused %q: %v", escaped, clean, err)
		}
		sent := u.EscapedPath() // what the request line carries
		once, err := url.PathUnescape(sent)
		if err != nil {
			t.Fatalf("%q is sent as %q, which does not decode: %v", escaped, sent, err)
		}
		resolved := []string{u.Path, once}
		if twice, err := url.PathUnescape(once); err == nil {
			resolved = append(resolved, twice)
		}
		for _, p := range resolved {
			p = path.Clean(withoutParams(strings.ReplaceAll(p, `\`, "/")))
			if !strings.HasPrefix(p+"/", under) {
				t.Fatalf("CleanPath accepted %q; sent as %q it resolves to %q, outside %s", escaped, sent, p, under)
			}
		}
	})
}

// withoutParams cuts each segment's path parameters (from a ;), as servers
// in the Tomcat tradition read a path.
func withoutParams(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.Join(segs, "/")
}
