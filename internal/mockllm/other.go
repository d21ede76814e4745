package mockllm

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"strings"
)

// Paths of the endpoints the fake serves besides the generations, for
// proxies that pass them through.
const (
	ModelsPath     = "/v1/models"
	EmbeddingsPath = "/v1/embeddings"
)

// serveModels lists the one model the fake is.
func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	s.ledger.request("")
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []map[string]any{
		{"id": DefaultModel, "object": "model", "created": 1700000000, "owned_by": "mockllm"},
	}})
}

// serveEmbeddings answers a deterministic 8-dimension vector per input,
// booked in the ledger as a generation of the input (it is billed).
func (s *Server) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r)
	if err != nil {
		s.rejectBadRequest(w, r, "could not read body: "+err.Error())
		return
	}
	var req struct {
		Model string `json:"model"`
		Input string `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Input == "" {
		s.rejectBadRequest(w, r, "input must be a non-empty string")
		return
	}
	d := ParseDirectives(req.Input)
	rec := s.admit(w, r, req.Input, d)
	if rec == nil {
		return
	}
	vec := make([]float64, 8)
	for i := range vec {
		h := fnv.New32a()
		h.Write([]byte{byte(i)})
		h.Write([]byte(req.Input))
		vec[i] = float64(h.Sum32()%2000)/1000 - 1
	}
	n := countWords(req.Input)
	rec.progress(0, n, []byte(strings.Repeat(".", n)))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "list", "model": req.Model,
		"data":  []map[string]any{{"object": "embedding", "index": 0, "embedding": vec}},
		"usage": map[string]int{"prompt_tokens": n, "total_tokens": n},
	})
	rec.complete()
}
