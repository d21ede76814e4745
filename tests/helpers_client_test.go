package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/testutil"
)

// event is one SSE event as a client sees it.
type event struct {
	ID   string
	Type string
	Data string
}

func chatBody(prompt string, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"model": "mock-1", "stream": stream,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	})
	return string(b)
}

func speechBody(input string, sseFormat bool) string {
	m := map[string]any{"model": "mock-tts", "input": input, "voice": "alloy"}
	if sseFormat {
		m["stream_format"] = "sse"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// do sends a request with a deadline (testutil.Do); header pairs are
// name, value, ...
func do(tb testing.TB, method, url, body string, header ...string) *http.Response {
	tb.Helper()
	return testutil.Do(tb, method, url, body, header...)
}

// send sends a request (testutil.Send); it returns errors, so it may run
// in any goroutine.
func send(ctx context.Context, method, url, body string, header ...string) (*http.Response, error) {
	return testutil.Send(ctx, method, url, body, header...)
}

// readEvents reads up to max events (all when max < 0) and closes the body:
// reading fewer than the stream holds is a dropped connection.
func readEvents(tb testing.TB, resp *http.Response, max int) []event {
	tb.Helper()
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		tb.Fatalf("want an event stream, got %d %s: %s", resp.StatusCode, ct, b)
	}
	var out []event
	for ev, err := range sse.Read(resp.Body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
		if err != nil {
			tb.Fatalf("reading events: %v", err)
		}
		out = append(out, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data})
		if max >= 0 && len(out) >= max {
			break
		}
	}
	return out
}

func readBody(tb testing.TB, resp *http.Response) string {
	tb.Helper()
	return testutil.ReadBody(tb, resp)
}

// content reassembles the text of chat chunks.
func content(tb testing.TB, evs []event) string {
	tb.Helper()
	text, err := chatText(evs)
	if err != nil {
		tb.Fatal(err)
	}
	return text
}

// chatText reassembles the text of chat chunks, skipping named events and [DONE].
func chatText(evs []event) (string, error) {
	var b strings.Builder
	for _, ev := range evs {
		if ev.Type != "" || ev.Data == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &c); err != nil {
			return b.String(), fmt.Errorf("chunk %q: %w", ev.Data, err)
		}
		for _, ch := range c.Choices {
			b.WriteString(ch.Delta.Content)
		}
	}
	return b.String(), nil
}

func lastID(evs []event) string {
	if len(evs) == 0 {
		return ""
	}
	return evs[len(evs)-1].ID
}

func ids(evs []event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

// checkUnique fails on a repeated event id.
func checkUnique(tb testing.TB, evs []event) {
	tb.Helper()
	seen := map[string]bool{}
	for _, ev := range evs {
		if seen[ev.ID] {
			tb.Fatalf("event id %s delivered twice", ev.ID)
		}
		seen[ev.ID] = true
	}
}

func uniquePrompt(tb testing.TB, directives string) string {
	tb.Helper()
	return fmt.Sprintf("%s %d %s", tb.Name(), time.Now().UnixNano(), directives)
}

// waitCtx is a context that ends after d or with the test.
func waitCtx(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	return testutil.Context(tb, d)
}
