package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

var secret = []byte("an example secret, 32 bytes long")

// start serves a proxy in front of the demo model on a fresh embedded
// JetStream.
func start(tb testing.TB) (*proxy.Proxy, string) {
	tb.Helper()
	nc := journaltest.Connect(tb, journaltest.Server(tb, ""))
	model := httptest.NewServer(mockllm.New(mockllm.Config{TokenDelay: time.Millisecond}))
	tb.Cleanup(model.Close)
	up, _ := url.Parse(model.URL)
	p, err := proxy.New(context.Background(), proxy.Config{
		NATS: nc, Upstream: up, Auth: auth.Config{Secret: secret}, Journal: journal.Config{Memory: true},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go func() { _ = p.Serve(ln) }()
	return p, "http://" + ln.Addr().String()
}

func post(tb testing.TB, base, key, prompt string) *http.Response {
	tb.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/chat/completions",
		strings.NewReader(`{"model":"demo","stream":true,"messages":[{"role":"user","content":"`+prompt+`"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	return resp
}

// TestShutdownHonoursContext: Shutdown returns when its context ends, even
// with a generation that never ends; that generation is cancelled and
// records its failure, which a second Shutdown waits for; a third returns
// at once.
func TestShutdownHonoursContext(t *testing.T) {
	p, base := start(t)
	resp := post(t, base, "k-hang", "stall [hang_after=1]")
	defer resp.Body.Close()
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatalf("the stream did not start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.Shutdown(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a stalled generation: %v, want its context's deadline", err)
	}
	if took > 2*time.Second {
		t.Fatalf("Shutdown took %s past its 300ms context", took)
	}
	settle, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.Shutdown(settle); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	// The proxy does not close the NATS connection it was given: its
	// journal still answers, and holds the cancelled generation's failure.
	val, _, found, err := p.Journal().Get(settle, resume.StreamID(auth.Anonymous, "k-hang"))
	var rec resume.Record
	if err != nil || !found || json.Unmarshal(val, &rec) != nil {
		t.Fatalf("record after Shutdown: found %v, %v", found, err)
	}
	if rec.State != resume.Failed || rec.Error != apierr.ProxyShutdown {
		t.Fatalf("record after Shutdown: %s %q, want failed with proxy_shutdown", rec.State, rec.Error)
	}
	start = time.Now()
	if err := p.Shutdown(context.Background()); err != nil || time.Since(start) > time.Second {
		t.Fatalf("third Shutdown: %v after %s", err, time.Since(start))
	}
}

// TestNewRefusesWhatItCannotKeep: New refuses, before serving anything, an
// event size limit one NATS message cannot store (such events would fail
// their generations as journal_failure once they began) and a TTL under
// which a generation's first events expire while it may still run.
func TestNewRefusesWhatItCannotKeep(t *testing.T) {
	nc := journaltest.Connect(t, journaltest.Server(t, ""))
	up, _ := url.Parse("http://127.0.0.1:1")
	fits := int(nc.MaxPayload()) - 8192 // well within one message
	tests := []struct {
		name    string
		limits  engine.Limits
		ttl     time.Duration
		lease   time.Duration
		wantErr error
	}{
		{"defaults", engine.Limits{}, 0, 0, nil},
		{"event size within a message", engine.Limits{MaxEventSize: fits}, 0, 0, nil},
		{"event size at NATS max_payload", engine.Limits{MaxEventSize: int(nc.MaxPayload())}, 0, 0, engine.ErrInvalidOption},
		{"event size over NATS max_payload", engine.Limits{MaxEventSize: 2 * int(nc.MaxPayload())}, 0, 0, engine.ErrInvalidOption},
		{"ttl under a minute", engine.Limits{MaxGeneration: time.Second}, 30 * time.Second, time.Second, proxy.ErrShortTTL},
		{"ttl under the default generation cap", engine.Limits{}, 10 * time.Minute, 0, proxy.ErrShortTTL},
		{"ttl under the generation cap plus the lease", engine.Limits{MaxGeneration: 10 * time.Minute}, 10 * time.Minute, 0, proxy.ErrShortTTL},
		{"ttl past the generation cap plus the lease", engine.Limits{MaxGeneration: 5 * time.Minute}, 10 * time.Minute, 0, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := proxy.New(context.Background(), proxy.Config{
				NATS: nc, Upstream: up, Auth: auth.Config{Secret: secret}, Journal: journal.Config{Memory: true, TTL: tc.ttl},
				Limits: tc.limits, Lease: tc.lease, Logger: slog.New(slog.DiscardHandler), Owner: "t",
			})
			if err == nil {
				_ = p.Shutdown(context.Background())
			}
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Fatalf("New: %v, want %v", err, tc.wantErr)
			}
			if errors.Is(err, proxy.ErrShortTTL) && !errors.Is(err, proxy.ErrInvalidOption) {
				t.Errorf("%v does not wrap ErrInvalidOption", err)
			}
		})
	}
}

func TestParseRoutes(t *testing.T) {
	got, err := proxy.ParseRoutes("# providers\nopenai https://api.openai.com key_env=OPENAI_KEY paths=/v1/chat,/v1/embeddings # chat\n\nanthropic https://api.anthropic.com key_env=ANTHROPIC_KEY paths=/v1/messages models=claude-*\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []proxy.RouteLine{
		{Line: 2, Name: "openai", URL: "https://api.openai.com", KeyEnv: "OPENAI_KEY", Paths: []string{"/v1/chat", "/v1/embeddings"}},
		{Line: 4, Name: "anthropic", URL: "https://api.anthropic.com", KeyEnv: "ANTHROPIC_KEY", Paths: []string{"/v1/messages"}, Models: []string{"claude-*"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseRoutes = %+v, want %+v", got, want)
	}
	for text, says := range map[string]string{
		"":                                 "no upstream",
		"# only a comment\n":               "no upstream",
		"openai\n":                         "line 1: want name url",
		"a http://a\nb http://b retry=3\n": "line 2: unknown setting \"retry\"",
		"a http://a key_env=\n":            "line 1: key_env names no variable",
	} {
		if _, err := proxy.ParseRoutes(text); !errors.Is(err, proxy.ErrRoutes) || !strings.Contains(err.Error(), says) {
			t.Errorf("ParseRoutes(%q) = %v, want ErrRoutes saying %q", text, err, says)
		}
	}
}

// FuzzParseRoutes: an upstreams file never panics the parser, and what it
// reads has a name and a URL on the line it names.
func FuzzParseRoutes(f *testing.F) {
	f.Add("openai https://api.openai.com key_env=K paths=/v1/chat models=gpt-*\n")
	f.Add("# c\n\na b\n")
	f.Add("a b c=d=e paths=,\n")
	f.Fuzz(func(t *testing.T, text string) {
		routes, err := proxy.ParseRoutes(text)
		if err != nil {
			return
		}
		lines := strings.Split(text, "\n")
		for _, r := range routes {
			if r.Name == "" || r.URL == "" || r.Line < 1 || r.Line > len(lines) || !strings.Contains(lines[r.Line-1], r.Name) {
				t.Fatalf("route %+v from %q", r, text)
			}
		}
	})
}
