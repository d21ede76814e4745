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

// do sends a request with a deadline; header pairs are name, value, ...
func do(tb testing.TB, method, url, body string, header ...string) *http.Response {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	resp, err := send(ctx, method, url, body, header...)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	return resp
}

// send sends a request (a JSON body when there is one); header pairs are
// name, value, ... It returns errors, so it may run in any goroutine.
func send(ctx context.Context, method, url, body string, header ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return http.DefaultClient.Do(req)
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
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
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
	return fmt.Sprintf("%s %d %s", tb.Name(), time.Now().UnixNano(), directives)
}

func waitCtx(tb testing.TB, d time.Duration) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	tb.Cleanup(cancel)
	return ctx
}
