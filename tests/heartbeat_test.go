package tests

import (
	"io"
	"strings"
	"testing"
)

// TestHeartbeatDispatchesNothing: the SSE heartbeat is a comment line
// that ends no event block: every block of the stream (lines up to a blank
// line) carries data. The OpenAI and Anthropic Python SDKs' decoders
// dispatch a block without data once an id was seen, and fail to parse its
// empty data: a stream slower than the heartbeat would break them.
func TestHeartbeatDispatchesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // heartbeat every 500 ms
	prompt := uniquePrompt(t, "[tokens=3] [delay=1200ms]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Content-Type", "application/json")
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	raw := strings.ReplaceAll(string(b), "\r\n", "\n")
	if !strings.Contains(raw, ": ping\n") {
		t.Fatalf("no heartbeat in a stream with 1.2 s between tokens:\n%s", raw)
	}
	for i, block := range strings.Split(strings.TrimSuffix(raw, "\n\n"), "\n\n") {
		if !strings.Contains("\n"+block, "\ndata:") {
			t.Errorf("block %d has no data (an SDK dispatches it as an empty event): %q", i, block)
		}
	}
	if !strings.HasSuffix(raw, "data: [DONE]\n\n") {
		t.Errorf("the stream does not end with [DONE]:\n%s", raw)
	}
}
