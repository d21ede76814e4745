package roundtrip

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// recorder is a loopback server that records the headers and query of
// each request it gets and answers it with answer.
func recorder(t *testing.T, answer http.HandlerFunc) (*httptest.Server, func() []*http.Request) {
	t.Helper()
	var mu sync.Mutex
	var got []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, &http.Request{Method: r.Method, URL: r.URL, Header: r.Header.Clone()})
		mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []*http.Request { mu.Lock(); defer mu.Unlock(); return append([]*http.Request(nil), got...) }
}

// TestTransportCredentialsStayOnOrigin: the POST's answer is cut after its
// first event and names a Location; the transport resumes it there with
// the credential only when the Location has the POST's origin. Another
// origin (a second loopback server: another port) is resumed with the
// Location's token alone, and a redirect to another origin is not
// followed.
func TestTransportCredentialsStayOnOrigin(t *testing.T) {
	t.Parallel()
	const (
		first = "retry: 10\nid: 1\ndata: {\"n\":1}\n\n"
		rest  = "id: 2\ndata: [DONE]\n\n"
	)
	creds := []string{"Authorization", "X-Api-Key", "Api-Key", "Proxy-Authorization", "Cookie"}
	serveRest := func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "{}", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, rest)
	}
	tests := []struct {
		name string
		// location is the POST's Location, given the other origin's URL;
		// get answers a GET on the POST's origin.
		location  func(other string) string
		get       func(w http.ResponseWriter, r *http.Request, other string)
		want      string
		wantErr   error
		sameReads int // GETs on the POST's origin
		otherGets int // GETs on the other origin
	}{
		{
			name:     "same origin: resumed with the credential",
			location: func(string) string { return "/v1/streams/k?token=cap" },
			get:      func(w http.ResponseWriter, r *http.Request, _ string) { serveRest(w, r) },
			want:     first + rest, sameReads: 1,
		},
		{
			name:     "another origin: resumed with the token alone",
			location: func(other string) string { return other + "/v1/streams/k?token=cap" },
			want:     first + rest, otherGets: 1,
		},
		{
			name:     "a redirect to another origin is not followed",
			location: func(string) string { return "/v1/streams/k?token=cap" },
			get: func(w http.ResponseWriter, r *http.Request, other string) {
				http.Redirect(w, r, other+"/v1/streams/k?token=cap", http.StatusFound)
			},
			want: first, wantErr: ErrResume, sameReads: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			other, otherGot := recorder(t, serveRest)
			origin, originGot := recorder(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					tc.get(w, r, other.URL)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Location", tc.location(other.URL))
				_, _ = io.WriteString(w, first)
				http.NewResponseController(w).Flush() //nolint:errcheck // the cut below shows any failure
				panic(http.ErrAbortHandler)           // cut the stream before its terminal event
			})
			req, err := http.NewRequest(http.MethodPost, origin.URL+"/v1/chat/completions", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			for _, h := range creds {
				req.Header.Set(h, "secret-"+h)
			}
			c := &http.Client{Transport: &Transport{MaxAttempts: 2, RetryDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if !errors.Is(err, tc.wantErr) { // nil: none
				t.Fatalf("ReadAll: %v, want %v", err, tc.wantErr)
			}
			if string(got) != tc.want {
				t.Errorf("read %q, want %q", got, tc.want)
			}

			var sameGets []*http.Request
			for _, r := range originGot() {
				if r.Method == http.MethodGet {
					sameGets = append(sameGets, r)
				}
			}
			if len(sameGets) != tc.sameReads || len(otherGot()) != tc.otherGets {
				t.Fatalf("%d GETs on the POST's origin and %d on the other, want %d and %d", len(sameGets), len(otherGot()), tc.sameReads, tc.otherGets)
			}
			for _, r := range otherGot() {
				for _, h := range creds {
					if v := r.Header.Get(h); v != "" {
						t.Errorf("the other origin got %s: %q", h, v)
					}
				}
				if r.URL.Query().Get("token") != "cap" || r.Header.Get("Last-Event-ID") != "1" || r.Header.Get("Anthropic-Version") == "" {
					t.Errorf("the other origin got %s with %v, want the Location's token, Last-Event-ID 1 and the API version", r.URL, r.Header)
				}
			}
			for _, r := range sameGets { // what the helper sends again to the POST's origin
				if r.Header.Get("Authorization") != "secret-Authorization" || r.Header.Get("X-Api-Key") != "secret-X-Api-Key" {
					t.Errorf("a resume on the POST's origin got %v, want its credential", r.Header)
				}
			}
		})
	}
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want bool
	}{
		{"http://127.0.0.1:8080/v1/chat/completions", "http://127.0.0.1:8080/v1/streams/k", true},
		{"http://Example.COM/v1/messages", "HTTP://example.com:80/v1/streams/k", true},
		{"https://example.com/v1/messages", "https://example.com:443/v1/streams/k", true},
		{"http://[::1]:8080/v1/responses", "http://[::1]:8080/v1/streams/k", true},
		{"http://127.0.0.1:8080/v1/chat/completions", "http://127.0.0.1:8081/v1/streams/k", false},
		{"http://example.com/v1/chat/completions", "https://example.com/v1/streams/k", false},
		{"https://example.com/v1/chat/completions", "https://example.com.evil.test/v1/streams/k", false},
		{"https://example.com/v1/chat/completions", "https://evil.test/v1/streams/k", false},
		{"http://localhost:8080/v1/chat/completions", "http://127.0.0.1:8080/v1/streams/k", false},
	}
	for _, tc := range tests {
		a, _ := url.Parse(tc.a)
		b, _ := url.Parse(tc.b)
		if got := sameOrigin(a, b); got != tc.want {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
