package mockllm

import (
	"encoding/json"
	"net/http"
)

// LedgerReport is the JSON document served by LedgerHandler.
type LedgerReport struct {
	Total   Entry            `json:"total"`
	Prompts map[string]Entry `json:"prompts"`
}

// LedgerHandler serves GET requests with the ledger's Total and per-prompt
// entries as JSON, for checks from outside the process. It is not mounted by
// ServeHTTP; cmd/mockllm mounts it at /ledger.
func (s *Server) LedgerHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
			return
		}
		report := s.ledger.Report()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report)
	})
}

// Report returns a consistent snapshot of Total and the per-prompt entries.
func (l *Ledger) Report() LedgerReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := LedgerReport{Total: l.total, Prompts: make(map[string]Entry, len(l.prompts))}
	for k, p := range l.prompts {
		r.Prompts[k] = p.entry
	}
	return r
}
