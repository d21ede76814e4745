package tests

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/testutil"
)

// Each format's knowledge (package engine's Protocol): the usage a
// generation reported lands in its record once, and an error event an
// upstream sends mid-stream ends the generation as no result.

// TestUsageRecorded: the usage the upstream reported (chat's last chunk,
// a non-streamed answer's "usage", speech.audio.done's input/output
// tokens) is in the key's status; a replay changes nothing.
func TestUsageRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	prompt := uniquePrompt(t, "[tokens=7]")
	words := int64(len(strings.Fields(prompt)))
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-usage-stream"), -1)
	want := testutil.Usage{PromptTokens: words, CompletionTokens: 7, TotalTokens: words + 7}
	if st := waitState(t, e, "k-usage-stream", "completed"); st.Usage == nil || *st.Usage != want {
		t.Errorf("streamed chat usage %+v, want %+v", st.Usage, want)
	}
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-usage-stream"), -1) // a replay
	if st, _ := getStatus(t, e, "k-usage-stream"); st.Usage == nil || *st.Usage != want || st.Generation != 1 {
		t.Errorf("after a replay: generation %d, usage %+v, want 1, %+v", st.Generation, st.Usage, want)
	}

	plain := uniquePrompt(t, "[tokens=4]")
	words = int64(len(strings.Fields(plain)))
	readBody(t, do(t, "POST", e.URL+chatPath, chatBody(plain, false), "Idempotency-Key", "k-usage-plain"))
	want = testutil.Usage{PromptTokens: words, CompletionTokens: 4, TotalTokens: words + 4}
	if st := waitState(t, e, "k-usage-plain", "completed"); st.Usage == nil || *st.Usage != want {
		t.Errorf("non-streamed chat usage %+v, want %+v", st.Usage, want)
	}

	input := uniquePrompt(t, "[tokens=3]")
	words = int64(len(strings.Fields(input)))
	readEvents(t, do(t, "POST", e.URL+"/v1/audio/speech", speechBody(input, true), "Idempotency-Key", "k-usage-speech"), -1)
	want = testutil.Usage{PromptTokens: words, CompletionTokens: 3, TotalTokens: words + 3}
	if st := waitState(t, e, "k-usage-speech", "completed"); st.Usage == nil || *st.Usage != want {
		t.Errorf("speech usage %+v, want %+v", st.Usage, want)
	}
}

// TestUpstreamErrorEvent: a chat upstream that sends {"error":{...}} in
// the middle of a stream (as OpenAI does when a generation fails) ends the
// generation: the readers get reprise's error event carrying the
// upstream's message and code, no [DONE]; the key is failed and the next
// request with it generates afresh.
func TestUpstreamErrorEvent(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	e := newEnv(t, withUpstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for _, line := range []string{
			`{"choices":[{"index":0,"delta":{"content":"half"}}]}`,
			`{"error":{"message":"The server had an error while processing your request.","type":"server_error","code":"server_overloaded"}}`,
		} {
			_, _ = w.Write([]byte("data: " + line + "\n\n"))
			f.Flush()
		}
		time.Sleep(50 * time.Millisecond) // an upstream that keeps the connection: the error alone ends the stream
	})))
	for try := 1; try <= 2; try++ {
		evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody("error mid-stream", true), "Idempotency-Key", "k-error-event"), -1)
		last := lastEvent(t, evs)
		if len(evs) != 2 || last.Type != "error" {
			t.Fatalf("try %d: %d events ending %+v, want the chunk then event: error", try, len(evs), last)
		}
		if x := testutil.ParseAPIError(t, last.Data); x.Code != "server_overloaded" || x.Type != "server_error" || !strings.Contains(x.Message, "server had an error") {
			t.Errorf("try %d: error %q %q %q, want the upstream's", try, x.Message, x.Type, x.Code)
		}
		if st := waitState(t, e, "k-error-event", "failed"); st.Error != "server_overloaded" || st.Generation != try {
			t.Errorf("try %d: status %+v, want failed with server_overloaded in generation %d", try, st, try)
		}
	}
	if calls := calls.Load(); calls != 2 {
		t.Errorf("%d upstream calls, want 2 (a failed key generates afresh)", calls)
	}
}
