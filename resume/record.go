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
	Key   string `json:"key"`
	State State  `json:"state"`
	// Fingerprint is the request's (Fingerprint): what a duplicate must
	// match. Empty in a record written by a version before it: then
	// BytesFingerprint must match.
	Fingerprint string `json:"fingerprint_c14n,omitempty"`
	// BytesFingerprint is the request's BytesFingerprint, for versions
	// that compare only it (see BytesFingerprint).
	BytesFingerprint string `json:"fingerprint"`
	Generation       uint64 `json:"generation"`
	Owner            string `json:"owner,omitempty"`
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
	// Usage is what the upstream reported the completed generation cost,
	// when it did. A generation in progress has it once its owner kept it
	// (Lease.KeepUsage), just before its terminal event is stored.
	Usage *Usage `json:"usage,omitempty"`
	// Tenant is the TenantHash of the key's tenant, never the tenant id.
	Tenant string `json:"tenant,omitempty"`
	// Model is the model the generation's request named, from its start.
	Model string `json:"model,omitempty"`
	// Cost is what the generation cost by the price table, when known
	// (a failed generation's too).
	Cost *float64 `json:"cost,omitempty"`
	// Billed sums the usage and cost of every generation of the key.
	Billed *Billed `json:"billed,omitempty"`
	// Saved is what duplicates of the key (attaches, replays, SDK
	// retries) did not cost.
	Saved *Saved `json:"saved,omitempty"`
	// Attached counts the duplicates that attached to the running
	// generation: Finish moves them into Saved, once its cost is known.
	Attached uint64 `json:"attached,omitempty"`
	// Upstream names the upstream that answered the generation.
	Upstream string `json:"upstream,omitempty"`
	// Content is the ContentID of the keyless request the key was made
	// for, "" for a key a client sent: a reader that receives the result
	// tells the keyless index so (Manager.Received).
	Content   string    `json:"content,omitempty"`
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

// Billed is what a key's generations billed, all of them: completed and
// failed.
type Billed struct {
	Usage
	// Cost is the sum of the generations' costs; nil while none was known.
	Cost *float64 `json:"cost,omitempty"`
	// Generations counts the generations whose usage or cost was known.
	Generations uint64 `json:"generations"`
}

// Saved is what a key's duplicates were spared.
type Saved struct {
	// Duplicates counts the requests that attached or replayed instead of
	// generating.
	Duplicates uint64 `json:"duplicates"`
	// Cost is what they would have cost; nil while no cost was known.
	Cost *float64 `json:"cost,omitempty"`
}

// bill adds one generation's usage and cost to the key's bill.
func (r *Record) bill(u *Usage, cost *float64) {
	if u == nil && cost == nil {
		return
	}
	b := Billed{}
	if r.Billed != nil {
		b = *r.Billed
	}
	b.Generations++
	if u != nil {
		f := u.Filled()
		b.PromptTokens += f.PromptTokens
		b.CompletionTokens += f.CompletionTokens
		b.TotalTokens += f.TotalTokens
	}
	b.Cost = addCost(b.Cost, cost, 1)
	r.Billed = &b
}

// save counts n duplicates of a generation of cost (nil: unknown).
func (r *Record) save(n uint64, cost *float64) {
	if n == 0 {
		return
	}
	s := Saved{}
	if r.Saved != nil {
		s = *r.Saved
	}
	s.Duplicates += n
	s.Cost = addCost(s.Cost, cost, n)
	r.Saved = &s
}

// addCost is sum plus n times cost, each nil when unknown.
func addCost(sum, cost *float64, n uint64) *float64 {
	if cost == nil {
		return sum
	}
	v := *cost * float64(n)
	if sum != nil {
		v += *sum
	}
	return &v
}
