package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/reprise-dev/reprise/tests/testutil"
	"github.com/reprise-dev/reprise/web/mockllm"
)

// End-to-end tests of the timeouts agreeing with each other: the retry
// deadline, the upstream header timeout, the SSE write timeout and the
// keep-alive. Each configures its timeouts small instead of waiting out the
// defaults.

// recordingSDK is an openai-go client of e with its retries on, whose HTTP
// attempts rec records.
func recordingSDK(e *env, rec *sdkAttempts) openai.Client {
	return openai.NewClient(option.WithBaseURL(e.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(2),
		option.WithMiddleware(func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
			resp, err := next(req)
			rec.add(req, resp)
			return resp, err
		}))
}

// TestRetryDeadlineSparesSlowAnswer: a non-streamed answer takes longer
// than the retry deadline (its head comes once the whole answer is made)
// and less than the header timeout. The deadline bounds retries, not the
// attempt in flight: the client gets the answer, one generation. (It got
// 504 at the deadline while the upstream generated anyway; openai-go
// retried into a second and third generation.)
func TestRetryDeadlineSparesSlowAnswer(t *testing.T) {
	t.Parallel()
	pc := fastRetries()
	pc.Deadline = 200 * time.Millisecond
	e := newEnv(t, withPolicy(t, pc)) // header timeout 10 s
	var rec sdkAttempts
	client := recordingSDK(e, &rec)
	prompt := uniquePrompt(t, "[tokens=10] [delay=60ms]") // ~600 ms to the head
	cc, err := client.Chat.Completions.New(waitCtx(t, 20*time.Second), openai.ChatCompletionNewParams{
		Model:    "mock-1",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
	})
	rec.mu.Lock()
	attempts := len(rec.keys)
	rec.mu.Unlock()
	if err != nil {
		t.Fatalf("after %d SDK attempts: %v; want the answer (the 200 ms retry deadline must not cut an attempt already sent)", attempts, err)
	}
	if got, want := cc.Choices[0].Message.Content, strings.Join(mockllm.Content(prompt, 10, false), ""); got != want {
		t.Fatalf("content %q, want %q", got, want)
	}
	g := testutil.Settled(t, e.LLM.Ledger(), prompt, 1)
	if attempts != 1 || g.Requests != 1 || g.Generations != 1 {
		t.Errorf("%d SDK attempts, ledger %+v; want 1 attempt, 1 request, 1 generation", attempts, g)
	}
}
