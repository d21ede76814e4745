package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/internal/proxy"
)

// TestReadyLine: the line that says the instance serves names https://
// under TLS, every route (or the upstream and each fallback), the NATS list
// with its password redacted instead of --data when the store is external,
// and the grace as a duration.
func TestReadyLine(t *testing.T) {
	addr := &net.TCPAddr{IP: net.IPv4zero, Port: 8443}
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	attrsOf := func(attrs []any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(attrs); i += 2 {
			m[attrs[i].(string)] = attrs[i+1]
		}
		return m
	}

	cfg := config{page: true, nats: "nats://u:pw@n1:4222,nats://n2:4222", data: "./data", grace: 90 * time.Second}
	routes := []proxy.Route{
		{Name: "openai", URL: mustURL("https://api.openai.com")},
		{URL: mustURL("https://api.anthropic.com")},
	}
	msg, attrs := readyLine(cfg, addr, true, []*url.URL{routes[0].URL}, routes)
	if want := "reprise is ready: open https://localhost:8443/"; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	a := attrsOf(attrs)
	if a["url"] != "https://localhost:8443" {
		t.Errorf("url %v, want https://localhost:8443", a["url"])
	}
	if got, want := a["routes"], []string{"openai https://api.openai.com", "api.anthropic.com https://api.anthropic.com"}; !slices.Equal(got.([]string), want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	if got := a["nats"]; got != "nats://u:xxxxx@n1:4222,nats://n2:4222" {
		t.Errorf("nats %v, want the list with its password redacted", got)
	}
	if _, ok := a["data"]; ok {
		t.Errorf("data %v logged with --nats: the embedded store is not used", a["data"])
	}
	if a["grace"] != "1m30s" {
		t.Errorf("grace %v, want 1m30s", a["grace"])
	}
	if _, ok := a["upstream"]; ok {
		t.Errorf("upstream %v logged next to the routes", a["upstream"])
	}

	cfg = config{page: false, data: "/var/lib/reprise", grace: 30 * time.Second}
	msg, attrs = readyLine(cfg, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, false,
		[]*url.URL{mustURL("https://a.example"), mustURL("https://b.example"), mustURL("https://c.example")}, nil)
	if want := "reprise is ready: serving http://127.0.0.1:8080/ (no demo page: --page=false)"; msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	a = attrsOf(attrs)
	if a["upstream"] != "https://a.example" || !slices.Equal(a["fallbacks"].([]string), []string{"https://b.example", "https://c.example"}) {
		t.Errorf("upstream %v, fallbacks %v", a["upstream"], a["fallbacks"])
	}
	if a["data"] != "/var/lib/reprise" {
		t.Errorf("data %v, want the embedded store's directory", a["data"])
	}
	if _, ok := a["nats"]; ok {
		t.Errorf("nats %v logged without --nats", a["nats"])
	}
}

// TestPageOff: with REPRISE_PAGE=false the instance serves no demo page
// (/ and its files are 404) but still the client helper /reprise.js and
// the API's probes.
func TestPageOff(t *testing.T) {
	env := map[string]string{"REPRISE_PAGE": "false"}
	cfg, err := parseConfig([]string{"--listen", "127.0.0.1:0", "--data", t.TempDir(), "--upstream", "http://127.0.0.1:1", "--secret", "0123456789abcdef0123"},
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.page {
		t.Fatal("REPRISE_PAGE=false left --page on")
	}
	cfg.registerer = prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan string, 1), make(chan error, 1)
	go func() { done <- run(ctx, cfg, slog.New(slog.DiscardHandler), ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not ready within 30s")
	}
	for path, want := range map[string]int{
		"/": http.StatusNotFound, "/app.js": http.StatusNotFound, "/style.css": http.StatusNotFound,
		"/reprise.js": http.StatusOK, "/healthz": http.StatusOK,
	} {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, res.StatusCode, want)
		}
	}
}
