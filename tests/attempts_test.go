package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// logLines is a slog JSON sink a test reads back.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// find returns the decoded lines with message msg for which match is true.
func (l *logLines) find(tb testing.TB, msg string, match func(map[string]any) bool) []map[string]any {
	tb.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for line := range strings.SplitSeq(l.buf.String(), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			tb.Fatalf("log line %q is not JSON: %v", line, err)
		}
		if m["msg"] == msg && match(m) {
			out = append(out, m)
		}
	}
	return out
}

// attemptRecord is a record of GET /v1/streams/{key}/attempts.
type attemptRecord struct {
	Key         string  `json:"key"`
	Tenant      string  `json:"tenant"`
	KeyName     string  `json:"key_name"`
	Generation  int     `json:"generation"`
	Attempt     int     `json:"attempt"`
	Upstream    string  `json:"upstream"`
	Path        string  `json:"path"`
	Model       string  `json:"model"`
	Status      int     `json:"status"`
	Kind        string  `json:"kind"`
	DurationMS  float64 `json:"duration_ms"`
	FirstByteMS float64 `json:"ttfb_ms"`
	// On the generation's last attempt only, once it ended.
	PromptTokens     *int64   `json:"prompt_tokens"`
	CompletionTokens *int64   `json:"completion_tokens"`
	Cost             *float64 `json:"cost"`
}

// attemptLog returns key's attempt log, read through url with header.
func attemptLog(tb testing.TB, url, key string, header ...string) []attemptRecord {
	tb.Helper()
	resp := do(tb, "GET", url+"/v1/streams/"+key+"/attempts", "", header...)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got struct {
		Attempts []attemptRecord `json:"attempts"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil {
		tb.Fatalf("GET attempts: HTTP %d %s", resp.StatusCode, b)
	}
	return got.Attempts
}

// TestAttemptLog: a generation the fake model answers 503, 503, then 200
// is one key with three upstream attempts: each is an info line of the log
// and a record of GET /v1/streams/{key}/attempts (under the key's access
// rules: another credential gets 404), the third one also a WARN line; every
// request has an access line with its key and decision. The third record,
// the answer's, has the generation's tokens (the fake model's ledger) and
// cost, as the key's status has them; the others have neither.
func TestAttemptLog(t *testing.T) {
	t.Parallel()
	var logs logLines
	var prices envOptions
	withPrices(t)(&prices)
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		prices.configure(c)
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.Policy.BaseDelay, c.Policy.MaxDelay = time.Millisecond, 2*time.Millisecond
	}))
	const key, cred = "k-attempts", "Bearer sk-attempts"
	prompt := uniquePrompt(t, "[status=503,503] [tokens=3]")
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key, "Authorization", cred), -1)
	checkComplete(t, evs, prompt, 3)
	status := testutil.WaitState(t, e.URL, key, "completed", "Authorization", cred)
	// A replay and a resume: the upstream is not asked again; another body
	// with the key is rejected.
	readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key, "Authorization", cred), -1)
	readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Authorization", cred, "Accept", "text/event-stream"), -1)
	mismatch := do(t, "POST", e.URL+chatPath, chatBody(prompt+" other", true), "Idempotency-Key", key, "Authorization", cred)
	readBody(t, mismatch)
	if mismatch.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("another body with the key: HTTP %d, want 422", mismatch.StatusCode)
	}

	var recs []attemptRecord
	testutil.Eventually(t, 10*time.Second, "three records in the attempt log", func() bool {
		resp := do(t, "GET", e.URL+"/v1/streams/"+key+"/attempts", "", "Authorization", cred)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET attempts: HTTP %d %s", resp.StatusCode, b)
		}
		var got struct {
			Key      string          `json:"key"`
			Attempts []attemptRecord `json:"attempts"`
		}
		if err := json.Unmarshal(b, &got); err != nil || got.Key != key {
			t.Fatalf("GET attempts: %s: %v", b, err)
		}
		recs = got.Attempts
		return len(recs) >= 3 && recs[len(recs)-1].PromptTokens != nil
	})
	want := []struct {
		status int
		kind   string
	}{{503, "retryable"}, {503, "retryable"}, {200, "ok"}}
	if len(recs) != len(want) {
		t.Fatalf("attempt log %+v, want %d records", recs, len(want))
	}
	for i, r := range recs {
		if r.Key != key || r.Generation != 1 || r.Attempt != i+1 || r.Status != want[i].status || r.Kind != want[i].kind ||
			r.Path != chatPath || r.Model != "mock-1" || r.Upstream == "" || r.Tenant == "" || r.Tenant != recs[0].Tenant {
			t.Errorf("record %d = %+v; want key %s, generation 1, attempt %d, status %d, kind %s, path %s, model mock-1, an upstream and the tenant's hash",
				i, r, key, i+1, want[i].status, want[i].kind, chatPath)
		}
		if r.FirstByteMS <= 0 || r.DurationMS < r.FirstByteMS {
			t.Errorf("record %d: ttfb %vms, duration %vms; want 0 < ttfb <= duration", i, r.FirstByteMS, r.DurationMS)
		}
		if strings.Contains(r.Tenant, "sk-attempts") {
			t.Errorf("record %d shows the credential", i)
		}
	}
	gens := e.LLM.Ledger().Generations(prompt)
	if len(gens) != 1 || gens[0].Tokens != 3 {
		t.Fatalf("ledger %+v, want one generation of 3 tokens", gens)
	}
	in, out := int64(gens[0].PromptTokens), int64(gens[0].Tokens)
	wantCost := float64(in)*costPrompt + float64(out)*costCompletion
	for _, r := range recs[:2] {
		if r.PromptTokens != nil || r.CompletionTokens != nil || r.Cost != nil {
			t.Errorf("failed attempt %d has usage or cost: %v %v %v", r.Attempt, r.PromptTokens, r.CompletionTokens, r.Cost)
		}
	}
	if last := recs[2]; last.PromptTokens == nil || *last.PromptTokens != in || last.CompletionTokens == nil || *last.CompletionTokens != out ||
		last.Cost == nil || *last.Cost != wantCost {
		t.Errorf("the answer's attempt: tokens %v/%v cost %v; want %d/%d (the ledger) and %v", last.PromptTokens, last.CompletionTokens, last.Cost, in, out, wantCost)
	}
	if u := status.Usage; u == nil || u.PromptTokens != in || u.CompletionTokens != out || status.Cost == nil || *status.Cost != wantCost {
		t.Errorf("status usage %+v cost %v; want the attempt record's %d/%d and %v", u, status.Cost, in, out, wantCost)
	}
	resp := do(t, "GET", e.URL+"/v1/streams/"+key+"/attempts", "", "Authorization", "Bearer sk-other")
	readBody(t, resp)
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET attempts with another credential: HTTP %d, want 404", resp.StatusCode)
	}

	ofKey := func(m map[string]any) bool { return m["key"] == key }
	if got := logs.find(t, "upstream attempt", ofKey); len(got) != 3 || got[0]["level"] != "INFO" || got[2]["status"] != 200.0 {
		t.Errorf("attempt log lines %v; want 3 at INFO, the last 200", got)
	}
	if got := logs.find(t, "key sees more than two upstream attempts", ofKey); len(got) != 1 || got[0]["level"] != "WARN" || got[0]["attempts"] != 3.0 {
		t.Errorf("WARN lines %v; want one, at the third attempt", got)
	}
	decisions := map[string]int{}
	for _, m := range logs.find(t, "request", ofKey) {
		d, _ := m["decision"].(string)
		decisions[d]++
		wantStatus := 200.0
		if d == "reject" {
			wantStatus = 422
		}
		if d != "" && m["status"] != wantStatus {
			t.Errorf("access line %v: want status %v", m, wantStatus)
		}
		if _, ok := m["duration_ms"].(float64); !ok {
			t.Errorf("access line %v has no duration", m)
		}
	}
	if decisions["start"] != 1 || decisions["replay"] != 1 || decisions["resume"] != 1 || decisions["reject"] != 1 {
		t.Errorf("access lines by decision %v; want one start, replay, resume and reject each", decisions)
	}
	logs.mu.Lock()
	leaked := bytes.Contains(logs.buf.Bytes(), []byte("sk-attempts"))
	logs.mu.Unlock()
	if leaked {
		t.Error("the log shows the credential")
	}
}

// TestAttemptWarnAcrossGenerations: the WARN line counts a key's upstream
// attempts over its generations: a first generation that failed after two
// (503, then 400) and a second one that succeeds at once make three.
func TestAttemptWarnAcrossGenerations(t *testing.T) {
	t.Parallel()
	var logs logLines
	e := newEnv(t, withConfig(func(c *proxy.Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.Policy.BaseDelay, c.Policy.MaxDelay = time.Millisecond, 2*time.Millisecond
	}))
	const key = "k-warn-gens"
	prompt := uniquePrompt(t, "[status=503,400] [tokens=2]")
	resp := do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key)
	readBody(t, resp)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("first generation: HTTP %d, want the upstream's 400", resp.StatusCode)
	}
	testutil.WaitState(t, e.URL, key, "failed")
	ofKey := func(m map[string]any) bool { return m["key"] == key }
	if got := logs.find(t, "key sees more than two upstream attempts", ofKey); len(got) != 0 {
		t.Fatalf("WARN after two attempts: %v", got)
	}
	testutil.Eventually(t, 10*time.Second, "the first generation's two attempts in the attempt log", func() bool {
		r := do(t, "GET", e.URL+"/v1/streams/"+key+"/attempts", "")
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return strings.Count(string(b), `"attempt":`) >= 2
	})
	checkComplete(t, readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", key), -1), prompt, 2)
	got := logs.find(t, "key sees more than two upstream attempts", ofKey)
	if len(got) != 1 || got[0]["attempts"] != 3.0 || got[0]["gen"] != 2.0 {
		t.Errorf("WARN lines %v; want one, at the key's third attempt (generation 2)", got)
	}
}
