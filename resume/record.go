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
	// Usage is what the last generation cost in tokens, when known: as the
	// upstream reported it, or as reprise estimated it for a generation
	// that failed or was cancelled (UsageBasis). A generation in progress
	// has none (an owner of an earlier version kept it here just before
	// its terminal event was stored; an owner now stores it with that
	// event, for a Salvager).
	Usage *Usage `json:"usage,omitempty"`
	// UsageBasis says where Usage comes from, for the generation
	// BasisGeneration names (Finish writes both; see Basis).
	UsageBasis      Basis  `json:"usage_basis,omitempty"`
	BasisGeneration uint64 `json:"usage_basis_generation,omitempty"`
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
	Billed *Billed `json:"billed,omitempty"`
	// Saved is what the requests served without a generation (attaches,
	// replays, resumes, recognised retries) did not cost.
	Saved *Saved `json:"saved,omitempty"`
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
	// Calls counts the generations billed a call (Result.Call): those the
	// upstream answered, when the price table prices their model per call.
	Calls uint64 `json:"calls,omitempty"`
	// Basis is Estimated once the usage of any of them was estimated,
	// else Reported; "" while no usage was known.
	Basis Basis `json:"usage_basis,omitempty"`
}

// Saved is what the requests reprise served without a generation were
// spared.
type Saved struct {
	// Duplicates counts them all, every kind (its name is older than the
	// kinds).
	Duplicates uint64 `json:"duplicates"`
	// By counts them by kind.
	By SavedBy `json:"by"`
	// Usage is the tokens they would have cost: the usage of the
	// generation each was served, summed; nil while none was known.
	Usage *Usage `json:"usage,omitempty"`
	// Cost is what they would have cost; nil while no cost was known.
	Cost *float64 `json:"cost,omitempty"`
	// Calls counts those served a generation that was a call billed
	// (Billed.Calls): the calls they would have been billed.
	Calls uint64 `json:"calls,omitempty"`
}

// Kinds of saving: how a request was served without a generation.
const (
	// SavedAttach: a duplicate (same key, same body) followed the running
	// generation.
	SavedAttach = "attach"
	// SavedReplay: a duplicate replayed the completed generation.
	SavedReplay = "replay"
	// SavedResume: a client that dropped continued a generation from its
	// cursor (a GET of the Location or a POST with Last-Event-ID).
	SavedResume = "resume"
	// SavedRetry: a request without a key recognised as the retry of one
	// whose client left, served its generation.
	SavedRetry = "retry"
)

// SavedKinds lists every kind of saving.
func SavedKinds() []string { return []string{SavedAttach, SavedReplay, SavedResume, SavedRetry} }

// SavedBy counts requests served without a generation, by kind.
type SavedBy struct {
	Attach uint64 `json:"attach"`
	Replay uint64 `json:"replay"`
	Resume uint64 `json:"resume"`
	Retry  uint64 `json:"retry"`
}

// Total is the count over every kind.
func (b SavedBy) Total() uint64 { return b.Attach + b.Replay + b.Resume + b.Retry }

// Count returns the count of kind how (one of SavedKinds; 0 for another).
func (b SavedBy) Count(how string) uint64 {
	if c := b.counter(how); c != nil {
		return *c
	}
	return 0
}

// One is a SavedBy of one request of kind how; ok false for a kind that is
// none of SavedKinds.
func One(how string) (b SavedBy, ok bool) {
	c := b.counter(how)
	if c == nil {
		return b, false
	}
	*c = 1
	return b, true
}

func (b *SavedBy) counter(how string) *uint64 {
	switch how {
	case SavedAttach:
		return &b.Attach
	case SavedReplay:
		return &b.Replay
	case SavedResume:
		return &b.Resume
	case SavedRetry:
		return &b.Retry
	}
	return nil
}

func (b *SavedBy) add(o SavedBy) {
	b.Attach += o.Attach
	b.Replay += o.Replay
	b.Resume += o.Resume
	b.Retry += o.Retry
}

// Pending is the split by kind of the requests served from a running
// generation (Record.Attached), for the generation it names: a record's
// Pending of another generation counts nothing (a new generation resets
// Attached, not this).
type Pending struct {
	Generation uint64 `json:"generation"`
	SavedBy
}

// Basis says where a generation's usage figures come from.
type Basis string

// Bases of a usage.
const (
	// Reported: the upstream reported the usage.
	Reported Basis = "reported"
	// Estimated: the generation failed or was cancelled before the
	// upstream reported (all of) it, and reprise estimated the rest from
	// the request and the content the upstream streamed (engine).
	Estimated Basis = "estimated"
	// Unknown: no usage is known: the upstream answered no stream (it
	// refused the request; no usage is billed for it) or one reprise
	// cannot count (audio).
	Unknown Basis = "unknown"
)

// Basis is where the record's Usage comes from: "" while its generation
// runs (without a usage kept by an older owner); Reported for a usage an
// upstream reported (or written by a version that estimated none);
// Unknown for a finished generation with none.
func (r *Record) Basis() Basis {
	switch {
	case r.State != InProgress && r.UsageBasis != "" && r.BasisGeneration == r.Generation:
		return r.UsageBasis
	case r.Usage != nil:
		return Reported
	case r.State == InProgress:
		return ""
	}
	return Unknown
}

// attach counts the requests by served from the running generation, to be
// saved when it completes.
func (r *Record) attach(by SavedBy) {
	if r.AttachedBy == nil || r.AttachedBy.Generation != r.Generation || r.Attached == 0 {
		r.AttachedBy = &Pending{Generation: r.Generation}
	}
	p := *r.AttachedBy
	p.add(by)
	r.AttachedBy = &p
	r.Attached += by.Total()
}

// PendingBy is the split by kind of n requests served from the record's
// generation while it ran (Attached, or as many as were settled from it):
// AttachedBy's, and attaches for any it does not cover.
func (r *Record) PendingBy(n uint64) SavedBy {
	var by SavedBy
	if p := r.AttachedBy; p != nil && p.Generation == r.Generation && p.Total() <= n {
		by = p.SavedBy
	}
	by.Attach += n - by.Total()
	return by
}

// bill adds one generation's usage, cost and call to the key's bill.
func (r *Record) bill(u *Usage, cost *float64, call bool) { r.billAs(u, Reported, cost, call) }

// billAs adds one generation's usage, of basis, cost and call (a call
// billed) to the key's bill.
func (r *Record) billAs(u *Usage, basis Basis, cost *float64, call bool) {
	if u == nil && cost == nil && !call {
		return
	}
	b := Billed{}
	if r.Billed != nil {
		b = *r.Billed
	}
	if u != nil || cost != nil {
		b.Generations++
	}
	if call {
		b.Calls++
	}
	if u != nil {
		if b.Basis != Estimated {
			b.Basis = basis
		}
		f := u.Filled()
		b.PromptTokens += f.PromptTokens
		b.CompletionTokens += f.CompletionTokens
		b.TotalTokens += f.TotalTokens
	}
	b.Cost = addCost(b.Cost, cost, 1)
	r.Billed = &b
}

// save moves the n requests served from the generation that just
// completed (Attached) into Saved, at its usage (the record's), cost and
// call.
func (r *Record) save(n uint64, cost *float64, call bool) {
	r.saveBy(r.PendingBy(n), r.Usage, cost, call)
}

// saveBy counts the requests by served from a completed generation of
// usage u and cost (each nil: unknown), a call billed when call, into
// Saved.
func (r *Record) saveBy(by SavedBy, u *Usage, cost *float64, call bool) {
	n := by.Total()
	if n == 0 {
		return
	}
	s := Saved{}
	if r.Saved != nil {
		s = *r.Saved
	}
	s.Duplicates += n
	s.By.add(by)
	if u != nil {
		f, sum := u.Filled(), Usage{}
		if s.Usage != nil {
			sum = *s.Usage
		}
		sum.PromptTokens += f.PromptTokens * int64(n)
		sum.CompletionTokens += f.CompletionTokens * int64(n)
		sum.TotalTokens += f.TotalTokens * int64(n)
		s.Usage = &sum
	}
	s.Cost = addCost(s.Cost, cost, n)
	if call {
		s.Calls += n
	}
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
