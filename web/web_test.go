package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/web"
)

func TestHandlerServesEmbeddedFiles(t *testing.T) {
	srv := httptest.NewServer(web.Handler())
	defer srv.Close()

	files := []struct {
		path, contentType, contains string
	}{
		{"/", "text/html; charset=utf-8", "reprise — streams that survive the network"},
		{"/app.js", "text/javascript; charset=utf-8", "new SpeechPane"},
		{"/session.js", "text/javascript; charset=utf-8", "class SSEParser"},
		{"/speech.js", "text/javascript; charset=utf-8", "class SpeechPane"},
		{"/style.css", "text/css; charset=utf-8", ".output"},
	}
	for _, f := range files {
		t.Run("GET "+f.path, func(t *testing.T) {
			res, err := http.Get(srv.URL + f.path)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(res.Body)
			res.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode != http.StatusOK {
				t.Fatalf("status = %d, want 200", res.StatusCode)
			}
			if got := res.Header.Get("Content-Type"); got != f.contentType {
				t.Errorf("Content-Type = %q, want %q", got, f.contentType)
			}
			if got := res.Header.Get("Cache-Control"); got != "no-cache" {
				t.Errorf("Cache-Control = %q, want no-cache", got)
			}
			if !strings.Contains(string(body), f.contains) {
				t.Errorf("body does not contain %q", f.contains)
			}

			// HEAD gives the headers and no body.
			head, err := http.Head(srv.URL + f.path)
			if err != nil {
				t.Fatal(err)
			}
			hb, _ := io.ReadAll(head.Body)
			head.Body.Close()
			if head.StatusCode != http.StatusOK || len(hb) != 0 || head.Header.Get("Content-Type") != f.contentType {
				t.Errorf("HEAD: status %d, %d body bytes, Content-Type %q", head.StatusCode, len(hb), head.Header.Get("Content-Type"))
			}

			// The ETag lets a no-cache client revalidate.
			etag := res.Header.Get("ETag")
			if etag == "" {
				t.Fatal("no ETag")
			}
			req, _ := http.NewRequest(http.MethodGet, srv.URL+f.path, nil)
			req.Header.Set("If-None-Match", etag)
			again, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			again.Body.Close()
			if again.StatusCode != http.StatusNotModified {
				t.Errorf("If-None-Match: status = %d, want 304", again.StatusCode)
			}
		})
	}

	t.Run("index links its own files only", func(t *testing.T) {
		res, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		page := string(body)
		for _, want := range []string{`src="app.js"`, `href="style.css"`} {
			if !strings.Contains(page, want) {
				t.Errorf("index.html lacks %s", want)
			}
		}
		for _, bad := range []string{"http://", "https://", "//cdn"} {
			if strings.Contains(page, bad) {
				t.Errorf("index.html refers to an external URL (%q)", bad)
			}
		}
		for _, id := range pageIDs {
			if !strings.Contains(page, `id="`+id+`"`) {
				t.Errorf("index.html lacks the element #%s", id)
			}
		}
	})

	for _, path := range []string{"/nope", "/index.htm", "/static/app.js", "/app.js/"} {
		t.Run("GET "+path, func(t *testing.T) {
			res, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusNotFound {
				t.Errorf("status = %d, want 404", res.StatusCode)
			}
		})
	}

	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		t.Run(method+" /", func(t *testing.T) {
			req, _ := http.NewRequest(method, srv.URL+"/", strings.NewReader("x"))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusMethodNotAllowed {
				t.Errorf("status = %d, want 405", res.StatusCode)
			}
			if got := res.Header.Get("Allow"); got != "GET, HEAD" {
				t.Errorf("Allow = %q, want \"GET, HEAD\"", got)
			}
		})
	}
}

// pageIDs are the element ids that tests (here, tests/webpage and tests/)
// rely on.
var pageIDs = []string{
	"prompt", "generate", "drop", "resume", "replay", "autoresume", "output",
	"key", "lastid", "count", "conn", "server-state", "server-generation", "server-events",
	"mode-sse", "mode-ws", "unreliable", "every", "delay", "tokens-delivered", "tokens-billed",
	"gens-naive", "saved", "cost-key", "cost-naive", "calls", "cost-note", "log",
	"sp-input", "sp-speak", "sp-drop", "sp-conn", "sp-played", "sp-generated", "sp-verdict", "sp-dupes",
	"sp-saved",
}

// TestMountClientServesOnlyTheHelper: a mux given MountClient serves
// /reprise.js and none of the page's paths (they fall to the mux's 404),
// while Mount serves both.
func TestMountClientServesOnlyTheHelper(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mount func(interface{ Handle(string, http.Handler) })
		page  int
	}{
		{"Mount", web.Mount, http.StatusOK},
		{"MountClient", web.MountClient, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mux := http.NewServeMux()
			tc.mount(mux)
			srv := httptest.NewServer(mux)
			defer srv.Close()
			for path, want := range map[string]int{
				"/reprise.js": http.StatusOK, "/": tc.page, "/app.js": tc.page, "/session.js": tc.page,
				"/speech.js": tc.page, "/style.css": tc.page,
			} {
				res, err := http.Get(srv.URL + path)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != want {
					t.Errorf("GET %s: %d, want %d", path, res.StatusCode, want)
				}
			}
		})
	}
}
