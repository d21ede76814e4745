package roundtrip

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// keyServer answers every request with the Idempotency-Key it got.
func keyServer(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), keys...) }
}

func TestTransportKeys(t *testing.T) {
	t.Parallel()
	srv, keys := keyServer(t)
	c := &http.Client{Transport: &Transport{}}
	send := func(method, path, body string, header ...string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if req.Header.Get("Idempotency-Key") != "" && len(header) == 0 {
			t.Error("the transport changed the caller's request")
		}
	}
	send(http.MethodGet, "/v1/models", "")
	send(http.MethodPost, "/v1/embeddings", `{"a":1}`)
	send(http.MethodPost, "/v1/chat/completions", `{"a":1}`, "Idempotency-Key", "mine")
	send(http.MethodPost, "/v1/chat/completions", `{"a":1}`)
	send(http.MethodPost, "/v1/chat/completions", `{"a":1}`, "X-Stainless-Retry-Count", "1")
	send(http.MethodPost, "/v1/chat/completions", `{"a":1}`, "X-Stainless-Retry-Count", "0")
	send(http.MethodPost, "/v1/chat/completions", `{"a":2}`, "X-Stainless-Retry-Count", "1")
	send(http.MethodPost, "/v1/messages", `{"a":1}`, "X-Stainless-Retry-Count", "1")
	k := keys()
	switch {
	case k[0] != "" || k[1] != "":
		t.Errorf("keys on paths that do not stream: %q", k[:2])
	case k[2] != "mine":
		t.Errorf("the caller's key became %q", k[2])
	case k[3] == "" || k[4] != k[3]:
		t.Errorf("an SDK retry got %q, its first try %q: want the same", k[4], k[3])
	case k[5] == k[3]:
		t.Error("a new request (retry count 0) got the key of an earlier one")
	case k[6] == k[3] || k[7] == k[3]:
		t.Error("a retry of another body or path got the first one's key")
	}
}

// TestTransportEnds: how a resumed stream ends when the Location cannot
// continue it, against a server that answers the POST with one event and
// a clean end before any terminal event.
func TestTransportEnds(t *testing.T) {
	t.Parallel()
	const first = "retry: 10\nid: 1\ndata: {\"n\":1}\n\n"
	tests := []struct {
		name    string
		resume  func(w http.ResponseWriter)
		want    string
		wantErr error
	}{
		{"204: complete", func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }, first, io.EOF},
		{"the rest", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "id: 2\ndata: [DONE]\n\n")
		}, first + "id: 2\ndata: [DONE]\n\n", io.EOF},
		{"404", func(w http.ResponseWriter) { http.Error(w, "{}", http.StatusNotFound) }, first, ErrResume},
		{"reset", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "id: 9\nevent: reset\ndata: {\"generation\":2}\n\n")
		}, first, ErrResume},
		{"503 until the attempts run out", func(w http.ResponseWriter) { http.Error(w, "{}", http.StatusServiceUnavailable) }, first, ErrResume},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var lastID atomic.Value
			lastID.Store("")
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					w.Header().Set("Content-Type", "text/event-stream")
					w.Header().Set("Location", "/v1/streams/k")
					_, _ = io.WriteString(w, first)
					return
				}
				lastID.Store(r.Header.Get("Last-Event-ID"))
				tc.resume(w)
			}))
			defer srv.Close()
			c := &http.Client{Transport: &Transport{MaxAttempts: 2, MaxDelay: 20 * time.Millisecond}}
			resp, err := c.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if tc.wantErr == io.EOF {
				if err != nil {
					t.Fatalf("ReadAll: %v", err)
				}
			} else if !errors.Is(err, tc.wantErr) {
				t.Fatalf("ReadAll: %v, want %v", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Errorf("read %q, want %q", got, tc.want)
			}
			if id := lastID.Load(); id != "1" {
				t.Errorf("resumed with Last-Event-ID %q, want 1", id)
			}
		})
	}
}
