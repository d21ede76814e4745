package roundtrip

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// Stop is not a drop: a caller that stops before the terminal event — its
// context done, or the body closed — has the transport cancel the
// generation (POST the Location + /cancel, or before the answer
// /v1/streams/{key}/cancel on the POST's origin); a broken connection
// cancels nothing. Against httptest servers that record every request;
// the cancel is awaited by the Read that fails, by Close and by RoundTrip,
// so the server has it when the test looks.

const (
	stopFirst = "retry: 10\nid: 1\ndata: {\"n\":1}\n\n"
	stopRest  = "id: 2\ndata: [DONE]\n\n"
)

// stopServer answers a streaming POST with head and Location location(),
// then, by post: "open" keeps the stream open until the client leaves,
// "cut" breaks it, "hold" answers nothing until the client leaves. A GET
// answers stopRest; a POST …/cancel is recorded and answers 202.
type stopServer struct {
	*httptest.Server
	posted chan struct{} // closed at the streaming POST

	mu      sync.Mutex
	keys    []string        // the streaming POSTs' Idempotency-Keys
	cancels []*http.Request // the cancels, their URL and headers
	gets    int
}

func newStopServer(t *testing.T, post, head string, location func() string) *stopServer {
	t.Helper()
	s := &stopServer{posted: make(chan struct{})}
	var once sync.Once
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel"):
			s.cancels = append(s.cancels, &http.Request{Method: r.Method, URL: r.URL, Header: r.Header.Clone()})
		case r.Method == http.MethodGet:
			s.gets++
		default:
			s.keys = append(s.keys, r.Header.Get("Idempotency-Key"))
		}
		s.mu.Unlock()
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel"):
			w.WriteHeader(http.StatusAccepted)
			return
		case r.Method == http.MethodGet:
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, stopRest)
			return
		}
		once.Do(func() { close(s.posted) })
		if post == "hold" {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Location", location())
		_, _ = io.WriteString(w, head)
		http.NewResponseController(w).Flush() //nolint:errcheck // the client sees any failure
		if post == "cut" {
			panic(http.ErrAbortHandler)
		}
		<-r.Context().Done()
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *stopServer) seen() (keys []string, cancels []*http.Request, gets int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...), append([]*http.Request(nil), s.cancels...), s.gets
}

// stopPost sends a chat POST with a credential under ctx through tr.
func stopPost(t *testing.T, ctx context.Context, tr *Transport, url string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-x")
	return (&http.Client{Transport: tr}).Do(req)
}

// stopBeforeAnswer is stopPost for a server that holds its answer: it
// returns the error, closing the body if one came after all.
func stopBeforeAnswer(t *testing.T, ctx context.Context, tr *Transport, url string) error {
	t.Helper()
	resp, err := stopPost(t, ctx, tr, url)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

// readFirst reads the first event of resp.
func readFirst(t *testing.T, resp *http.Response) {
	t.Helper()
	buf := make([]byte, 4<<10)
	n, err := resp.Body.Read(buf)
	if err != nil || !strings.HasSuffix(string(buf[:n]), "id: 1\ndata: {\"n\":1}\n\n") {
		t.Fatalf("first read: %q, %v; want the first event", buf[:n], err)
	}
}

// wantCancels checks that s got the cancels at the URLs want, each with
// the credential when cred.
func wantCancels(t *testing.T, s *stopServer, cred bool, want ...string) {
	t.Helper()
	_, cancels, _ := s.seen()
	var got []string
	for _, c := range cancels {
		got = append(got, c.URL.String())
		if a := c.Header.Get("Authorization"); (a == "Bearer sk-x") != cred {
			t.Errorf("a cancel of %s had Authorization %q, want the credential: %v", c.URL, a, cred)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("cancels %q, want %q", got, want)
	}
}

func TestTransportCancelsOnStop(t *testing.T) {
	t.Parallel()
	loc := func() string { return "/v1/streams/k?token=cap" }
	const cancelURL = "/v1/streams/k/cancel?token=cap"

	t.Run("the caller's context, mid-stream", func(t *testing.T) {
		t.Parallel()
		s := newStopServer(t, "open", stopFirst, loc)
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := stopPost(t, ctx, &Transport{}, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFirst(t, resp)
		cancel()
		if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
			t.Errorf("Read after the cancel: %v, want context.Canceled", err)
		}
		wantCancels(t, s, true, cancelURL)
		_ = resp.Body.Close()
		wantCancels(t, s, true, cancelURL) // once
	})

	t.Run("the body closed mid-stream", func(t *testing.T) {
		t.Parallel()
		s := newStopServer(t, "open", stopFirst, loc)
		resp, err := stopPost(t, context.Background(), &Transport{RetryDelay: time.Millisecond}, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFirst(t, resp)
		_ = resp.Body.Close()
		wantCancels(t, s, true, cancelURL)
		if _, _, gets := s.seen(); gets != 0 {
			t.Errorf("%d reconnections after Close", gets)
		}
	})

	t.Run("the caller's context, before the answer", func(t *testing.T) {
		t.Parallel()
		s := newStopServer(t, "hold", "", loc)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { <-s.posted; cancel() }()
		if err := stopBeforeAnswer(t, ctx, &Transport{}, s.URL); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do: %v, want context.Canceled", err)
		}
		keys, _, _ := s.seen()
		if len(keys) != 1 || keys[0] == "" {
			t.Fatalf("the POST's keys %q", keys)
		}
		wantCancels(t, s, true, "/v1/streams/"+keys[0]+"/cancel")
	})

	t.Run("the caller's context, after the connection broke", func(t *testing.T) {
		t.Parallel()
		// retry: a minute: the transport waits to reconnect when the context ends.
		s := newStopServer(t, "cut", strings.Replace(stopFirst, "retry: 10", "retry: 60000", 1), loc)
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := stopPost(t, ctx, &Transport{MaxDelay: time.Minute}, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFirst(t, resp)
		read := make(chan error, 1)
		body := resp.Body
		go func() { _, err := io.ReadAll(body); read <- err }()
		cancel()
		if err := <-read; !errors.Is(err, context.Canceled) {
			t.Errorf("Read: %v, want context.Canceled", err)
		}
		_ = resp.Body.Close()
		wantCancels(t, s, true, cancelURL)
	})

	t.Run("a broken connection is resumed, not cancelled", func(t *testing.T) {
		t.Parallel()
		s := newStopServer(t, "cut", stopFirst, loc)
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := stopPost(t, ctx, &Transport{}, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != stopFirst+stopRest {
			t.Fatalf("ReadAll: %q, %v", got, err)
		}
		cancel() // after the terminal event: nothing to cancel
		_ = resp.Body.Close()
		wantCancels(t, s, true)
	})

	t.Run("the body closed after the terminal event", func(t *testing.T) {
		t.Parallel()
		s := newStopServer(t, "open", stopFirst+stopRest, loc) // the stream stays open after its terminal event
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		resp, err := stopPost(t, ctx, &Transport{}, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		buf := make([]byte, 4<<10)
		for !strings.Contains(string(got), "[DONE]") {
			n, err := resp.Body.Read(buf)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, buf[:n]...)
		}
		_ = resp.Body.Close()
		cancel()
		wantCancels(t, s, true)
	})

	t.Run("NoCancelOnAbort", func(t *testing.T) {
		t.Parallel()
		s := newStopServer(t, "open", stopFirst, loc)
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := stopPost(t, ctx, &Transport{NoCancelOnAbort: true}, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFirst(t, resp)
		cancel()
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		held := newStopServer(t, "hold", "", loc)
		ctx, cancel = context.WithCancel(context.Background())
		go func() { <-held.posted; cancel() }()
		if err := stopBeforeAnswer(t, ctx, &Transport{NoCancelOnAbort: true}, held.URL); !errors.Is(err, context.Canceled) {
			t.Fatalf("Do: %v, want context.Canceled", err)
		}
		wantCancels(t, s, true)
		wantCancels(t, held, true)
	})

	t.Run("a Location on another origin is cancelled with its token alone", func(t *testing.T) {
		t.Parallel()
		other := newStopServer(t, "open", stopFirst, loc)
		s := newStopServer(t, "open", stopFirst, func() string { return other.URL + "/v1/streams/k?token=cap" })
		ctx, cancel := context.WithCancel(context.Background())
		resp, err := stopPost(t, ctx, &Transport{}, s.URL)
		if err != nil {
			t.Fatal(err)
		}
		readFirst(t, resp)
		cancel()
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		wantCancels(t, s, true)
		wantCancels(t, other, false, cancelURL)
	})
}

func TestCancelURLs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ post, key, want string }{
		{"http://h:1/v1/chat/completions?x=1", "k", "http://h:1/v1/streams/k/cancel"},
		{"https://h/openai/v1/responses/", "a/b c", "https://h/openai/v1/streams/a%2Fb%20c/cancel"},
	} {
		u := mustParse(t, tc.post)
		if got := keyCancelURL(u, tc.key); got != tc.want {
			t.Errorf("keyCancelURL(%s, %q) = %s, want %s", tc.post, tc.key, got, tc.want)
		}
	}
	for _, tc := range []struct{ loc, want string }{
		{"http://h:1/v1/streams/k?token=cap", "http://h:1/v1/streams/k/cancel?token=cap"},
		{"http://h:1/v1/streams/a%2Fb/?token=c#f", "http://h:1/v1/streams/a%2Fb/cancel?token=c"},
	} {
		if got := locationCancelURL(mustParse(t, tc.loc)); got != tc.want {
			t.Errorf("locationCancelURL(%s) = %s, want %s", tc.loc, got, tc.want)
		}
	}
}

func mustParse(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
