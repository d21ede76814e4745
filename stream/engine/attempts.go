package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/reprise-dev/reprise/classify"
)

// AttemptLog keeps the attempt log of each stream id. The engine's Journal
// implements it optionally (journal.Journal does); without it attempts are
// only logged.
type AttemptLog interface {
	// LogAttempt adds an Attempt record, as JSON, to id's log.
	LogAttempt(id string, record []byte) error
}

// Attempt is one upstream request made for a generation: a record of the
// attempt log (GET /v1/streams/{key}/attempts) and an info line of the log.
type Attempt struct {
	Key string `json:"key"`
	// Tenant is a hash of the tenant id (itself derived from the
	// credential): it tells tenants apart and reveals neither.
	Tenant     string `json:"tenant"`
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
}

// warnAttempts is the number of upstream attempts for one generation past
// which a WARN line is logged (seed 000 §6.2: more than two).
const warnAttempts = 2

// tenantHash is what logs and the attempt log show of a tenant id.
func tenantHash(tenant string) string {
	h := sha256.Sum256([]byte(tenant))
	return hex.EncodeToString(h[:8])
}

// observe returns the observer of the upstream attempts p makes toward up:
// each is logged at info, added to the attempt log, and the attempt past
// warnAttempts is logged at WARN.
func (p *pump) observe(up Upstream) func(classify.Attempt) {
	return func(a classify.Attempt) {
		p.attempts++
		rec := Attempt{
			Key: p.g.Key, Tenant: tenantHash(p.g.Tenant), Generation: p.g.Ref.Gen, Attempt: p.attempts,
			Upstream: up.Name, Path: p.g.Path, Model: p.g.Model, Status: a.Status, Kind: a.KindName(), Code: a.Code,
			DurationMS: ms(a.Duration), FirstByteMS: ms(a.FirstByte), At: time.Now().UTC(),
		}
		p.log.Info("upstream attempt", "key", rec.Key, "tenant", rec.Tenant, "gen", rec.Generation, "attempt", rec.Attempt,
			"upstream", rec.Upstream, "path", rec.Path, "model", rec.Model, "status", rec.Status, "kind", rec.Kind,
			"code", rec.Code, "duration_ms", rec.DurationMS, "ttfb_ms", rec.FirstByteMS)
		if p.attempts == warnAttempts+1 {
			p.log.Warn("key sees more than two upstream attempts", "key", rec.Key, "tenant", rec.Tenant, "gen", rec.Generation,
				"attempts", p.attempts, "upstream", rec.Upstream, "status", rec.Status, "kind", rec.Kind)
		}
		l, ok := p.e.cfg.Journal.(AttemptLog)
		if !ok {
			return
		}
		b, err := json.Marshal(rec)
		if err == nil {
			err = l.LogAttempt(p.g.Ref.ID, b)
		}
		if err != nil {
			p.log.Warn("attempt log: record lost", "err", err)
		}
	}
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
