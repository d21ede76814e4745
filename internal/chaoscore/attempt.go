package chaoscore

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/resume"
)

// Event is one SSE event (or WebSocket frame) as a client saw it.
type Event struct {
	ID   string
	Type string
	Data string
}

type outcome int

const (
	outDone     outcome = iota // [DONE] seen
	outDropped                 // the connection broke: a drop, ours or the link's
	outEnded                   // the server ended the stream without [DONE] or an error
	outFailed                  // the followed generation is over without a result
	outNotFound                // the key does not exist (yet)
	outRefused                 // refused for now: wait and ask again
)

func (o outcome) String() string {
	return [...]string{"done", "dropped", "ended early", "generation failed", "key not found", "refused"}[o]
}

// result is one attempt's outcome.
type result struct {
	out        outcome
	events     int
	wait       time.Duration // a refusal's
	regenerate bool          // a refusal of the generation itself: the next attempt POSTs
}

// attempt is one connection: a request in mode through the World's link,
// read until [DONE], the end of the answer, or the drop d. Its error is a
// protocol violation or a harness failure, which ends the run.
func (r *Run) attempt(ctx context.Context, mode Mode, d *Drop) (result, error) {
	cfg := &r.rn.cfg
	link, err := cfg.World.Link(ctx, r, d)
	if err != nil {
		return result{}, err
	}
	if link.Close != nil {
		defer link.Close()
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	alive := func() {}
	if cfg.Idle > 0 {
		watchdog := time.AfterFunc(cfg.Idle, cancel)
		defer watchdog.Stop()
		alive = func() { watchdog.Reset(cfg.Idle) }
	}
	if d != nil && d.Kind == InFlight {
		giveUp := time.AfterFunc(d.Wait, cancel)
		defer giveUp.Stop()
	}

	evs, closeAnswer, res, err := r.open(actx, mode, link.Base, alive)
	if evs == nil {
		return res, err
	}
	defer closeAnswer()
	if d != nil && d.Kind == AfterHead {
		return result{out: outDropped}, nil
	}

	var midErr error
	var midWG sync.WaitGroup
	defer midWG.Wait()
	c := conn{mode: mode}
	if sent := r.cursorIn(mode); sent.Gen != 0 {
		c.gen, c.next = sent.Gen, sent.Offset+1
	}
	n, clean := 0, true
	for ev, err := range evs {
		if err != nil {
			clean = false
			break
		}
		n++
		if err := r.take(&c, ev); err != nil {
			return result{events: n}, err
		}
		if r.done > 0 {
			return result{out: outDone, events: n}, nil
		}
		if d != nil && n == d.Events {
			if d.Kind == AfterEvents {
				return result{out: outDropped, events: n}, nil
			}
			if link.Mid != nil {
				midWG.Go(func() { midErr = link.Mid() })
			}
		}
	}
	midWG.Wait()
	switch {
	case midErr != nil:
		return result{events: n}, midErr
	case c.cut != "":
		// The instance cut the connection, the generation goes on: resume
		// once the refusal's wait is over.
		r.count("throttled:cut:" + c.cut)
		return result{out: outRefused, events: n, wait: cfg.RefusalWait}, nil
	case c.refusal != "" && n == 1:
		// The generation was refused for capacity while nobody listened:
		// it never reached the upstream, and asking again later is the answer.
		r.count("throttled:event:" + c.refusal)
		return result{out: outRefused, events: n, wait: cfg.RefusalWait, regenerate: true}, nil
	case c.refusal != "":
		r.problem("%s: event: error %s after %d events, not a refusal that started nothing", mode, c.refusal, n-1)
		return result{out: outFailed, events: n}, nil
	case c.failed:
		return result{out: outFailed, events: n}, nil
	case clean && (d == nil || d.clientSide()):
		// The server ended the stream on its own (no link fault was planned).
		return result{out: outEnded, events: n}, nil
	}
	return result{out: outDropped, events: n}, nil
}

// open sends an attempt's request to base. It returns the answer's events
// and what closes it, or (without events) the result of an answer that is
// no event stream.
func (r *Run) open(ctx context.Context, mode Mode, base string, alive func()) (iter.Seq2[Event, error], func(), result, error) {
	if mode == WebSocket {
		ws, resp, err := r.dialWS(ctx, base)
		switch {
		case err != nil && (resp == nil || resp.StatusCode == http.StatusSwitchingProtocols):
			return nil, nil, result{out: outDropped}, nil
		case err != nil: // the status says it
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			res, err := r.answer(mode, resp.StatusCode, resp.Header, body)
			return nil, nil, res, err
		}
		alive()
		stop := context.AfterFunc(ctx, func() { ws.Close() })
		return wsEvents(ws, alive), func() { stop(); ws.Close() }, result{}, nil
	}
	req, err := r.request(ctx, mode, base)
	if err != nil {
		return nil, nil, result{}, err
	}
	resp, err := r.rn.cfg.Client.Do(req) //nolint:bodyclose // closed by the closer returned, or below
	if err != nil {
		return nil, nil, result{out: outDropped}, nil
	}
	alive()
	body := &idleReader{r: resp.Body, alive: alive}
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(body, 1<<20))
		if err != nil {
			return nil, nil, result{out: outDropped}, nil
		}
		res, err := r.answer(mode, resp.StatusCode, resp.Header, b)
		return nil, nil, res, err
	}
	return sseEvents(body), func() { resp.Body.Close() }, result{}, nil
}

// answer classifies an answer that is not an event stream.
func (r *Run) answer(mode Mode, status int, header http.Header, body []byte) (result, error) {
	rules := &r.rn.cfg.Rules
	code := errorCode(body)
	switch {
	case status == http.StatusNoContent:
		// The cursor is at the end of a generation that will not go on,
		// which ended with the error event the client saw last.
		r.tracef("204 at %s", r.cursor)
		cur := r.cursorIn(mode)
		if last := r.evs[cur.Offset]; cur.Gen == r.gen && last.Type != "error" {
			r.problem("204 to a cursor at %+v: the generation failed, the client never got its error event", last)
		}
		return result{out: outFailed}, nil
	case status == http.StatusNotFound && code == "key_not_found":
		return result{out: outNotFound}, nil
	case rules.refused(status, code):
		r.count(fmt.Sprintf("throttled:%d:%s", status, code))
		return result{out: outRefused, wait: r.refusalWait(header)}, nil
	case mode != Get && mode != WebSocket && status >= 400 && status != http.StatusBadRequest && status != http.StatusUnprocessableEntity:
		// The POST started a generation that ended before its first event
		// (no answer head from the upstream, or a burst that outlasted the
		// call policy): the key failed.
		r.codes = append(r.codes, fmt.Sprintf("%d:%s", status, code))
		r.count(fmt.Sprintf("refused:%d:%s", status, code))
		if !rules.isBreak(code) {
			r.problem("%s refused with %d %s, not a failure the faults cause", mode, status, code)
		}
		return result{out: outFailed}, nil
	}
	return result{}, fmt.Errorf("%s: unexpected answer %d %s: %.300s", mode, status, header.Get("Content-Type"), body)
}

// refusalWait is how long a refusal asks to be waited out: its
// Retry-After (seconds), else Config.RefusalWait.
func (r *Run) refusalWait(header http.Header) time.Duration {
	if secs, err := strconv.Atoi(header.Get("Retry-After")); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	return r.rn.cfg.RefusalWait
}

// cursorIn is the position a request in mode sends.
func (r *Run) cursorIn(mode Mode) resume.Position {
	if mode != Post && mode != Get && mode != WebSocket {
		return resume.Position{}
	}
	p, _ := resume.ParsePosition(r.cursor)
	return p
}

// request is an attempt's HTTP request: GET of the key's stream, or the
// run's POST; with the cursor as Last-Event-ID in Get and Post.
func (r *Run) request(ctx context.Context, mode Mode, base string) (*http.Request, error) {
	cfg := &r.rn.cfg
	var req *http.Request
	var err error
	if mode == Get {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/streams/"+url.PathEscape(r.Plan.Key), nil)
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+r.Plan.Path(), strings.NewReader(r.Plan.Body()))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", r.Plan.Key)
			if cfg.RunHeader != "" {
				req.Header.Set(cfg.RunHeader, r.Plan.Key)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	for k, v := range cfg.Header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "text/event-stream")
	if (mode == Post || mode == Get) && r.cursor != "" {
		req.Header.Set("Last-Event-ID", r.cursor)
	}
	return req, nil
}

func (r *Run) dialWS(ctx context.Context, base string) (*websocket.Conn, *http.Response, error) {
	u := "ws" + strings.TrimPrefix(base, "http") + "/v1/streams/" + url.PathEscape(r.Plan.Key)
	if r.cursor != "" {
		u += "?last_event_id=" + url.QueryEscape(r.cursor)
	}
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	return dialer.DialContext(ctx, u, r.rn.cfg.Header.Clone())
}

// sseEvents reads an SSE body.
func sseEvents(body io.Reader) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for ev, err := range sse.Read(body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
			if !yield(Event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data}, err) || err != nil {
				return
			}
		}
	}
}

// wsEvents reads a WebSocket's frames, one JSON object an event, until a
// normal close.
func wsEvents(ws *websocket.Conn, alive func()) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		for {
			var f struct{ ID, Event, Data string }
			if err := ws.ReadJSON(&f); err != nil {
				if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
					yield(Event{}, err)
				}
				return
			}
			alive()
			if f.Event == "message" { // SSE's default type, named
				f.Event = ""
			}
			if !yield(Event{ID: f.ID, Type: f.Event, Data: f.Data}, nil) {
				return
			}
		}
	}
}

// idleReader reports every read that brought bytes.
type idleReader struct {
	r     io.Reader
	alive func()
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.alive()
	}
	return n, err
}

// errorCode is the code of an OpenAI-shaped error body, or "".
func errorCode(body []byte) string {
	var v struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &v)
	return v.Error.Code
}

// Status is a key's JSON status (GET /v1/streams/{key}, Accept: application/json).
type Status struct {
	Key        string `json:"key"`
	State      string `json:"state"`
	Generation int    `json:"generation"`
	Events     int    `json:"events"`
	Error      string `json:"error"`
}

// Status reads r's key's status from base (an HTTP status other than 200
// leaves Status zero). Safe from any goroutine.
func (r *Run) Status(ctx context.Context, base string) (Status, int, error) {
	return ReadStatus(ctx, r.rn.cfg.Checks, base, r.Plan.Key, r.rn.cfg.Header)
}

// ReadStatus reads key's status from base with c, sending header (an HTTP
// status other than 200 leaves Status zero).
func ReadStatus(ctx context.Context, c *http.Client, base, key string, header http.Header) (Status, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/streams/"+url.PathEscape(key), nil)
	if err != nil {
		return Status{}, 0, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return Status{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Status{}, resp.StatusCode, err
	}
	var st Status
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, &st); err != nil {
			return st, resp.StatusCode, fmt.Errorf("status %q: %w", b, err)
		}
	}
	return st, resp.StatusCode, nil
}

// AwaitEnd polls r's key (through World.Direct) until its generation gen is
// no longer in progress. Safe from any goroutine.
func (r *Run) AwaitEnd(ctx context.Context, gen uint64) (Status, error) {
	for {
		st, code, err := r.Status(ctx, r.rn.cfg.World.Direct(r))
		if err == nil && code == http.StatusOK && (st.Generation > int(gen) || st.Generation == int(gen) && st.State != "in_progress") {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("generation %d of %s still not over (state %q, HTTP %d, %w): %w", gen, r.Plan.Key, st.State, code, err, ctx.Err())
		case <-time.After(10 * time.Millisecond): // polling the proxy's key state: it has no event to wait on
		}
	}
}

// Replay reads r's key's whole stream from base: GET of the stream, or the
// run's POST without a cursor (mode Retry). It returns the events ([DONE]
// included) and the answer's header.
func (r *Run) Replay(ctx context.Context, base string, mode Mode) ([]Event, http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	req, err := r.request(ctx, mode, base)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Del("Last-Event-ID")
	resp, err := r.rn.cfg.Checks.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, resp.Header, &answerError{status: resp.StatusCode, header: resp.Header, body: b}
	}
	var out []Event
	for ev, err := range sseEvents(resp.Body) {
		if err != nil {
			return out, resp.Header, err
		}
		out = append(out, ev)
	}
	return out, resp.Header, nil
}

// answerError is a replay's answer that is not an event stream.
type answerError struct {
	status int
	header http.Header
	body   []byte
}

func (e *answerError) Error() string {
	return fmt.Sprintf("%d %s: %.300s", e.status, e.header.Get("Content-Type"), e.body)
}
