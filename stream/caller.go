package stream

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/resume"
)

// caller is who sent r (auth.Caller), its proxy key's name noted for the
// access log.
func (s *Server) caller(r *http.Request) (auth.Caller, error) {
	who, err := s.auth.Caller(r)
	if err == nil && who.Name != "" {
		noteCaller(r, who.Name)
	}
	return who, err
}

// overBudget reports whether who's key spent its budget in the current
// window, fleet-wide, and when that window ends.
func (s *Server) overBudget(who auth.Caller) (until time.Time, over bool) {
	if s.budgets == nil || who.Budget.IsZero() {
		return time.Time{}, false
	}
	return s.budgets.Over(resume.TenantHash(who.Tenant), who.Budget)
}

// usage is GET /usage: the caller's proxy key, its budget and what it
// spent, fleet-wide, in the current hour, day and month.
type usage struct {
	KeyName string             `json:"key_name,omitempty"`
	Budget  *budgetUsage       `json:"budget,omitempty"`
	Spent   map[string]float64 `json:"spent"`
}

type budgetUsage struct {
	Limit       float64     `json:"limit"`
	Period      cost.Period `json:"period"`
	Spent       float64     `json:"spent"`
	WindowStart time.Time   `json:"window_start"`
	WindowEnd   time.Time   `json:"window_end"`
	Exceeded    bool        `json:"exceeded"`
}

// handleUsage serves GET /usage: what the caller's proxy key spent (the
// whole fleet's generations, as this instance last learnt them) and its
// budget. Without a price table nothing is counted: 404.
func (s *Server) handleUsage(w http.ResponseWriter, r *http.Request) {
	who, err := s.caller(r)
	if err != nil {
		fail(w, r, authError(err))
		return
	}
	if s.budgets == nil {
		fail(w, r, apierr.New(apierr.NotFound).WithMessage("no spend is counted: reprise runs without a price table (--prices)"))
		return
	}
	hash := resume.TenantHash(who.Tenant)
	u := usage{KeyName: who.Name, Spent: map[string]float64{}}
	for _, p := range []cost.Period{cost.Hour, cost.Day, cost.Month} {
		u.Spent[string(p)] = s.budgets.Spent(hash, p)
	}
	if b := who.Budget; !b.IsZero() {
		start, end := b.Period.Window(time.Now())
		spent := u.Spent[string(b.Period)]
		u.Budget = &budgetUsage{Limit: b.Limit, Period: b.Period, Spent: spent, WindowStart: start, WindowEnd: end, Exceeded: spent >= b.Limit}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(u)
}
