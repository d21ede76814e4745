package tests

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestKeyedPassThroughKeepsTheQuery: a keyed pass-through POST reaches the
// upstream with its query string (as a plain one does), and the query is
// part of what the key stands for: the same key and body with another
// query is 422, never the first answer replayed.
func TestKeyedPassThroughKeepsTheQuery(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.URL.RequestURI())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","query":"`+r.URL.RawQuery+`"}`)
	})
	e := newEnv(t, withUpstream(up))
	body := `{"model":"mock-embed","input":"q"}`
	const path = "/v1/embeddings?api-version=2024-10-21&x=a%20b"
	for _, what := range []string{"first", "replay"} {
		resp := do(t, "POST", e.URL+path, body, "Idempotency-Key", "k-query")
		if got := readBody(t, resp); resp.StatusCode != http.StatusOK || !strings.Contains(got, `"query":"api-version=2024-10-21&x=a%20b"`) {
			t.Errorf("%s: %d %s, want the upstream's answer to the query", what, resp.StatusCode, got)
		}
	}
	testutil.ExpectAPIError(t, do(t, "POST", e.URL+"/v1/embeddings?api-version=2025-01-01", body, "Idempotency-Key", "k-query"), http.StatusUnprocessableEntity, "idempotency_key_mismatch")
	readBody(t, do(t, "POST", e.URL+path, body)) // a plain pass-through, for comparison
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/v1/embeddings?api-version=2024-10-21&x=a%20b", "/v1/embeddings?api-version=2024-10-21&x=a%20b"}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Errorf("the upstream saw %q, want %q (once keyed, once plain)", seen, want)
	}
}
