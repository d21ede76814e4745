package mockllm_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// TestMessagesPrompt: a Messages request is booked under its last user
// message's text, as an agent sends it: Claude Code puts <system-reminder>
// blocks in the user's turn and ends with a "system" message describing
// its environment; neither is the prompt.
func TestMessagesPrompt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		messages []map[string]any
		want     string
	}{
		{"string content", []map[string]any{{"role": "user", "content": "plain [tokens=3]"}}, "plain [tokens=3]"},
		{"an agent's turn", []map[string]any{
			{"role": "user", "content": []map[string]any{
				{"type": "text", "text": "<system-reminder>\nsee [Claude Code](https://example.com) [tokens=99]\n</system-reminder>\n"},
				{"type": "text", "text": "agent [tokens=3]"},
			}},
			{"role": "system", "content": []map[string]any{{"type": "text", "text": "# Environment [tokens=99]"}}},
		}, "agent [tokens=3]"},
		{"prefilled answer", []map[string]any{
			{"role": "user", "content": "prefill [tokens=3]"},
			{"role": "assistant", "content": "Sure:"},
		}, "prefill [tokens=3]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake, srv := newFake(t, mockllm.Config{})
			body := map[string]any{"model": "m", "max_tokens": 64, "messages": c.messages}
			resp := mustPost(t, testContext(t), srv.URL+mockllm.MessagesPath, body)
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, b)
			}
			if g := fake.Ledger().Get(c.want); g.Generations != 1 {
				t.Errorf("ledger of %q: %+v, want one generation; entries %v", c.want, g, fake.Ledger().Entries())
			}
			if want := strings.Join(mockllm.Content(c.want, 3, false), ""); !strings.Contains(string(b), want) {
				t.Errorf("answer %s, want the text %q", b, want)
			}
		})
	}
}
