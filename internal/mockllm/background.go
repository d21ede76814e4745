package mockllm

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// maxBackground bounds the background responses a Server keeps for
// retrieval: past it the oldest finished one is forgotten.
const maxBackground = 4096

// background is one background response (OpenAI's "background": true): a
// generation that runs on the server whatever becomes of the connection
// that asked for it. Its events are kept, so that it can be retrieved and
// its stream resumed (GET /v1/responses/{id}?stream=true&starting_after=N).
// It is the http.ResponseWriter its generation writes to: each Write is one
// SSE event, and the i-th carries sequence_number i.
type background struct {
	header http.Header
	cancel context.CancelFunc // stops the generation (POST /v1/responses/{id}/cancel)

	mu      sync.Mutex
	frames  [][]byte
	done    bool
	changed chan struct{} // closed and replaced on every write and at the end
}

func newBackground() *background {
	return &background{header: http.Header{}, changed: make(chan struct{})}
}

// Header implements http.ResponseWriter.
func (b *background) Header() http.Header { return b.header }

// WriteHeader implements http.ResponseWriter; the status is always 200.
func (b *background) WriteHeader(int) {}

// Write implements http.ResponseWriter: one event.
func (b *background) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames = append(b.frames, bytes.Clone(p))
	b.signalLocked()
	return len(p), nil
}

// Flush implements http.Flusher: writes are kept at once.
func (b *background) Flush() {}

// ended is closed once the generation has ended.
func (b *background) ended() <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			_, done, changed := b.since(0)
			if done {
				return
			}
			<-changed
		}
	}()
	return ch
}

func (b *background) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	b.signalLocked()
}

func (b *background) signalLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// since returns the events from index from on, whether the generation has
// ended, and a channel closed on the next change.
func (b *background) since(from int) (frames [][]byte, done bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if from < len(b.frames) {
		frames = b.frames[from:len(b.frames):len(b.frames)]
	}
	return frames, b.done, b.changed
}

// object is the latest response object the events carried.
func (b *background) object() []byte {
	frames, _, _ := b.since(0)
	for i := len(frames) - 1; i >= 0; i-- {
		_, data, ok := bytes.Cut(frames[i], []byte("data: "))
		if !ok {
			continue
		}
		var v struct {
			Response json.RawMessage `json:"response"`
		}
		if json.Unmarshal(bytes.TrimSpace(data), &v) == nil && len(v.Response) > 0 {
			return v.Response
		}
	}
	return nil
}

// backgrounds are a Server's background responses by id.
type backgrounds struct {
	mu    sync.Mutex
	byID  map[string]*background
	order []string
}

func (bs *backgrounds) add(id string, b *background) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if bs.byID == nil {
		bs.byID = map[string]*background{}
	}
	for len(bs.order) >= maxBackground {
		old := bs.order[0]
		bs.order = bs.order[1:]
		delete(bs.byID, old)
	}
	bs.byID[id] = b
	bs.order = append(bs.order, id)
}

func (bs *backgrounds) get(id string) *background {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	return bs.byID[id]
}

// wantsBackground reads a Responses request's "background": true.
func wantsBackground(body []byte) bool {
	var req struct {
		Background bool `json:"background"`
	}
	return json.Unmarshal(body, &req) == nil && req.Background
}

// runBackground starts job as a background response and streams it to w:
// the generation runs on its own, so the connection may drop (abort_after
// and hang_after cut it, not the generation) and the stream be resumed by
// id. The ledger books it once, however often it is resumed.
func (s *Server) runBackground(w http.ResponseWriter, r *http.Request, f textFormat, job chatJob, rec *recorder, d Directives) {
	b := newBackground()
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	b.cancel = cancel
	s.bg.add(job.id, b)
	gen := d
	gen.AbortAfter, gen.HangAfter = -1, -1
	e := &emitter{ctx: ctx, w: b, rc: http.NewResponseController(b), rec: rec, d: gen, fault: []byte(f.fault)}
	go func() {
		defer cancel()
		defer b.end()
		s.finish(r, rec, f.stream(s, e, job))
	}()
	s.deliver(w, r, b, 0, d)
}

// deliver writes b's events from index from on to w, live, until its end
// or the client's. abort_after and hang_after cut the connection after
// that many events (the generation goes on).
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, b *background, from int, d Directives) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	written := 0
	for {
		frames, done, changed := b.since(from)
		for _, fr := range frames {
			if written == d.AbortAfter {
				panic(http.ErrAbortHandler)
			}
			if written == d.HangAfter {
				<-r.Context().Done()
				panic(http.ErrAbortHandler)
			}
			if _, err := w.Write(fr); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			written++
			from++
		}
		if done && len(frames) == 0 {
			return
		}
		if len(frames) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}

// serveRetrieve serves GET /v1/responses/{id}: the response object as it
// stands, or with stream=true its events after starting_after (all of
// them without it), then live until the response ends; and POST
// /v1/responses/{id}/cancel, which stops the generation. Only background
// responses are kept; anything else is a 404, as from a provider without
// background mode.
func (s *Server) serveRetrieve(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimPrefix(r.URL.Path, ResponsesPath+"/")
	id, cancel := strings.CutSuffix(id, "/cancel")
	b := s.bg.get(id)
	if b == nil || !s.cfg.Background || cancel != (r.Method == http.MethodPost) {
		writeError(w, http.StatusNotFound, "No response found with id '"+id+"'.")
		return
	}
	if cancel {
		// The generation stops (the ledger books it aborted, unless it
		// had completed); its events so far stay retrievable.
		b.cancel()
		<-b.ended()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b.object())
		return
	}
	q := r.URL.Query()
	if q.Get("stream") != "true" {
		obj := b.object()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(obj)
		return
	}
	from := 0
	if v := q.Get("starting_after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			writeError(w, http.StatusBadRequest, "starting_after must be a sequence number")
			return
		}
		from = n + 1
	}
	s.deliver(w, r, b, from, Directives{AbortAfter: -1, HangAfter: -1})
}
