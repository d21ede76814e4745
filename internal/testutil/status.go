package testutil

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Status is a key's JSON status, GET /v1/streams/{key} with Accept:
// application/json, as a client decodes it.
type Status struct {
	Key        string `json:"key"`
	State      string `json:"state"`
	Generation int    `json:"generation"`
	Events     int    `json:"events"`
	Error      string `json:"error"`
	Usage      *Usage `json:"usage"`
	// UsageBasis says where Usage comes from: reported, estimated or
	// unknown; "" while a generation runs.
	UsageBasis string `json:"usage_basis"`
	// CreatedAt and UpdatedAt: when the key was created, and when it or
	// its generation's journal last changed.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Cost is the last generation's cost, Billed what all the key's
	// generations billed, Saved what the requests served without a
	// generation did not cost.
	Cost   *float64 `json:"cost"`
	Billed *Billed  `json:"billed"`
	Saved  *Saved   `json:"saved"`
}

// Billed is the usage and cost of all a key's generations, in the status
// JSON.
type Billed struct {
	Usage
	Cost        *float64 `json:"cost"`
	Generations int      `json:"generations"`
	// UsageBasis: estimated once any generation's usage was.
	UsageBasis string `json:"usage_basis"`
	// Calls counts the generations billed a call (a model priced per
	// call, answered by the upstream).
	Calls int `json:"calls"`
}

// Saved is what the requests served without a generation did not cost,
// in the status JSON: Duplicates counts them all, By by kind.
type Saved struct {
	Duplicates int      `json:"duplicates"`
	By         SavedBy  `json:"by"`
	Usage      *Usage   `json:"usage"`
	Cost       *float64 `json:"cost"`
	// Calls counts those served a generation that was a call billed.
	Calls int `json:"calls"`
}

// SavedBy counts the requests served without a generation by kind.
type SavedBy struct {
	Attach int `json:"attach"`
	Replay int `json:"replay"`
	Resume int `json:"resume"`
	Retry  int `json:"retry"`
}

// Usage is the usage of a key's completed generation, in the status JSON.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// FetchStatus reads key's status from the reprise at base (header: name,
// value pairs, e.g. a credential) and the answer's HTTP status; the Status
// is decoded from a 200 only. It returns its errors, so it may run in any
// goroutine.
func FetchStatus(ctx context.Context, base, key string, header ...string) (Status, int, error) {
	resp, err := Send(ctx, http.MethodGet, base+"/v1/streams/"+key, "", append([]string{"Accept", "application/json"}, header...)...)
	if err != nil {
		return Status{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Status{}, resp.StatusCode, err
	}
	var st Status
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &st); err != nil {
			return st, resp.StatusCode, fmt.Errorf("status body %q: %w", b, err)
		}
	}
	return st, resp.StatusCode, nil
}

// GetStatus is [FetchStatus] within [RequestTimeout], failing the test on
// an error.
func GetStatus(tb testing.TB, base, key string, header ...string) (Status, int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RequestTimeout)
	defer cancel()
	st, code, err := FetchStatus(ctx, base, key, header...)
	if err != nil {
		tb.Fatalf("status of key %s: %v", key, err)
	}
	return st, code
}

// WaitState polls key's status every [PollInterval] until it answers 200
// with state, and fails the test after [WaitTimeout] with the last status
// seen.
func WaitState(tb testing.TB, base, key, state string, header ...string) Status {
	tb.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		st, code := GetStatus(tb, base, key, header...)
		if code == http.StatusOK && st.State == state {
			return st
		}
		if time.Now().After(deadline) {
			tb.Fatalf("key %s: state %q (HTTP %d) after %s, want %q; last status %+v", key, st.State, code, WaitTimeout, state, st)
		}
		time.Sleep(PollInterval) // polling a server's state; bounded above
	}
}
