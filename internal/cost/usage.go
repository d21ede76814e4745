package cost

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

// SavedOne is a SavedBy of one request of kind how; ok false for a kind that is
// none of SavedKinds.
func SavedOne(how string) (b SavedBy, ok bool) {
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

// Add adds o's counts to b's.
func (b *SavedBy) Add(o SavedBy) {
	b.Attach += o.Attach
	b.Replay += o.Replay
	b.Resume += o.Resume
	b.Retry += o.Retry
}

// Basis says where a generation's usage figures come from.
type Basis string

// Bases of a usage.
const (
	// Reported: the upstream reported the usage.
	Reported Basis = "reported"
	// Estimated: the generation failed or was cancelled before the
	// upstream reported (all of) it, and reprise estimated the rest from
	// the request and the content the upstream streamed.
	Estimated Basis = "estimated"
	// Unknown: no usage is known: the upstream answered no stream (it
	// refused the request; no usage is billed for it) or one reprise
	// cannot count (audio).
	Unknown Basis = "unknown"
)

// Add returns b with one generation's usage u (of basis), cost and call (a
// call billed) added; u and cost nil: unknown. A generation counts when
// its usage or cost is known; the basis is Estimated once any usage was.
func (b Billed) Add(u *Usage, basis Basis, cost *float64, call bool) Billed {
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
	return b
}

// Add returns s with the requests by served from one completed generation
// of usage u and cost (each nil: unknown), a call billed when call: each
// request saved that generation's usage and cost.
func (s Saved) Add(by SavedBy, u *Usage, cost *float64, call bool) Saved {
	n := by.Total()
	s.Duplicates += n
	s.By.Add(by)
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
	return s
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
