package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/gorilla/websocket"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/resume"
)

// fakeReprise is a minimal reprise for streamed chats, correct unless given
// a defect: each key's generation writes the fake model's events (role, a
// chunk "a" per [tokens=N], stop, [DONE]) under ids gen-offset-offset,
// resumes after Last-Event-ID (a cursor in an older generation gets a reset),
// replays a completed key, regenerates a failed one on POST, answers the
// JSON status, speaks WebSocket, and serves a ledger that agrees.
type fakeReprise struct {
	skip          int    // this event offset is never sent
	ignoreCursor  bool   // resumes restart from the first event
	generations   int    // the ledger's count, when more than the real one
	ledgerContent string // the ledger's content, when set
	errorEvent    bool   // every generation ends with event: error upstream_interrupted
	breakFirst    bool   // each key's first generation ends with owner_lost after 2 events

	mu   sync.Mutex
	keys map[string]*fakeKey
}

type fakeKey struct {
	prompt string
	gens   [][]fakeEvent // each generation's events, offsets from 1
	failed bool          // the last generation ended without [DONE]
}

type fakeEvent struct{ typ, data string }

var tokensRe = regexp.MustCompile(`\[tokens=(\d+)\]`)

func (f *fakeReprise) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/ledger":
		f.ledger(w, r.URL.Query().Get("prompt"))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/chat/completions":
		f.post(w, r)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/streams/"):
		f.get(w, r, strings.TrimPrefix(r.URL.Path, "/v1/streams/"))
	default:
		http.NotFound(w, r)
	}
}

func (f *fakeReprise) post(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) == 0 {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	if f.keys == nil {
		f.keys = map[string]*fakeKey{}
	}
	k := f.keys[key]
	if k == nil {
		k = &fakeKey{prompt: body.Messages[0].Content}
		f.keys[key] = k
	}
	replayed := len(k.gens) > 0 && !k.failed
	if len(k.gens) == 0 || k.failed {
		f.generate(k)
	}
	f.mu.Unlock()
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	f.stream(w, r, k)
}

// generate runs a new generation of k. f.mu is held.
func (f *fakeReprise) generate(k *fakeKey) {
	n, _ := strconv.Atoi(tokensRe.FindStringSubmatch(k.prompt + "[tokens=1]")[1])
	evs := []fakeEvent{{data: `{"choices":[{"delta":{"role":"assistant"}}]}`}}
	for range n {
		evs = append(evs, fakeEvent{data: `{"choices":[{"delta":{"content":"a"}}]}`})
	}
	evs = append(evs, fakeEvent{data: `{"choices":[{"delta":{},"finish_reason":"stop"}]}`},
		fakeEvent{data: "[DONE]"})
	k.failed = false
	switch {
	case f.breakFirst && len(k.gens) == 0:
		evs, k.failed = append(evs[:2:2], fakeEvent{typ: "error", data: `{"error":{"code":"owner_lost"}}`}), true
	case f.errorEvent:
		evs, k.failed = append(evs[:len(evs)-1:len(evs)-1], fakeEvent{typ: "error", data: `{"error":{"code":"upstream_interrupted"}}`}), true
	}
	k.gens = append(k.gens, evs)
}

func (f *fakeReprise) get(w http.ResponseWriter, r *http.Request, key string) {
	f.mu.Lock()
	k := f.keys[key]
	f.mu.Unlock()
	if k == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":"key_not_found"}}`)
		return
	}
	if r.Header.Get("Accept") == "application/json" {
		f.mu.Lock()
		gen, evs, failed := len(k.gens), len(k.gens[len(k.gens)-1]), k.failed
		f.mu.Unlock()
		state := map[bool]string{false: "completed", true: "failed"}[failed]
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"key": key, "state": state, "generation": gen, "events": evs})
		return
	}
	f.stream(w, r, k)
}

// stream serves k's last generation after the request's cursor.
func (f *fakeReprise) stream(w http.ResponseWriter, r *http.Request, k *fakeKey) {
	f.mu.Lock()
	gen := uint64(len(k.gens))
	evs := k.gens[gen-1]
	failed := k.failed
	f.mu.Unlock()
	raw := r.Header.Get("Last-Event-ID")
	if raw == "" {
		raw = r.URL.Query().Get("last_event_id")
	}
	cur, _ := resume.ParsePosition(raw)
	if f.ignoreCursor {
		cur = resume.Position{}
	}
	var out [][2]string // id, event type, in order; data from evs
	var data []string
	if cur.Gen != 0 && cur.Gen < gen {
		out = append(out, [2]string{resume.Position{Gen: gen}.String(), "reset"})
		data = append(data, `{"generation":`+strconv.FormatUint(gen, 10)+`}`)
		cur = resume.Position{}
	}
	if cur.Gen == gen && failed && cur.Offset >= uint64(len(evs)) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	for i, ev := range evs {
		off := uint64(i + 1)
		if off <= cur.Offset || int(off) == f.skip {
			continue
		}
		out = append(out, [2]string{resume.Position{Gen: gen, Offset: off, Seq: off}.String(), ev.typ})
		data = append(data, ev.data)
	}
	if websocket.IsWebSocketUpgrade(r) {
		conn, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		for i, o := range out {
			typ := o[1]
			if typ == "" {
				typ = "message"
			}
			if conn.WriteJSON(map[string]string{"id": o[0], "event": typ, "data": data[i]}) != nil {
				return
			}
		}
		_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i, o := range out {
		fmt.Fprintf(w, "id: %s\n", o[0])
		if o[1] != "" {
			fmt.Fprintf(w, "event: %s\n", o[1])
		}
		fmt.Fprintf(w, "data: %s\n\n", data[i])
	}
}

// ledger serves what the fake generated for prompt, or the defect.
func (f *fakeReprise) ledger(w http.ResponseWriter, prompt string) {
	f.mu.Lock()
	var gens []mockllm.Generation
	for _, k := range f.keys {
		if k.prompt != prompt {
			continue
		}
		for _, evs := range k.gens {
			var content strings.Builder
			for _, ev := range evs {
				if strings.Contains(ev.data, `"content":"a"`) {
					content.WriteString("a")
				}
			}
			done := evs[len(evs)-1].data == "[DONE]"
			gens = append(gens, mockllm.Generation{Prompt: prompt, Content: content.String(), Completed: done, Aborted: !done})
		}
	}
	f.mu.Unlock()
	for len(gens) > 0 && len(gens) < f.generations {
		gens = append([]mockllm.Generation{{Prompt: prompt, Aborted: true}}, gens...)
	}
	if f.ledgerContent != "" && len(gens) > 0 {
		gens[len(gens)-1].Content = f.ledgerContent
	}
	if gens == nil {
		gens = []mockllm.Generation{}
	}
	_ = json.NewEncoder(w).Encode(mockllm.PromptReport{Prompt: prompt, Entry: mockllm.Entry{Generations: len(gens)}, Generations: gens})
}
