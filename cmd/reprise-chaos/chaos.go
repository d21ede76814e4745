package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	sse "github.com/tmaxmax/go-sse"
)

type config struct {
	targets              []string
	ledger, token        string
	runs, concurrency    int
	maxDrops             int
	minTokens, maxTokens int
	maxDelay, runTimeout time.Duration
	seed                 uint64
	verbose              bool
}

func (c config) validate() error {
	for _, raw := range append([]string{c.ledger}, c.targets...) {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%q: want an http(s) URL", raw)
		}
	}
	switch {
	case c.runs < 1, c.concurrency < 1, c.maxDrops < 1:
		return errors.New("--runs, --concurrency and --drops must be at least 1")
	case c.minTokens < 1 || c.maxTokens < c.minTokens:
		return errors.New("want 1 <= --min-tokens <= --max-tokens")
	case c.maxDelay < time.Millisecond || c.runTimeout <= 0:
		return errors.New("--max-delay must be at least 1ms and --run-timeout positive")
	}
	return nil
}

// summary counts what the runs found. Runs with lost, duplicated or extra
// generations are also failed; failed alone means a run could not finish (an
// error status, an error event, its budget spent).
type summary struct {
	runs, lost, duplicated, extra, failed int
	throttled                             int // refusals waited out (429/503, or a refused generation's error event)
	regenerated                           int // generations that broke midway and were asked again
	seed                                  uint64
}

func (s summary) clean() bool {
	return s.lost == 0 && s.duplicated == 0 && s.extra == 0 && s.failed == 0
}

func (s summary) String() string {
	return fmt.Sprintf("chaos: runs=%d lost=%d duplicated=%d extra_generations=%d failed=%d throttled=%d regenerated=%d seed=%d",
		s.runs, s.lost, s.duplicated, s.extra, s.failed, s.throttled, s.regenerated, s.seed)
}

// Resume modes.
const (
	resumeGet   = "get"   // GET /v1/streams/{key}, Last-Event-ID
	resumeWS    = "ws"    // WebSocket on /v1/streams/{key}, ?last_event_id=
	resumePost  = "post"  // POST, same key, Last-Event-ID
	resumeRetry = "retry" // POST, same key, no Last-Event-ID: a full replay, deduplicated by id
)

// Drop kinds.
const (
	dropAfterEvents = "after_events" // the client hangs up after k events
	dropAfterHead   = "after_head"   // the client hangs up once the response head is in
	dropInFlight    = "in_flight"    // the client gives up before the answer, after a few ms
)

type drop struct {
	kind   string
	events int
	wait   time.Duration
	resume string
}

type plan struct {
	key, prompt string
	drops       []drop
	route       []int // the target of each attempt, in turn (a load balancer without stickiness)
}

// target is the base URL attempt try goes to.
func (p plan) target(c config, try int) string { return c.targets[p.route[try%len(p.route)]] }

func newPlan(rng *rand.Rand, c config, i int) plan {
	tokens := c.minTokens + rng.IntN(c.maxTokens-c.minTokens+1)
	delay := 1 + rng.IntN(int(c.maxDelay/time.Millisecond))
	p := plan{
		key:    fmt.Sprintf("chaos-%d-%d", c.seed, i),
		prompt: fmt.Sprintf("reprise-chaos %d-%d [tokens=%d] [delay=%dms]", c.seed, i, tokens, delay),
	}
	modes := []string{resumeGet, resumePost, resumeRetry, resumeWS}
	for range 1 + rng.IntN(c.maxDrops) {
		d := drop{resume: modes[rng.IntN(len(modes))]}
		switch n := rng.IntN(10); {
		case n < 7:
			d.kind, d.events = dropAfterEvents, 1+rng.IntN(tokens+3)
		case n < 9:
			d.kind = dropAfterHead
		default:
			d.kind, d.wait = dropInFlight, time.Duration(rng.IntN(5000))*time.Microsecond
		}
		p.drops = append(p.drops, d)
	}
	for range len(p.drops) + 2 {
		p.route = append(p.route, rng.IntN(len(c.targets)))
	}
	return p
}

// newPlans draws c.runs plans from c.seed.
func newPlans(c config) []plan {
	rng := rand.New(rand.NewPCG(c.seed, 0x5eed))
	plans := make([]plan, c.runs)
	for i := range plans {
		plans[i] = newPlan(rng, c, i)
	}
	return plans
}

// chaos runs c.runs plans, c.concurrency at a time.
func chaos(ctx context.Context, c config, log io.Writer) (summary, error) {
	plans := newPlans(c)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = c.concurrency
	cl := &client{cfg: c, http: &http.Client{Transport: transport}}
	defer transport.CloseIdleConnections()

	sum := summary{seed: c.seed}
	var mu sync.Mutex
	work := make(chan plan)
	var wg sync.WaitGroup
	for range min(c.concurrency, c.runs) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				v := cl.run(ctx, p)
				mu.Lock()
				sum.runs++
				sum.lost += v.lost
				sum.duplicated += v.duplicated
				sum.extra += v.extra
				sum.throttled += v.throttled
				sum.regenerated += v.regenerated
				if len(v.problems) > 0 {
					sum.failed++
					if c.verbose || sum.failed <= 10 {
						fmt.Fprintf(log, "run %s failed: %s\n", p.key, strings.Join(v.problems, "; "))
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, p := range plans {
		select {
		case work <- p:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	return sum, ctx.Err()
}

type client struct {
	cfg  config
	http *http.Client
}

// verdict is one run's findings.
type verdict struct {
	lost, duplicated, extra int
	throttled, regenerated  int
	problems                []string
}

func (v *verdict) problem(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

// event is one SSE event as the client saw it.
type event struct{ id, typ, data string }

// attempt is one connection's outcome.
type attempt struct {
	header     http.Header // of the answer, for reports
	status     int
	retryAfter time.Duration // of a refusal
	events     []event
	done       bool // [DONE] seen
	dropped    bool // we hung up on purpose
}

// run streams p's key through its drops and checks what it got.
func (cl *client) run(ctx context.Context, p plan) (v verdict) {
	ctx, cancel := context.WithTimeout(ctx, cl.cfg.runTimeout)
	defer cancel()

	var got []event             // events in order, each id once
	seen := map[string]string{} // id → data
	mode := ""                  // the first request is a plain POST
	early := 0                  // streams the server ended early
	for try := 0; ; try++ {
		if early > len(p.drops)+5 {
			v.problem("%d attempts ended early without an error, %d events", early, len(got))
			return v
		}
		if ctx.Err() != nil {
			v.problem("budget spent after %d attempts, %d events", try, len(got))
			return v
		}
		var d *drop
		if try < len(p.drops) {
			d = &p.drops[try]
		}
		last := ""
		if len(got) > 0 {
			last = got[len(got)-1].id
		}
		a, err := cl.attempt(ctx, p, try, mode, last, d)
		switch {
		case err != nil && !a.dropped && ctx.Err() != nil:
			v.problem("attempt %d (%s): %v", try, mode, err)
			return v
		case err != nil && !a.dropped:
			// A link error we did not cause (an instance restarting, say):
			// pause, then resume, through the next target of the route.
			pause(ctx, 100*time.Millisecond)
		case err == nil && !a.dropped && !a.done && a.status == http.StatusOK:
			early++ // the server ended the stream without [DONE] or an error
		}
		if a.status == http.StatusNotFound && (mode == resumeGet || mode == resumeWS) {
			// The first POST never reached reprise (dropped in flight): nothing to resume.
			mode = resumePost
			continue
		}
		if a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable || refused(a.events) {
			// Rate limited (or the generation was refused while we were
			// not listening): wait as told, then ask again.
			v.throttled++
			if v.throttled > maxThrottles {
				v.problem("refused %d times", v.throttled)
				return v
			}
			pause(ctx, cmp.Or(a.retryAfter, time.Second))
			mode, try = resumePost, try-1
			continue
		}
		if a.status != 0 && a.status != http.StatusOK {
			v.problem("attempt %d (%s): status %d", try, mode, a.status)
			return v
		}
		if broken(a.events) {
			// The generation broke (its owner died, the upstream broke, the
			// journal failed): nothing of it is a result. A fresh POST
			// generates again, which is the one extra generation allowed.
			v.regenerated++
			if v.regenerated > maxRegenerations {
				v.problem("broken %d times", v.regenerated)
				return v
			}
			got, seen, mode = nil, map[string]string{}, ""
			continue
		}
		for _, ev := range a.events {
			switch {
			case ev.typ == "reset" || (len(got) > 0 && newer(got[len(got)-1].id, ev.id)):
				// The generation we read broke while we were away, and
				// this connection serves the next one (event: reset when
				// we gave a cursor; otherwise its first event).
				v.regenerated++
				got, seen = nil, map[string]string{}
				if ev.typ == "reset" {
					continue
				}
			case ev.typ == "error":
				v.problem("attempt %d (%s): event %s %s", try, mode, ev.typ, ev.data)
				return v
			case ev.id == "":
				v.problem("attempt %d (%s): event without id: %q", try, mode, ev.data)
				return v
			}
			if data, ok := seen[ev.id]; ok {
				if mode != resumeRetry || data != ev.data {
					v.duplicated++ // a resume must not repeat; a replay must repeat exactly
					v.problem("attempt %d (%s): id %s again", try, mode, ev.id)
				}
				continue
			}
			if len(got) > 0 && !follows(got[len(got)-1].id, ev.id) {
				v.lost++
				v.problem("attempt %d (%s): id %s after %s", try, mode, ev.id, got[len(got)-1].id)
			} else if len(got) == 0 && !follows("", ev.id) {
				v.lost++
				v.problem("attempt %d (%s): first id %s", try, mode, ev.id)
			}
			seen[ev.id] = ev.data
			got = append(got, ev)
		}
		if a.done {
			break
		}
		if d != nil {
			mode = d.resume
		} else if mode == "" {
			mode = resumePost
		}
	}
	cl.check(ctx, p, got, &v)
	return v
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// maxThrottles bounds the refusals one run waits out, maxRegenerations the
// broken generations.
const (
	maxThrottles     = 30
	maxRegenerations = 3
)

// broken reports whether a connection ended with the error event of a
// generation that broke midway.
func broken(evs []event) bool {
	switch errorCode(evs) {
	case "owner_lost", "upstream_interrupted", "journal_failure":
		return true
	}
	return false
}

// errorCode is the code of the error event that ends evs, or "".
func errorCode(evs []event) string {
	if len(evs) == 0 || evs[len(evs)-1].typ != "error" {
		return ""
	}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(evs[len(evs)-1].data), &body)
	return body.Error.Code
}

// refused reports whether a connection's only news is that the generation
// was refused for capacity: it never reached the upstream, and asking again
// later is the answer.
func refused(evs []event) bool {
	if len(evs) != 1 {
		return false
	}
	switch errorCode(evs) {
	case "too_many_generations", "upstream_saturated", "too_many_readers", "shutting_down":
		return true
	}
	return false
}

// position splits an id: gen-offset-seq, offsets counting a generation's
// events from 1.
func position(id string) (gen, off uint64, ok bool) {
	parts := strings.Split(id, "-")
	if len(parts) != 3 {
		return 0, 0, false
	}
	g, err1 := strconv.ParseUint(parts[0], 10, 64)
	o, err2 := strconv.ParseUint(parts[1], 10, 64)
	return g, o, err1 == nil && err2 == nil
}

// follows reports whether id is the event right after prev ("" = before the
// first).
func follows(prev, id string) bool {
	g, o, ok := position(id)
	if !ok {
		return false
	}
	if prev == "" {
		return o == 1
	}
	pg, po, ok := position(prev)
	return ok && pg == g && o == po+1
}

// newer reports whether id starts a later generation than prev's.
func newer(prev, id string) bool {
	g, o, ok := position(id)
	pg, _, pok := position(prev)
	return ok && pok && g > pg && o == 1
}

// check compares a finished run with the ledger and with a replay.
func (cl *client) check(ctx context.Context, p plan, got []event, v *verdict) {
	var content strings.Builder
	for _, ev := range got {
		content.WriteString(deltaContent(ev.data))
	}
	// A completed key replays identically, whatever the cursor history was.
	a, err := cl.replay(ctx, p, v)
	switch {
	case err != nil:
		v.problem("replay: %v", err)
	case a.status != http.StatusOK:
		v.problem("replay: status %d", a.status)
	case !a.done || len(a.events) != len(got):
		var last event
		if len(a.events) > 0 {
			last = a.events[len(a.events)-1]
		}
		v.problem("replay: %d events, done=%v, the last %+v; streamed %d; answer %v", len(a.events), a.done, last, len(got), a.header)
	default:
		for i := range got {
			if a.events[i] != got[i] {
				v.problem("replay differs at event %d: %+v, streamed %+v", i+1, a.events[i], got[i])
				break
			}
		}
	}

	// Read last, so a generation the replay caused is counted too.
	rep, err := cl.ledgerFor(ctx, p.prompt)
	if err != nil {
		v.problem("ledger: %v", err)
		return
	}
	// Every generation before the one that completed broke (the client may
	// have seen it break, or only the next one's first event).
	if len(got) > 0 {
		if gen, _, ok := position(got[0].id); ok {
			v.regenerated = max(v.regenerated, int(gen)-1)
		}
	}
	if allowed := 1 + v.regenerated; rep.Entry.Generations > allowed || rep.Entry.Generations < 1 {
		v.extra += max(rep.Entry.Generations-allowed, 0)
		v.problem("upstream generated %d times (%d broken)", rep.Entry.Generations, v.regenerated)
	}
	// The content is one completed generation's, byte for byte.
	matched, completed := false, 0
	for _, g := range rep.Generations {
		if g.Completed {
			completed++
			matched = matched || g.Content == content.String()
		}
	}
	if !matched {
		v.lost++
		v.problem("content (%d bytes) is none of the upstream's %d completed generations", content.Len(), completed)
	}
}

// replay asks for p's completed key from the start, through the next target
// after a link error, and again after a refusal (counted in v), until an
// answer comes or ctx ends.
func (cl *client) replay(ctx context.Context, p plan, v *verdict) (attempt, error) {
	for try := len(p.drops) + 1; ; try++ {
		a, err := cl.attempt(ctx, p, try, resumeRetry, "", nil)
		switch {
		case ctx.Err() != nil:
			return a, err
		case err != nil:
			pause(ctx, 100*time.Millisecond)
		case a.status == http.StatusTooManyRequests || a.status == http.StatusServiceUnavailable:
			v.throttled++
			pause(ctx, cmp.Or(a.retryAfter, time.Second))
		default:
			return a, nil
		}
	}
}

func deltaContent(data string) string {
	var chunk struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal([]byte(data), &chunk) != nil || len(chunk.Choices) == 0 {
		return ""
	}
	return chunk.Choices[0].Delta.Content
}

type promptReport struct {
	Entry struct {
		Generations int `json:"generations"`
	} `json:"entry"`
	Generations []struct {
		Content   string `json:"content"`
		Completed bool   `json:"completed"`
	} `json:"generations"`
}

func (cl *client) ledgerFor(ctx context.Context, prompt string) (promptReport, error) {
	var rep promptReport
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.cfg.ledger+"?prompt="+url.QueryEscape(prompt), nil)
	if err != nil {
		return rep, err
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return rep, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return rep, fmt.Errorf("status %d", resp.StatusCode)
	}
	return rep, json.NewDecoder(resp.Body).Decode(&rep)
}

// attempt makes one request in mode and reads it until [DONE], the end of the
// body, or the drop d.
func (cl *client) attempt(ctx context.Context, p plan, try int, mode, last string, d *drop) (attempt, error) {
	var a attempt
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var gaveUp atomic.Bool
	if d != nil && d.kind == dropInFlight {
		timer := time.AfterFunc(d.wait, func() { gaveUp.Store(true); cancel() })
		defer timer.Stop()
	}
	if mode == resumeWS {
		err := cl.websocket(ctx, p.target(cl.cfg, try), p, last, d, &a)
		a.dropped = a.dropped || gaveUp.Load()
		return a, err
	}
	req, err := cl.request(ctx, p.target(cl.cfg, try), p, mode, last)
	if err != nil {
		return a, err
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		a.dropped = gaveUp.Load()
		return a, err
	}
	defer resp.Body.Close()
	a.status, a.header = resp.StatusCode, resp.Header
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		a.retryAfter = time.Duration(secs) * time.Second
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return a, nil
	}
	if d != nil && d.kind == dropAfterHead {
		a.dropped = true
		return a, nil
	}
	for ev, err := range sse.Read(resp.Body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
		if err != nil {
			a.dropped = gaveUp.Load()
			return a, err
		}
		if ev.Data == "[DONE]" {
			a.done = true
			return a, nil
		}
		a.events = append(a.events, event{id: ev.LastEventID, typ: ev.Type, data: ev.Data})
		if d != nil && d.kind == dropAfterEvents && len(a.events) >= d.events {
			a.dropped = true
			return a, nil
		}
	}
	return a, nil
}

func (cl *client) request(ctx context.Context, target string, p plan, mode, last string) (*http.Request, error) {
	var req *http.Request
	var err error
	if mode == resumeGet {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, target+"/v1/streams/"+url.PathEscape(p.key), nil)
	} else {
		body, _ := json.Marshal(map[string]any{
			"model":    "demo",
			"stream":   true,
			"messages": []map[string]string{{"role": "user", "content": p.prompt}},
		})
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, target+"/v1/chat/completions", bytes.NewReader(body))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", p.key)
		}
	}
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+cl.cfg.token)
	if last != "" && mode != resumeRetry {
		req.Header.Set("Last-Event-ID", last)
	}
	return req, nil
}

// websocket reads key's stream over a WebSocket, one JSON frame per event,
// until [DONE], the end of the stream, or the drop d.
func (cl *client) websocket(ctx context.Context, target string, p plan, last string, d *drop, a *attempt) error {
	u := "ws" + strings.TrimPrefix(target, "http") + "/v1/streams/" + url.PathEscape(p.key)
	if last != "" {
		u += "?last_event_id=" + url.QueryEscape(last)
	}
	dialer := websocket.Dialer{HandshakeTimeout: 30 * time.Second}
	conn, resp, err := dialer.DialContext(ctx, u, http.Header{"Authorization": {"Bearer " + cl.cfg.token}})
	if resp != nil {
		a.status = resp.StatusCode
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			a.retryAfter = time.Duration(secs) * time.Second
		}
	}
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil // the status says it
		}
		return err
	}
	defer conn.Close()
	a.status = http.StatusOK
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if d != nil && d.kind == dropAfterHead {
		a.dropped = true
		return nil
	}
	for {
		var f struct{ ID, Event, Data string }
		if err := conn.ReadJSON(&f); err != nil {
			if websocket.IsCloseError(err, websocket.CloseNormalClosure) {
				return nil
			}
			return err
		}
		if f.Data == "[DONE]" {
			a.done = true
			return nil
		}
		if f.Event == "message" { // SSE's default type, named
			f.Event = ""
		}
		a.events = append(a.events, event{id: f.ID, typ: f.Event, data: f.Data})
		if d != nil && d.kind == dropAfterEvents && len(a.events) >= d.events {
			a.dropped = true
			return nil
		}
	}
}
