package mockllm_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

// bgEvent is what the background tests read of a Responses event.
type bgEvent struct {
	Type     string `json:"type"`
	Seq      int    `json:"sequence_number"`
	Delta    string `json:"delta"`
	Response *struct {
		ID         string `json:"id"`
		Status     string `json:"status"`
		Background bool   `json:"background"`
	} `json:"response"`
}

// readBackground reads a Responses stream until it ends or breaks.
func readBackground(tb testing.TB, r io.Reader) []bgEvent {
	tb.Helper()
	var out []bgEvent
	for ev, err := range sse.Read(r, nil) {
		if err != nil {
			break // a cut connection: what came before counts
		}
		var e bgEvent
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			tb.Fatalf("event %q: %v", ev.Data, err)
		}
		out = append(out, e)
	}
	return out
}

func responsesBody(prompt string, background bool) map[string]any {
	return map[string]any{"model": "test-model", "input": prompt, "stream": true, "background": background}
}

// TestBackgroundResume: a background response's connection is cut after 5
// events, yet the generation runs on; GET ?stream=true&starting_after=N
// gives every event after N, the text completes, and the ledger books one
// generation.
func TestBackgroundResume(t *testing.T) {
	fake, srv := newFake(t, mockllm.Config{Background: true})
	ctx := testContext(t)
	prompt := "background [tokens=30] [delay=2ms] [abort_after=5]"

	resp := mustPost(t, ctx, srv.URL+mockllm.ResponsesPath, responsesBody(prompt, true))
	first := readBackground(t, resp.Body)
	resp.Body.Close()
	if len(first) != 5 {
		t.Fatalf("got %d events before the cut, want 5", len(first))
	}
	if first[0].Type != "response.created" || first[0].Response == nil || !first[0].Response.Background {
		t.Fatalf("first event %+v, want response.created of a background response", first[0])
	}
	id, last := first[0].Response.ID, first[len(first)-1].Seq

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s%s/%s?stream=true&starting_after=%d", srv.URL, mockllm.ResponsesPath, id, last), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rest := readBackground(t, resp.Body)
	resp.Body.Close()
	all := append(first, rest...)
	var text strings.Builder
	for i, e := range all {
		if e.Seq != i {
			t.Fatalf("event %d has sequence_number %d: a gap or a duplicate", i, e.Seq)
		}
		if e.Type == "response.output_text.delta" {
			text.WriteString(e.Delta)
		}
	}
	if got := all[len(all)-1].Type; got != "response.completed" {
		t.Fatalf("resumed stream ends with %s, want response.completed", got)
	}
	if want := strings.Join(mockllm.Content(prompt, 30, false), ""); text.String() != want {
		t.Fatalf("text %q, want %q", text.String(), want)
	}
	entry, err := fake.Ledger().WaitSettled(ctx, prompt, 1)
	if err != nil {
		t.Fatal(err)
	}
	if entry.Generations != 1 || entry.Completed != 1 {
		t.Fatalf("ledger %+v, want one completed generation", entry)
	}

	// Retrieved whole, it is the completed response.
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+mockllm.ResponsesPath+"/"+id, nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var obj struct {
		ID     string `json:"id"`
		Status string `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&obj); err != nil || obj.ID != id || obj.Status != "completed" {
		t.Fatalf("retrieved %+v (%v), want %s completed", obj, err, id)
	}
}

// TestBackgroundResumeTwice: resumed again from the start, a background
// response replays every event; the ledger still books one generation.
func TestBackgroundResumeTwice(t *testing.T) {
	fake, srv := newFake(t, mockllm.Config{Background: true})
	ctx := testContext(t)
	prompt := "twice [tokens=8]"
	resp := mustPost(t, ctx, srv.URL+mockllm.ResponsesPath, responsesBody(prompt, true))
	whole := readBackground(t, resp.Body)
	resp.Body.Close()
	id := whole[0].Response.ID
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+mockllm.ResponsesPath+"/"+id+"?stream=true", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		again := readBackground(t, resp.Body)
		resp.Body.Close()
		if len(again) != len(whole) {
			t.Fatalf("resumed from the start: %d events, want %d", len(again), len(whole))
		}
	}
	if entry, err := fake.Ledger().WaitSettled(ctx, prompt, 1); err != nil || entry.Generations != 1 {
		t.Fatalf("ledger %+v (%v), want one generation", entry, err)
	}
}

// TestNoBackgroundMode: a fake without background mode ignores the field
// (a cut connection aborts the generation) and has no response to resume.
func TestNoBackgroundMode(t *testing.T) {
	fake, srv := newFake(t, mockllm.Config{})
	ctx := testContext(t)
	prompt := "plain [tokens=30] [abort_after=5]"
	resp := mustPost(t, ctx, srv.URL+mockllm.ResponsesPath, responsesBody(prompt, true))
	first := readBackground(t, resp.Body)
	resp.Body.Close()
	if len(first) == 0 || first[0].Response == nil || first[0].Response.Background {
		t.Fatalf("first events %+v, want a response that is not in background", first)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+mockllm.ResponsesPath+"/"+first[0].Response.ID+"?stream=true&starting_after=4", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("resume answered %d, want 404", resp.StatusCode)
	}
	if entry, err := fake.Ledger().WaitSettled(ctx, prompt, 1); err != nil || entry.Completed != 0 {
		t.Fatalf("ledger %+v (%v), want the generation aborted", entry, err)
	}
}

// TestBackgroundCancel: POST /v1/responses/{id}/cancel stops a background
// generation, which the ledger books aborted.
func TestBackgroundCancel(t *testing.T) {
	fake, srv := newFake(t, mockllm.Config{Background: true})
	ctx := testContext(t)
	prompt := "cancel me [tokens=300] [delay=5ms] [abort_after=3]"
	resp := mustPost(t, ctx, srv.URL+mockllm.ResponsesPath, responsesBody(prompt, true))
	first := readBackground(t, resp.Body)
	resp.Body.Close()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+mockllm.ResponsesPath+"/"+first[0].Response.ID+"/cancel", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cancel answered %d", resp.StatusCode)
	}
	entry, err := fake.Ledger().WaitSettled(ctx, prompt, 1)
	if err != nil || entry.Generations != 1 || entry.Completed != 0 || entry.Tokens >= 300 {
		t.Fatalf("ledger %+v (%v), want one generation, stopped before its end", entry, err)
	}
}
