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
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
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
