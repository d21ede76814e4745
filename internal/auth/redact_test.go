package auth

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
)

const redactKey = "sk-up-KEY-0042"

func redactAuth(mode Mode) *Auth {
	return secAuth(Config{Mode: mode, Secret: secSecret, ProxyKeys: []string{"pk"}, UpstreamKey: redactKey})
}

// chunked gives b in reads of at most n bytes.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(c.n, len(p), len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// redactThrough reads body through RedactResponse as r gives it.
func redactThrough(tb testing.TB, a *Auth, r io.Reader) (string, http.Header) {
	tb.Helper()
	resp := &http.Response{Header: http.Header{"X-Echo": {"Bearer " + redactKey}, "Content-Length": {"99"}}, Body: io.NopCloser(r), ContentLength: 99}
	a.RedactResponse(resp)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b), resp.Header
}

// TestRedactResponse: the upstream key is replaced in an answer's headers
// and body however the body's reads split it (a byte at a time included);
// a part of the key at the very end is left as it is; the length header
// goes; in Passthrough nothing changes.
func TestRedactResponse(t *testing.T) {
	a := redactAuth(Static)
	for _, body := range []string{
		"data: {\"k\":\"Bearer " + redactKey + "\"}\n\n",
		redactKey + redactKey + "x" + redactKey,
		"nothing to hide",
		"",
		"ends with a part: " + redactKey[:5],
		"sk-sk-up-KEY-0042",
	} {
		want := strings.ReplaceAll(body, redactKey, "[redacted]")
		for _, r := range []io.Reader{strings.NewReader(body), iotest.OneByteReader(strings.NewReader(body)), &chunked{[]byte(body), 3}, iotest.DataErrReader(strings.NewReader(body))} {
			got, h := redactThrough(t, a, r)
			if got != want {
				t.Errorf("%q read through %T: %q, want %q", body, r, got, want)
			}
			if h.Get("X-Echo") != "Bearer [redacted]" || h.Get("Content-Length") != "" {
				t.Errorf("headers %v", h)
			}
		}
	}
	body := "Bearer " + redactKey
	if got, h := redactThrough(t, redactAuth(Passthrough), strings.NewReader(body)); got != body || h.Get("Content-Length") != "99" {
		t.Errorf("passthrough changed the answer: %q %v", got, h)
	}
	if got := string(a.Redact([]byte(body))); got != "Bearer [redacted]" {
		t.Errorf("Redact: %q", got)
	}
	if b := []byte("clean"); &a.Redact(b)[0] != &b[0] {
		t.Error("Redact copied a body with nothing to hide")
	}
}

// TestDecorateAsksForReadableAnswers: with a key of the proxy's own, the
// caller's Accept-Encoding is not forwarded (a compressed answer would
// hide the key from RedactResponse); in Passthrough it is.
func TestDecorateAsksForReadableAnswers(t *testing.T) {
	for _, tc := range []struct {
		mode Mode
		want string
	}{{Static, ""}, {None, ""}, {Passthrough, "gzip, br"}} {
		req, _ := http.NewRequest(http.MethodGet, "http://u/v1/models", nil)
		req.Header.Set("Accept-Encoding", "gzip, br")
		redactAuth(tc.mode).Decorate(req, http.Header{}, 0)
		if got := req.Header.Get("Accept-Encoding"); got != tc.want {
			t.Errorf("%s: Accept-Encoding %q, want %q", tc.mode, got, tc.want)
		}
	}
}

// FuzzRedactResponse: whatever the body and however its reads are cut,
// what comes out is the body with every whole key replaced, as if it had
// been read at once, and never holds the key.
func FuzzRedactResponse(f *testing.F) {
	f.Add([]byte("data: Bearer "+redactKey+"\n\n"), uint8(1))
	f.Add([]byte(redactKey[:7]+redactKey), uint8(7))
	f.Add([]byte("sk-sk-up-"), uint8(2))
	a := redactAuth(Static)
	f.Fuzz(func(t *testing.T, body []byte, cut uint8) {
		got, _ := redactThrough(t, a, &chunked{bytes.Clone(body), 1 + int(cut)%64})
		if want := string(bytes.ReplaceAll(body, []byte(redactKey), []byte("[redacted]"))); got != want {
			t.Fatalf("%q cut every %d: %q, want %q", body, 1+int(cut)%64, got, want)
		}
		if strings.Contains(got, redactKey) {
			t.Fatalf("%q: the key came through: %q", body, got)
		}
	})
}
