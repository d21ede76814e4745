package resume

import (
	"encoding/json"
	"time"
)

// State is a key's state.
type State string

// States of a key.
const (
	InProgress State = "in_progress"
	Completed  State = "completed"
	Failed     State = "failed"
	// Cancelled: a client asked for the generation to stop; no result,
	// and the key may generate afresh, as after Failed.
	Cancelled State = "cancelled"
)

// Record is what reprise keeps per (tenant, key).
type Record struct {
	Key         string `json:"key"`
	State       State  `json:"state"`
	Fingerprint string `json:"fingerprint"`
	Generation  uint64 `json:"generation"`
	Owner       string `json:"owner,omitempty"`
	// Attempt is a random id of the Begin that wrote the generation: a
	// write whose answer was lost is recognised by it.
	Attempt     string    `json:"attempt,omitempty"`
	LeaseUntil  time.Time `json:"lease_until"`
	Path        string    `json:"path"`
	Stream      bool      `json:"stream"`
	Events      uint64    `json:"events"`
	Status      int       `json:"status,omitempty"`
	ContentType string    `json:"content_type,omitempty"`
	Error       string    `json:"error,omitempty"`
	// Usage is what the upstream reported the generation cost, when it did.
	Usage *Usage `json:"usage,omitempty"`
	// Upstream names the upstream that answered the generation.
	Upstream  string    `json:"upstream,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Expired reports whether an in-progress generation's owner stopped
// renewing its lease.
func (r *Record) Expired(now time.Time) bool {
	return r.State == InProgress && now.After(r.LeaseUntil)
}

func (r *Record) encode() []byte {
	b, _ := json.Marshal(r) // a Record always marshals
	return b
}

func decode(b []byte) (Record, error) {
	var r Record
	err := json.Unmarshal(b, &r)
	return r, err
}

// Usage is the token usage an upstream reported for a generation, in
// OpenAI chat's names (other formats map onto them).
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Filled returns u with its total computed when the upstream gave none.
func (u Usage) Filled() Usage {
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u
}

// Merge returns u updated by a later report: the fields next gives (non
// zero) replace u's, as formats report usage in parts (input tokens first,
// output tokens at the end).
func (u Usage) Merge(next Usage) Usage {
	if next.PromptTokens != 0 {
		u.PromptTokens = next.PromptTokens
	}
	if next.CompletionTokens != 0 {
		u.CompletionTokens = next.CompletionTokens
	}
	if next.TotalTokens != 0 {
		u.TotalTokens = next.TotalTokens
	} else {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u
}
