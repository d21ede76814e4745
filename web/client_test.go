package web

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientHelperServed: /reprise.js is the embedded module, with a
// JavaScript content type (browsers refuse a module script without one).
func TestClientHelperServed(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/reprise.js", nil))
	res := rec.Result()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/javascript; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	for _, want := range []string{"export function createFetch", "export const fetch", "Last-Event-ID"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/reprise.js lacks %q", want)
		}
	}
}

// TestClientHelperIsThePackage: the module served at /reprise.js is the
// ES module entry of the npm package web/client (its "import" condition),
// byte for byte, so a page and a project that installed the package run
// the same helper.
func TestClientHelperIsThePackage(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("client", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Type    string `json:"type"`
		Exports struct {
			Root struct {
				Import  map[string]string `json:"import"`
				Require map[string]string `json:"require"`
			} `json:"."`
		} `json:"exports"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	root := pkg.Exports.Root
	if pkg.Type != "module" || root.Import["default"] != "./reprise.js" || root.Require["default"] != "./reprise.cjs" {
		t.Fatalf("client/package.json: type %q, exports %+v; want an ES module package importing ./reprise.js, requiring ./reprise.cjs", pkg.Type, root)
	}
	src, err := os.ReadFile(filepath.Join("client", "reprise.js"))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/reprise.js", nil))
	if !bytes.Equal(rec.Body.Bytes(), src) {
		t.Errorf("/reprise.js (%d bytes) is not client/reprise.js (%d bytes)", rec.Body.Len(), len(src))
	}
}
