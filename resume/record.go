package resume

import (
	"encoding/json"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
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
	// Usage is what the last generation cost in tokens, when known: as the
	// upstream reported it, or as reprise estimated it for a generation
	// that failed or was cancelled (UsageBasis). A generation in progress
	// has none (an owner of an earlier version kept it here just before
	// its terminal event was stored; an owner now stores it with that
	// event, for a Salvager).
	Usage *cost.Usage `json:"usage,omitempty"`
	// UsageBasis says where Usage comes from, for the generation
	// BasisGeneration names (Finish writes both; see Basis).
	UsageBasis      cost.Basis `json:"usage_basis,omitempty"`
	BasisGeneration uint64     `json:"usage_basis_generation,omitempty"`
	// Tenant is the TenantHash of the key's tenant, never the tenant id.
	Tenant string `json:"tenant,omitempty"`
	// Model is the model the generation's request named, from its start.
	Model string `json:"model,omitempty"`
	// Cost is what the generation cost by the price table, when known
	// (a failed generation's too).
	Cost *float64 `json:"cost,omitempty"`
	// Call: the generation was a call billed (Result.Call).
	Call bool `json:"call,omitempty"`
	// Billed sums the usage and cost of every generation of the key.
	Billed *cost.Billed `json:"billed,omitempty"`
	// Saved is what the requests served without a generation (attaches,
	// replays, resumes, recognised retries) did not cost.
	Saved *cost.Saved `json:"saved,omitempty"`
	// Attached counts the requests served from the running generation
	// (attaches, resumes, retries): Finish moves them into Saved once it
	// completed, with its usage and cost. AttachedBy splits them by kind;
	// any it does not cover (a record written by a version before it)
	// are attaches.
	Attached   uint64   `json:"attached,omitempty"`
	AttachedBy *Pending `json:"attached_by,omitempty"`
	// Upstream names the upstream that answered the generation.
	Upstream string `json:"upstream,omitempty"`
	// Content is the ContentID of the keyless request the key was made
	// for, "" for a key a client sent: a reader that receives the result
	// tells the keyless index so (Manager.Received).
	Content string `json:"content,omitempty"`
	// Caller is what the upstream calls of a generation in progress take
	// of its caller (Request.Caller), sealed: an instance that takes the
	// generation over after its owner died makes them with it. Dropped
	// when the generation ends.
	Caller    []byte    `json:"caller,omitempty"`
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

// Pending is the split by kind of the requests served from a running
// generation (Record.Attached), for the generation it names: a record's
// Pending of another generation counts nothing (a new generation resets
// Attached, not this).
type Pending struct {
	Generation uint64 `json:"generation"`
	cost.SavedBy
}

// Basis is where the record's Usage comes from: "" while its generation
// runs (without a usage kept by an older owner); Reported for a usage an
// upstream reported (or written by a version that estimated none);
// Unknown for a finished generation with none.
func (r *Record) Basis() cost.Basis {
	switch {
	case r.State != InProgress && r.UsageBasis != "" && r.BasisGeneration == r.Generation:
		return r.UsageBasis
	case r.Usage != nil:
		return cost.Reported
	case r.State == InProgress:
		return ""
	}
	return cost.Unknown
}

// attach counts the requests by served from the running generation, to be
// saved when it completes.
func (r *Record) attach(by cost.SavedBy) {
	if r.AttachedBy == nil || r.AttachedBy.Generation != r.Generation || r.Attached == 0 {
		r.AttachedBy = &Pending{Generation: r.Generation}
	}
	p := *r.AttachedBy
	p.Add(by)
	r.AttachedBy = &p
	r.Attached += by.Total()
}

// PendingBy is the split by kind of n requests served from the record's
// generation while it ran (Attached, or as many as were settled from it):
// AttachedBy's, and attaches for any it does not cover.
func (r *Record) PendingBy(n uint64) cost.SavedBy {
	var by cost.SavedBy
	if p := r.AttachedBy; p != nil && p.Generation == r.Generation && p.Total() <= n {
		by = p.SavedBy
	}
	by.Attach += n - by.Total()
	return by
}

// bill adds one generation's usage, cost and call to the key's bill.
func (r *Record) bill(u *cost.Usage, spent *float64, call bool) {
	r.billAs(u, cost.Reported, spent, call)
}

// billAs adds one generation's usage, of basis, cost and call (a call
// billed) to the key's bill (cost.Billed.Add).
func (r *Record) billAs(u *cost.Usage, basis cost.Basis, spent *float64, call bool) {
	if u == nil && spent == nil && !call {
		return
	}
	var b cost.Billed
	if r.Billed != nil {
		b = *r.Billed
	}
	b = b.Add(u, basis, spent, call)
	r.Billed = &b
}

// save moves the n requests served from the generation that just
// completed (Attached) into Saved, at its usage (the record's), cost and
// call.
func (r *Record) save(n uint64, spent *float64, call bool) {
	r.saveBy(r.PendingBy(n), r.Usage, spent, call)
}

// saveBy counts the requests by served from a completed generation of
// usage u and cost (each nil: unknown), a call billed when call, into
// Saved (cost.Saved.Add).
func (r *Record) saveBy(by cost.SavedBy, u *cost.Usage, spent *float64, call bool) {
	if by.Total() == 0 {
		return
	}
	var s cost.Saved
	if r.Saved != nil {
		s = *r.Saved
	}
	s = s.Add(by, u, spent, call)
	r.Saved = &s
}
