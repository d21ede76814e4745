//go:build linux

package tests

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestKeylessTailCutRetryReplays: reprise wrote a keyless answer whole into
// its socket and its handler ended, but the link dropped the answer's last
// few kilobytes and then the connection: the client's TCP never
// acknowledged them, so the answer was not received. The identical retry
// is recognised as the retry of a request whose client left before its
// result, and replays it: one upstream generation, the whole answer. (A
// write into the socket's buffer is no delivery: an answer counted as given
// once written would be generated again by the retry.)
func TestKeylessTailCutRetryReplays(t *testing.T) {
	t.Parallel()
	const tokens = 100
	for _, tc := range []struct {
		name   string
		stream bool
		// pass says when the link passed on enough: all but the answer's
		// last 4 KiB (whole), all but its last 24 events (~4 KiB).
		pass func([]byte) bool
	}{
		{"whole", false, passWhole(4 << 10)},
		{"streamed", true, passEvents(tokens + 3 - 24)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logger, ended := handlerEnds(chatPath)
			e := newEnv(t, withConfig(func(c *proxy.Config) { c.Logger = logger }))
			n := tokens
			if !tc.stream {
				n = 1500 // a whole answer of about 16 KiB
			}
			prompt := uniquePrompt(t, "[tokens="+itoa(n)+"] [delay=1ms]")
			body := chatBody(prompt, tc.stream)
			link := newSwallowLink(t, e.addr, tc.pass)

			type answer struct {
				key  string
				body []byte
				err  error
			}
			first := make(chan answer, 1)
			go func() {
				c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
				resp, err := c.Post(link.URL+chatPath, "application/json", strings.NewReader(body))
				if err != nil {
					first <- answer{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				first <- answer{key: resp.Header.Get("Idempotency-Key"), body: b, err: err}
			}()
			// reprise wrote the answer whole and its handler ended; the
			// link stopped reading it. Then the connection dies.
			for what, ch := range map[string]<-chan struct{}{"the proxy's handler to end": ended, "the link to stop reading": link.stopped} {
				select {
				case <-ch:
				case <-time.After(30 * time.Second):
					t.Fatalf("waited 30 s for %s", what)
				}
			}
			link.cut()
			got := <-first
			if got.err == nil || got.key == "" {
				t.Fatalf("first request: key %q, %d bytes, err %v; want a key and a broken answer", got.key, len(got.body), got.err)
			}

			retry := do(t, "POST", e.URL+chatPath, body)
			if k := retry.Header.Get("Idempotency-Key"); k != got.key || retry.Header.Get("Idempotent-Replayed") != "true" || attemptsHeader(t, retry) != 0 {
				t.Errorf("retry: key %q (first %q), Idempotent-Replayed %q, Reprise-Attempts %s; want the first's key replayed",
					k, got.key, retry.Header.Get("Idempotent-Replayed"), retry.Header.Get("Reprise-Attempts"))
			}
			if tc.stream {
				checkComplete(t, readEvents(t, retry, -1), prompt, n)
			} else {
				var done struct {
					Choices []struct {
						Message struct {
							Content string `json:"content"`
						} `json:"message"`
					} `json:"choices"`
				}
				b := readBody(t, retry)
				if err := json.Unmarshal([]byte(b), &done); err != nil || len(done.Choices) != 1 ||
					done.Choices[0].Message.Content != strings.Join(mockllm.Content(prompt, n, false), "") {
					t.Fatalf("retry's answer (%v) is not the whole generation: %.300s", err, b)
				}
			}
			if g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1); g.Generations != 1 {
				t.Errorf("ledger %+v, want 1 generation (2: the unacknowledged tail counted as received)", g)
			}
		})
	}
}
