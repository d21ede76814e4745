package proxy_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
)

// Example runs a proxy on an embedded JetStream in front of the demo model:
// the same request twice is one generation, the second answer a replay of
// the journal.
func Example() {
	dir, _ := os.MkdirTemp("", "reprise-example-")
	defer os.RemoveAll(dir)
	js, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer js.Shutdown()
	nc, _ := js.Connect("example")
	defer nc.Close()
	model := httptest.NewServer(mockllm.New(mockllm.Config{}))
	defer model.Close()
	up, _ := url.Parse(model.URL)

	p, err := proxy.New(context.Background(), proxy.Config{
		NATS: nc, Upstream: up, Auth: auth.Config{Secret: []byte("an example secret, 32 bytes long")},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = p.Serve(ln) }()

	for range 2 {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/chat/completions",
			strings.NewReader(`{"model":"demo","stream":true,"messages":[{"role":"user","content":"hello [tokens=3]"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "order-42-summary")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The second is answered from the journal: a replay once the first
		// generation's record says completed, an attach in the moment
		// before (its client can read [DONE] first).
		dup := resp.Header.Get("Idempotent-Replayed") == "true" || resp.Header.Get("Reprise-Attached") == "true"
		fmt.Printf("%d duplicate=%v events=%d done=%v\n", resp.StatusCode, dup,
			strings.Count("\n"+string(body), "\nid: "), strings.Contains(string(body), "data: [DONE]"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fmt.Println("shutdown:", p.Shutdown(ctx))
	// Output:
	// 200 duplicate=false events=6 done=true
	// 200 duplicate=true events=6 done=true
	// shutdown: <nil>
}
