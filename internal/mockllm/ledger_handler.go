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

// PromptReport is the JSON document served by LedgerHandler for ?prompt=P:
// the prompt's entry and its generations (with their content) in start order.
type PromptReport struct {
	Prompt      string       `json:"prompt"`
	Entry       Entry        `json:"entry"`
	Generations []Generation `json:"generations"`
}

// LedgerHandler serves GET requests with the ledger's Total and per-prompt
// entries as JSON (LedgerReport), or with ?prompt=P one prompt's entry and
// generations (PromptReport), for checks from outside the process. It is not
// mounted by ServeHTTP; cmd/mockllm mounts it at /ledger.
func (s *Server) LedgerHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed")
			return
		}
		var report any
		if q := r.URL.Query(); q.Has("prompt") {
			prompt := q.Get("prompt")
			gens := s.ledger.Generations(prompt)
			if gens == nil {
				gens = []Generation{}
			}
			report = PromptReport{Prompt: prompt, Entry: s.ledger.Get(prompt), Generations: gens}
		} else {
			report = s.ledger.Report()
		}
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
