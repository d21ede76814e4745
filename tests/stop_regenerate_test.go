package tests

import (
	"net/url"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/stream"
)

// TestKeylessStopRegenerate is docs/retries.md's "Stop and Regenerate
// without a helper": a chat UI that sends no key and whose Stop only
// aborts its fetch has left before the result, so the identical request
// again (its Regenerate) is taken for a retry and gets the same answer.
// Three ways make it generate anew: cancel first (and wait for the status
// to read cancelled), Reprise-Keyless-Retry: off on the Regenerate, or a
// key of the UI's own per user action.
func TestKeylessStopRegenerate(t *testing.T) {
	t.Parallel()
	const tokens = 100 // 2 s at [delay=20ms]: the resend comes while it runs
	// stop sends the keyless request and leaves after 3 events, as a Stop
	// that only aborts the fetch does; it returns the key and Location.
	stop := func(t *testing.T, e *env, body string) (key, loc string) {
		t.Helper()
		resp := do(t, "POST", e.URL+chatPath, body)
		key, loc = resp.Header.Get("Idempotency-Key"), resp.Header.Get("Location")
		readEvents(t, resp, 3)
		return key, loc
	}
	// regenerate sends body again and reads it to its end; it returns the
	// key that served it and whether the upstream was asked (attempts).
	regenerate := func(t *testing.T, e *env, body, prompt string, header ...string) (key string, attempts int) {
		t.Helper()
		resp := do(t, "POST", e.URL+chatPath, body, header...)
		key, attempts = resp.Header.Get("Idempotency-Key"), attemptsHeader(t, resp)
		if got, want := content(t, readEvents(t, resp, -1)), strings.Join(mockllm.Content(prompt, tokens, false), ""); got != want {
			t.Errorf("the regenerate read %q, want %q", got, want)
		}
		return key, attempts
	}
	// generations waits for n settled generations of prompt and returns them.
	generations := func(t *testing.T, e *env, prompt string, n int) []mockllm.Generation {
		t.Helper()
		testutil.Settled(t, e.LLM.Ledger(), prompt, n)
		return e.LLM.Ledger().Generations(prompt)
	}

	t.Run("the stopped fetch's resend is its retry: the same answer", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t) // its own: waitLeft counts the instance's departures
		prompt := uniquePrompt(t, "[tokens="+itoa(tokens)+"] [delay=20ms]")
		body := chatBody(prompt, true)
		first, _ := stop(t, e, body)
		waitLeft(t, e.URL, 1)
		key, attempts := regenerate(t, e, body, prompt)
		if key != first || attempts != 0 {
			t.Errorf("the resend got key %s with %d upstream attempts, want the stopped one's (%s) and none", key, attempts, first)
		}
		if gens := generations(t, e, prompt, 1); len(gens) != 1 {
			t.Errorf("%d generations, want 1", len(gens))
		}
	})

	t.Run("cancel first: a new generation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t) // its own: waitLeft counts the instance's departures
		prompt := uniquePrompt(t, "[tokens="+itoa(tokens)+"] [delay=20ms]")
		body := chatBody(prompt, true)
		first, loc := stop(t, e, body)
		u, err := url.Parse(e.URL + loc)
		if err != nil {
			t.Fatal(err)
		}
		u.Path += "/cancel"
		resp := do(t, "POST", u.String(), "")
		// The cancel answers once it took effect: a resend after it
		// cannot attach to the generation being cancelled.
		if b := readBody(t, resp); resp.StatusCode != 202 || !strings.Contains(b, `"state":"cancelled"`) {
			t.Fatalf("cancel: %d %s, want 202 with the state cancelled", resp.StatusCode, b)
		}
		key, attempts := regenerate(t, e, body, prompt)
		if attempts != 1 {
			t.Errorf("the resend made %d upstream attempts, want 1: a new generation (key %s, the first %s)", attempts, key, first)
		}
		if gens := generations(t, e, prompt, 2); len(gens) != 2 || !gens[0].Aborted || !gens[1].Completed {
			t.Errorf("generations %+v, want the cancelled one and a new one completed", gens)
		}
	})

	t.Run("Reprise-Keyless-Retry: off: a new generation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t) // its own: waitLeft counts the instance's departures
		prompt := uniquePrompt(t, "[tokens="+itoa(tokens)+"] [delay=20ms]")
		body := chatBody(prompt, true)
		first, _ := stop(t, e, body)
		waitLeft(t, e.URL, 1)
		key, attempts := regenerate(t, e, body, prompt, stream.KeylessRetryHeader, "off")
		if key == first || attempts != 1 {
			t.Errorf("the resend got key %s with %d upstream attempts, want a new key (not %s) and a new generation", key, attempts, first)
		}
		if gens := generations(t, e, prompt, 2); len(gens) != 2 {
			t.Errorf("%d generations, want 2", len(gens))
		}
	})

	t.Run("a key per user action: a new generation", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t) // its own: waitLeft counts the instance's departures
		prompt := uniquePrompt(t, "[tokens="+itoa(tokens)+"] [delay=20ms]")
		body := chatBody(prompt, true)
		readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", "stop-regen-1"), 3)
		_, attempts := regenerate(t, e, body, prompt, "Idempotency-Key", "stop-regen-2")
		if attempts != 1 {
			t.Errorf("the second action made %d upstream attempts, want 1", attempts)
		}
		if gens := generations(t, e, prompt, 2); len(gens) != 2 {
			t.Errorf("%d generations, want 2", len(gens))
		}
	})
}
