package mockllm_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// sentences reports whether text is whole sentences: it starts with a
// capital letter and ends with a full stop.
func sentences(text string) bool {
	return text != "" && unicode.IsUpper([]rune(text)[0]) && strings.HasSuffix(text, ".")
}

// ends is the end of text, enough to see where it stops.
func ends(text string) string {
	if len(text) > 60 {
		return "…" + text[len(text)-60:]
	}
	return text
}

// TestContentReadableEndsAtASentenceEnd: the demo model's answer is whole
// sentences whatever its token count, and still exactly that many tokens,
// the same ones for the same prompt.
func TestContentReadableEndsAtASentenceEnd(t *testing.T) {
	t.Parallel()
	prompts := []string{
		"Explain why a dropped stream should not be billed twice.",
		"demo", "a", "tell me [tokens=7]", "[tokens=120]",
	}
	for _, prompt := range prompts {
		var cut []string // the token counts that end mid-sentence
		for n := 1; n <= 400; n++ {
			toks := mockllm.Content(prompt, n, true)
			if len(toks) != n {
				t.Fatalf("Content(%q, %d) has %d tokens", prompt, n, len(toks))
			}
			for i, tok := range toks {
				if strings.TrimSpace(tok) == "" || (i > 0) != strings.HasPrefix(tok, " ") {
					t.Fatalf("Content(%q, %d) token %d = %q: want a word, with a leading space but on the first", prompt, n, i, tok)
				}
			}
			if text := strings.Join(toks, ""); !sentences(text) {
				cut = append(cut, fmt.Sprintf("%d: %q", n, ends(text)))
			}
			if again := mockllm.Content(prompt, n, true); !slices.Equal(toks, again) {
				t.Fatalf("Content(%q, %d) changed between two calls", prompt, n)
			}
		}
		if len(cut) > 0 {
			t.Errorf("Content(%q, n, true) is not whole sentences for %d of 400 token counts n, e.g.\n%s",
				prompt, len(cut), strings.Join(cut[:min(len(cut), 3)], "\n"))
		}
	}
}

// TestAnswersEndAtASentenceEndInEveryFormat: every text format, streamed
// or whole, answers the demo model's whole sentences in the token count
// asked, and bills that count.
func TestAnswersEndAtASentenceEndInEveryFormat(t *testing.T) {
	t.Parallel()
	messages := func(prompt string) []map[string]any { return []map[string]any{{"role": "user", "content": prompt}} }
	formats := []struct {
		name, path string
		body       func(prompt string, stream bool) map[string]any
	}{
		{"chat", mockllm.ChatPath, chatBody},
		{"responses", mockllm.ResponsesPath, func(prompt string, stream bool) map[string]any {
			return map[string]any{"model": "m", "input": prompt, "stream": stream}
		}},
		{"messages", mockllm.MessagesPath, func(prompt string, stream bool) map[string]any {
			return map[string]any{"model": "m", "max_tokens": 1024, "messages": messages(prompt), "stream": stream}
		}},
	}
	fake, srv := newFake(t, mockllm.Config{Readable: true, Tokens: 120}) // as cmd/reprise serves it
	for _, f := range formats {
		for _, stream := range []bool{true, false} {
			for _, n := range []int{0, 1, 9, 120} { // 0: the prompt gives no count
				name := fmt.Sprintf("%s stream=%v tokens=%d", f.name, stream, n)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					prompt, want := name, 120
					if n > 0 {
						prompt, want = fmt.Sprintf("%s [tokens=%d]", name, n), n
					}
					resp := mustPost(t, testContext(t), srv.URL+f.path, f.body(prompt, stream))
					b, err := io.ReadAll(resp.Body)
					if err != nil || resp.StatusCode != http.StatusOK {
						t.Fatalf("status %d, %v: %s", resp.StatusCode, err, b)
					}
					if err := fake.Ledger().Wait(testContext(t), prompt, 1); err != nil {
						t.Fatal(err)
					}
					gens := fake.Ledger().Generations(prompt)
					if len(gens) != 1 || !gens[0].Completed || gens[0].Tokens != want {
						t.Fatalf("generations %+v, want one completed of %d tokens", gens, want)
					}
					if text := strings.Join(mockllm.Content(prompt, want, true), ""); gens[0].Content != text {
						t.Errorf("generated %q, want %q", gens[0].Content, text)
					}
					if !sentences(gens[0].Content) {
						t.Errorf("the answer ends mid-sentence: %q", ends(gens[0].Content))
					}
				})
			}
		}
	}
}
