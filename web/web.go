package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

//go:embed static client/reprise.js
var static embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	name        string
	contentType string
	etag        string
	body        []byte
}

// routes maps a request path to the embedded file that answers it.
var routes = map[string]struct{ file, contentType string }{
	"/":           {"static/index.html", "text/html; charset=utf-8"},
	"/app.js":     {"static/app.js", "text/javascript; charset=utf-8"},
	"/session.js": {"static/session.js", "text/javascript; charset=utf-8"},
	"/speech.js":  {"static/speech.js", "text/javascript; charset=utf-8"},
	"/style.css":  {"static/style.css", "text/css; charset=utf-8"},
	// The client helper: a fetch that resumes streams (see README).
	"/reprise.js": {"client/reprise.js", "text/javascript; charset=utf-8"},
}

// contentSecurityPolicy keeps the page on its own origin: no CDN, no inline
// script, and requests only to the proxy that served it.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Mount registers the page's paths on mux (exact paths: every other path
// stays the mux's).
func Mount(mux interface{ Handle(string, http.Handler) }) {
	h := Handler()
	for path := range routes {
		if path == "/" {
			path = "/{$}"
		}
		mux.Handle(path, h)
	}
}

// MountClient registers only "/reprise.js", the client helper apps load, on
// mux: a gateway that serves no demo page still serves it.
func MountClient(mux interface{ Handle(string, http.Handler) }) {
	mux.Handle(clientPath, Handler())
}

// clientPath is where the client helper is served.
const clientPath = "/reprise.js"

// Handler returns the handler of the demo page. It answers GET and HEAD for
// "/" (the page), its modules "/app.js", "/session.js" and
// "/speech.js", "/style.css", and "/reprise.js" (the client helper, an
// ES module), 404 for any other path and 405
// for any other method. Every answer has Cache-Control: no-cache and an ETag,
// so a browser revalidates and always runs the page of the running binary.
//
// The page uses relative URLs for its own files, so the handler also works
// under a prefix with [http.StripPrefix]. It calls the API at the root of the
// origin.
func Handler() http.Handler {
	assets := make(map[string]*asset, len(routes))
	for path, r := range routes {
		body, err := fs.ReadFile(static, r.file)
		if err != nil {
			// The files are embedded at build time, so this cannot happen
			// in a binary that compiled.
			panic("web: missing embedded file " + r.file + ": " + err.Error())
		}
		sum := sha256.Sum256(body)
		assets[path] = &asset{
			name:        r.file,
			contentType: r.contentType,
			etag:        `"` + hex.EncodeToString(sum[:8]) + `"`,
			body:        body,
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		a, ok := assets[req.URL.Path]
		if !ok {
			http.NotFound(w, req)
			return
		}
		if req.Method != http.MethodGet && req.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.contentType)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(a.contentType, "text/html") {
			h.Set("Content-Security-Policy", contentSecurityPolicy)
		}
		// ServeContent handles HEAD, If-None-Match and Range.
		http.ServeContent(w, req, a.name, time.Time{}, bytes.NewReader(a.body))
	})
}
