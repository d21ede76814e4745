package engine

import (
	"context"
	"encoding/json"
	"time"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/resume"
)

// AttemptLog keeps the attempt log of each stream id. The engine's Journal
// implements it optionally (journal.Journal does); without it attempts are
// only logged.
type AttemptLog interface {
	// LogAttempt adds an Attempt record, as JSON, to id's log.
	LogAttempt(id string, record []byte) error
	// Attempts returns id's records, oldest first.
	Attempts(ctx context.Context, id string) ([][]byte, error)
}

// Attempt is one upstream request made for a generation: a record of the
// attempt log (GET /v1/streams/{key}/attempts) and an info line of the log.
type Attempt struct {
	Key string `json:"key"`
	// Tenant is a hash of the tenant id (itself derived from the
	// credential): it tells tenants apart and reveals neither.
	Tenant string `json:"tenant"`
	// KeyName names the proxy key that asked for the generation (never
	// the key itself); absent outside static auth.
	KeyName    string `json:"key_name,omitempty"`
	Generation uint64 `json:"generation"`
	// Attempt is its number within the generation, from 1, across the
	// upstreams tried in turn.
	Attempt  int    `json:"attempt"`
	Upstream string `json:"upstream"`
	Path     string `json:"path"`
	Model    string `json:"model,omitempty"`
	// Status is the upstream's HTTP status; 0 when it did not answer.
	Status int `json:"status"`
	// Kind is ok, retryable, fatal, ambiguous, unavailable or cancelled
	// (classify.Attempt.KindName); Code names a failure the proxy made.
	Kind string `json:"kind"`
	Code string `json:"code,omitempty"`
	// DurationMS runs to the answer's head or the failure; FirstByteMS to
	// the first response byte (0: none came).
	DurationMS  float64   `json:"duration_ms"`
	FirstByteMS float64   `json:"ttfb_ms"`
	At          time.Time `json:"at"`
	// PromptTokens, CompletionTokens and Cost are what the generation's
	// answer used and cost, as its result (the key's status) has them, on
	// the attempt whose answer it was: the generation's last. They are
	// absent on every other record, and on that one while the answer runs
	// or when the upstream reported no usage (Cost: no price known). The
	// log then holds that attempt twice, at its answer's head and at the
	// generation's end; MergeAttempts keeps the later.
	PromptTokens     *int64   `json:"prompt_tokens,omitempty"`
	CompletionTokens *int64   `json:"completion_tokens,omitempty"`
	Cost             *float64 `json:"cost,omitempty"`
}

// warnAttempts is the number of upstream attempts for one key past which a
// WARN line is logged (seed 000 §6.2: more than two).
const warnAttempts = 2

// observe returns the observer of the upstream attempts p makes toward up:
// each is logged at info, added to the attempt log, and the key's attempt
// past warnAttempts — its earlier generations' counted — is logged at WARN.
func (p *pump) observe(ctx context.Context, up Upstream) func(classify.Attempt) {
	l, logged := p.e.cfg.Journal.(AttemptLog)
	return func(a classify.Attempt) {
		if p.attempts == 0 && (p.g.Ref.Gen > 1 || p.adopted) && logged {
			// An adopted generation's attempts go on from its dead owner's.
			var this int
			p.before, this = p.earlierAttempts(ctx, l)
			if p.adopted {
				p.attempts = this
			}
		}
		p.trace.Attempt(a)
		p.attempts++
		rec := Attempt{
			Key: p.g.Key, Tenant: p.tenant, KeyName: p.keyName(), Generation: p.g.Ref.Gen, Attempt: p.attempts,
			Upstream: up.Name, Path: p.g.Path, Model: p.g.Model, Status: a.Status, Kind: a.KindName(), Code: a.Code,
			DurationMS: ms(a.Duration), FirstByteMS: ms(a.FirstByte), At: time.Now().UTC(),
		}
		p.log.Info("upstream attempt", "key", rec.Key, "tenant", rec.Tenant, "key_name", rec.KeyName, "gen", rec.Generation, "attempt", rec.Attempt,
			"upstream", rec.Upstream, "path", rec.Path, "model", rec.Model, "status", rec.Status, "kind", rec.Kind,
			"code", rec.Code, "duration_ms", rec.DurationMS, "ttfb_ms", rec.FirstByteMS)
		if p.before+p.attempts == warnAttempts+1 {
			p.log.Warn("key sees more than two upstream attempts", "key", rec.Key, "tenant", rec.Tenant, "key_name", rec.KeyName, "gen", rec.Generation,
				"attempts", p.before+p.attempts, "upstream", rec.Upstream, "status", rec.Status, "kind", rec.Kind)
		}
		p.last = &rec
		if logged {
			p.logAttempt(l, rec)
		}
	}
}

// logAttempt adds rec to the key's attempt log.
func (p *pump) logAttempt(l AttemptLog, rec Attempt) {
	b, err := json.Marshal(rec)
	if err == nil {
		err = l.LogAttempt(p.g.Ref.ID, b)
	}
	if err != nil {
		p.log.Warn("attempt log: record lost", "err", err)
	}
}

// attemptUsage logs the generation's last attempt again with the usage and
// cost of its result, when either is known.
func (p *pump) attemptUsage(res resume.Result) {
	l, logged := p.e.cfg.Journal.(AttemptLog)
	if !logged || p.last == nil || res.Usage == nil && res.Cost == nil {
		return
	}
	p.logAttempt(l, withUsage(*p.last, res))
}

// withUsage is rec with the usage and cost of res.
func withUsage(rec Attempt, res resume.Result) Attempt {
	if u := res.Usage; u != nil {
		rec.PromptTokens, rec.CompletionTokens = &u.PromptTokens, &u.CompletionTokens
	}
	rec.Cost = res.Cost
	return rec
}

// attemptUsageOf does for generation gen of id what attemptUsage does, on
// an instance that did not run it (its result was salvaged): it logs the
// generation's last attempt, as the attempt log has it, again with res's
// usage and cost.
func (e *Engine) attemptUsageOf(ctx context.Context, id string, gen uint64, res resume.Result) {
	l, logged := e.cfg.Journal.(AttemptLog)
	if !logged || res.Usage == nil && res.Cost == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second) // the request that salvaged it may be gone
	defer cancel()
	records, err := l.Attempts(ctx, id)
	if err != nil {
		e.cfg.Logger.Warn("attempt log: a salvaged generation's usage not logged", "key_id", id, "err", err)
		return
	}
	var last *Attempt
	for _, b := range MergeAttempts(records) {
		var a Attempt
		if json.Unmarshal(b, &a) == nil && a.Generation == gen {
			last = &a
		}
	}
	if last == nil {
		return
	}
	b, err := json.Marshal(withUsage(*last, res))
	if err == nil {
		err = l.LogAttempt(id, b)
	}
	if err != nil {
		e.cfg.Logger.Warn("attempt log: record lost", "key_id", id, "err", err)
	}
}

// MergeAttempts returns an attempt log's records (JSON, oldest first) with
// each attempt once: a later record of the same generation and attempt
// (the last one's, with its usage) replaces the earlier in its place.
// Records that are not JSON objects are dropped.
func MergeAttempts(records [][]byte) []json.RawMessage {
	type id struct {
		Generation uint64 `json:"generation"`
		Attempt    int    `json:"attempt"`
	}
	out := make([]json.RawMessage, 0, len(records))
	at := map[id]int{}
	for _, b := range records {
		var k id
		if json.Unmarshal(b, &k) != nil {
			continue
		}
		if i, ok := at[k]; ok {
			out[i] = b
			continue
		}
		at[k] = len(out)
		out = append(out, b)
	}
	return out
}

// earlierAttempts is how many upstream attempts the key's earlier
// generations made, and this one so far (an adopted generation's dead
// owner's), by its attempt log; 0 if the log does not answer within a
// second (the WARN line may then come late or not at all).
func (p *pump) earlierAttempts(ctx context.Context, l AttemptLog) (earlier, this int) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	records, err := l.Attempts(ctx, p.g.Ref.ID)
	if err != nil {
		p.log.Debug("attempt log: earlier attempts unknown", "err", err)
		return 0, 0
	}
	for _, b := range MergeAttempts(records) {
		var a struct {
			Generation uint64 `json:"generation"`
		}
		switch {
		case json.Unmarshal(b, &a) != nil:
		case a.Generation < p.g.Ref.Gen:
			earlier++
		case a.Generation == p.g.Ref.Gen:
			this++
		}
	}
	return earlier, this
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// keyName names the generation's proxy key: as it was started here, or by
// its tenant for one taken over.
func (p *pump) keyName() string {
	if p.g.KeyName == "" && p.e.cfg.KeyName != nil {
		return p.e.cfg.KeyName(p.tenant)
	}
	return p.g.KeyName
}
