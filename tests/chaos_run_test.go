package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/resume"
	"github.com/reprise-dev/reprise/web/mockllm"
)

// A chaos run is one key: a streamed chat whose client link is broken 1–5
// times by toxics (each break resumed by GET + Last-Event-ID, POST +
// Last-Event-ID or a plain retry of the POST), whose upstream link may be
// broken once mid-stream, and whose upstream may answer with a burst of
// 429/5xx first. When the run has [DONE], its invariants are checked
// against the fake upstream's ledger.

// Resume modes of a client attempt.
const (
	modeFirst = "first" // the initial POST
	modePost  = "post"  // POST, same key, Last-Event-ID = last id seen
	modeGet   = "get"   // GET /v1/streams/{key}, Last-Event-ID = last id seen
	modeRetry = "retry" // POST, same key, no Last-Event-ID (full replay / attach; dedupe by id)
)

// Client link faults (one per planned drop).
const (
	dropLimit          = "limit_data"            // cut after N bytes of the response
	dropLimitSlowClose = "limit_data+slow_close" // cut after N bytes, the close comes late
	dropResetRequest   = "reset_peer_request"    // the request is swallowed, then RST
	dropResetResponse  = "reset_peer_response"   // the answer is swallowed, then RST
	dropResetMid       = "reset_peer_mid"        // RST after the client read k events
	dropTimeoutMid     = "timeout_mid"           // data stops after k events, closed after T
	dropClientClose    = "client_close"          // the client hangs up after k events
)

// Upstream link faults (at most one per run; a generation they break is
// allowed exactly one regeneration).
const (
	upLimit          = "limit_data"
	upLimitSlowClose = "limit_data+slow_close"
	upResetMid       = "reset_peer_mid"
	upResetHead      = "reset_peer_head" // the answer head is swallowed, then RST
	upTimeoutMid     = "timeout_mid"
	upStall          = "timeout_stall" // data stops for good: reprise's idle timeout cuts it
	upLatency        = "latency"       // slows, never breaks
)

type dropPlan struct {
	Kind   string
	Bytes  int // limit_data
	Events int // mid-stream toxics: after this many events read
	MS     int // reset_peer / timeout / slow_close parameter
	Resume string
}

type runPlan struct {
	Tokens    int
	DelayMS   int
	Statuses  []int
	RetryMS   int
	UpFault   string
	UpBytes   int
	UpEvents  int
	UpMS      int
	LatencyMS int // client link latency, both directions
	Drops     []dropPlan
}

// planOptions shape the random plans of one scenario.
type planOptions struct {
	upstreamFaults bool // the world routes upstream requests through per-run links
	minTokens      int
	maxTokens      int
	maxDelayMS     int
}

var resumeModes = []string{modeGet, modePost, modeRetry}

func newPlan(rng *rand.Rand, o planOptions) runPlan {
	p := runPlan{
		Tokens:  o.minTokens + rng.IntN(o.maxTokens-o.minTokens+1),
		DelayMS: 1 + rng.IntN(o.maxDelayMS),
	}
	events := p.Tokens + 4
	respBytes := 200 + events*180 // reprise's SSE: id line + chunk JSON per event
	upBytes := 150 + events*150   // the upstream's SSE
	if o.upstreamFaults {
		if rng.IntN(4) == 0 { // a burst of retryable statuses before the stream
			n := 1 + rng.IntN(3)
			for range n {
				p.Statuses = append(p.Statuses, []int{429, 500, 502, 503, 504}[rng.IntN(5)])
			}
			if rng.IntN(2) == 0 {
				p.RetryMS = 1 + rng.IntN(10)
			}
		}
		switch rng.IntN(11) {
		case 0:
			p.UpFault, p.UpBytes = upLimit, 100+rng.IntN(upBytes)
		case 1:
			p.UpFault, p.UpBytes, p.UpMS = upLimitSlowClose, 100+rng.IntN(upBytes), 10+rng.IntN(300)
		case 2:
			p.UpFault, p.UpEvents = upResetMid, 1+rng.IntN(events)
		case 3:
			p.UpFault, p.UpEvents, p.UpMS = upTimeoutMid, 1+rng.IntN(events), 10+rng.IntN(300)
		case 4:
			if rng.IntN(3) == 0 { // costs reprise's whole idle timeout: rarer
				p.UpFault, p.UpEvents = upStall, 1+rng.IntN(events)
			}
		case 5:
			p.UpFault, p.UpMS = upLatency, 1+rng.IntN(10)
		case 6:
			p.UpFault, p.UpMS = upResetHead, rng.IntN(50)
		}
	}
	if rng.IntN(5) == 0 {
		p.LatencyMS = 1 + rng.IntN(15)
	}
	for range 1 + rng.IntN(5) {
		d := dropPlan{Resume: resumeModes[rng.IntN(len(resumeModes))]}
		switch rng.IntN(7) {
		case 0:
			d.Kind, d.Bytes = dropLimit, rng.IntN(respBytes)
		case 1:
			d.Kind, d.Bytes, d.MS = dropLimitSlowClose, rng.IntN(respBytes), 10+rng.IntN(300)
		case 2:
			d.Kind, d.MS = dropResetRequest, rng.IntN(50)
		case 3:
			d.Kind, d.Events = dropResetMid, 1+rng.IntN(events)
		case 4:
			d.Kind, d.Events, d.MS = dropTimeoutMid, 1+rng.IntN(events), 10+rng.IntN(300)
		case 5:
			d.Kind, d.Events = dropClientClose, 1+rng.IntN(events)
		case 6:
			d.Kind, d.MS = dropResetResponse, rng.IntN(50)
		}
		p.Drops = append(p.Drops, d)
	}
	return p
}

func (p runPlan) breaksUpstream() bool {
	switch p.UpFault {
	case upLimit, upLimitSlowClose, upResetMid, upResetHead, upTimeoutMid, upStall:
		return true
	}
	return false
}

// chaosStats are the suite's counts.
type chaosStats struct {
	mu                        sync.Mutex
	runs, lost, dup, extra    int
	failedRuns                int
	counts                    map[string]int
	clientEvents, replayBytes int
}

func newChaosStats() *chaosStats { return &chaosStats{counts: map[string]int{}} }

func (s *chaosStats) count(name string, n int) {
	s.mu.Lock()
	s.counts[name] += n
	s.mu.Unlock()
}

func (s *chaosStats) mix(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for k := range s.counts {
		if strings.HasPrefix(k, prefix) {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, " %s=%d", strings.TrimPrefix(k, prefix), s.counts[k])
	}
	return b.String()
}

// chaosWorld is what runs talk to.
type chaosWorld struct {
	tb     testing.TB
	toxi   *toxi
	client *http.Client // the chaos clients: no keep-alive, one TCP connection per attempt
	// target is the host:port of the reprise instance the run's next
	// attempt reaches (it may draw from the run's rng).
	target func(r *chaosRun) string
	// direct is the base URL of an instance for checks that bypass the toxics.
	direct func() string
	ledger *mockllm.Ledger
	// router, when set, sends each run's upstream requests through its own
	// link to upstream (host:port of the fake model); nil: no upstream faults.
	router   *router
	upstream string
	stats    *chaosStats
	idle     time.Duration // a client connection silent this long is dead
	timeout  time.Duration // one run's deadline
	// breakCodes are the error codes a generation broken by an injected
	// fault may end with.
	breakCodes []string
	// keyPrefix distinguishes the keys of scenarios sharing a journal.
	keyPrefix string
	runs      sync.Map // key → *chaosRun, for scenarios acting on runs in flight
}

func newChaosClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}

// chaosRun is the state of one run: what the client has seen.
type chaosRun struct {
	w      *chaosWorld
	idx    int
	seed   int64
	rng    *rand.Rand
	plan   runPlan
	key    string
	runID  string
	prompt string
	body   string

	gen    uint64           // the generation the client follows
	evs    map[uint64]event // its events by offset
	cursor string           // last event id seen (what an EventSource sends back)
	done   uint64           // offset of [DONE] once seen
	failed bool             // the followed generation ended with event: error
	codes  []string         // error codes seen

	lost, dup, extra int
	attempts         int
	trace            []string

	mu   sync.Mutex // errs is also written by the upstream fault phase
	errs []string

	clean *toxicLink // the upstream link after the fault phase

	// breaks is how many generations of this key an injected fault broke:
	// each allows one more upstream generation.
	breaks    atomic.Int32
	faultDone chan struct{} // closed when the upstream fault phase is over
}

func (r *chaosRun) errorf(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *chaosRun) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

func (r *chaosRun) tracef(format string, args ...any) {
	if len(r.trace) < 200 {
		r.trace = append(r.trace, fmt.Sprintf(format, args...))
	}
}

func newChaosRun(w *chaosWorld, seed int64, idx int, o planOptions) *chaosRun {
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(idx)))
	r := &chaosRun{w: w, idx: idx, seed: seed, rng: rng, plan: newPlan(rng, o), evs: map[uint64]event{}}
	r.key = fmt.Sprintf("%schaos-%d-%d", w.keyPrefix, seed, idx)
	r.runID = r.key
	directives := fmt.Sprintf("[tokens=%d] [delay=%dms]", r.plan.Tokens, r.plan.DelayMS)
	if len(r.plan.Statuses) > 0 {
		s := make([]string, len(r.plan.Statuses))
		for i, c := range r.plan.Statuses {
			s[i] = itoa(c)
		}
		directives += " [status=" + strings.Join(s, ",") + "]"
		if r.plan.RetryMS > 0 {
			directives += fmt.Sprintf(" [retry_after_ms=%d]", r.plan.RetryMS)
		}
	}
	r.prompt = fmt.Sprintf("chaos run %s %s", r.key, directives)
	r.body = chatBody(r.prompt, true)
	return r
}

// run plays the whole run and checks its invariants.
func (w *chaosWorld) run(ctx context.Context, r *chaosRun) {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	start := time.Now()
	w.runs.Store(r.key, r)
	if err := r.play(ctx); err != nil {
		r.errorf("%v", err)
	}
	if r.done > 0 {
		r.check(ctx)
	}
	errs := r.errors()
	w.stats.mu.Lock()
	w.stats.runs++
	w.stats.lost += r.lost
	w.stats.dup += r.dup
	w.stats.extra += r.extra
	w.stats.clientEvents += len(r.evs)
	if len(errs) > 0 || r.lost+r.dup+r.extra > 0 {
		w.stats.failedRuns++
	}
	w.stats.mu.Unlock()
	if len(errs) > 0 || r.lost+r.dup+r.extra > 0 {
		w.tb.Errorf("chaos run %d (key %s, reproduce with -chaos.seed=%d) failed after %s: lost=%d duplicated=%d extra_generations=%d\n  plan: %+v\n  errors:\n    %s\n  trace:\n    %s",
			r.idx, r.key, r.seed, time.Since(start).Round(time.Millisecond), r.lost, r.dup, r.extra, r.plan,
			strings.Join(errs, "\n    "), strings.Join(r.trace, "\n    "))
	}
}

// play runs the client until it holds a completed generation.
func (r *chaosRun) play(ctx context.Context) error {
	w := r.w
	r.faultDone = make(chan struct{})
	var faultWG sync.WaitGroup
	if w.router != nil {
		up, err := w.toxi.link(w.upstream)
		if err != nil {
			close(r.faultDone)
			return err
		}
		defer up.close()
		w.router.set(r.runID, up.addr)
		defer w.router.remove(r.runID)
		err = r.armUpstream(up)
		if err == nil {
			err = up.seal()
		}
		if err != nil {
			close(r.faultDone)
			return err
		}
		faultWG.Go(func() { r.upstreamPhase(ctx, up) })
	} else {
		close(r.faultDone)
	}
	defer func() {
		faultWG.Wait()
		if r.clean != nil {
			r.clean.close()
		}
	}()

	mode := modeFirst
	drops := r.plan.Drops
	backoff := time.Millisecond
	for r.done == 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("run deadline: still no [DONE] after %d attempts: %w", r.attempts, err)
		}
		if r.attempts >= 80 {
			return fmt.Errorf("no [DONE] after %d attempts", r.attempts)
		}
		var d *dropPlan
		if len(drops) > 0 {
			d, drops = &drops[0], drops[1:]
		}
		if mode != modeGet && mode != modeFirst {
			if err := r.awaitUpstreamPhase(ctx); err != nil {
				return err
			}
		}
		r.attempts++
		w.stats.count("resume:"+mode, 1)
		out, n, err := r.attempt(ctx, mode, d)
		if err != nil {
			return err
		}
		kind := "none"
		if d != nil {
			kind = d.Kind
		}
		r.tracef("attempt %d %s cursor=%q toxic=%s → %s after %d events (gen %d)", r.attempts, mode, r.cursor, kind, out, n, r.gen)
		if n == 0 && out != outDone {
			// Nothing came through: the instance may be gone or restarting.
			time.Sleep(backoff) // bounded by the run deadline
			backoff = min(2*backoff, 200*time.Millisecond)
		} else {
			backoff = time.Millisecond
		}
		switch out {
		case outDone:
			return nil
		case outDropped:
			if d != nil {
				w.stats.count("drop:"+d.Kind, 1)
				mode = d.Resume
			} else {
				w.stats.count("drop:spurious", 1)
				mode = resumeModes[r.rng.IntN(len(resumeModes))]
			}
		case outFailed:
			// The followed generation is over without a result: the same
			// key generates again (POST with the cursor gets a reset first).
			w.stats.count("generation_failed_seen", 1)
			mode = []string{modePost, modeRetry}[r.rng.IntN(2)]
		case outNotFound:
			mode = modeRetry
		case outBusy: // the instance is shutting down or its journal is not ready: backed off above
		}
	}
	return nil
}

type outcome int

const (
	outDone outcome = iota
	outDropped
	outFailed
	outNotFound
	outBusy
)

func (o outcome) String() string {
	return [...]string{"done", "dropped", "generation failed", "key not found", "busy"}[o]
}

// attempt is one client connection through a fresh toxic link.
func (r *chaosRun) attempt(ctx context.Context, mode string, d *dropPlan) (outcome, int, error) {
	w := r.w
	l, err := w.toxi.link(w.target(r))
	if err != nil {
		return 0, 0, err
	}
	defer l.close()
	if ms := r.plan.LatencyMS; ms > 0 {
		for _, dir := range []string{"downstream", "upstream"} {
			if err := l.add("latency_"+dir, "latency", dir, map[string]any{"latency": ms, "jitter": ms / 2}); err != nil {
				return 0, 0, err
			}
		}
	}
	var mid func() error
	if d != nil {
		var err error
		switch d.Kind {
		case dropLimit:
			err = l.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": d.Bytes})
		case dropLimitSlowClose:
			err = l.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": d.Bytes})
			if err == nil {
				err = l.add("slow_close", "slow_close", "downstream", map[string]any{"delay": d.MS})
			}
		case dropResetRequest:
			err = l.addCloser("reset", "reset_peer", "upstream", map[string]any{"timeout": d.MS})
		case dropResetResponse:
			err = l.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": d.MS})
		case dropResetMid:
			mid = func() error { return l.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": 0}) }
		case dropTimeoutMid:
			mid = func() error { return l.addCloser("timeout", "timeout", "downstream", map[string]any{"timeout": d.MS}) }
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if err := l.seal(); err != nil {
		return 0, 0, err
	}

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(w.idle, cancel)
	defer watchdog.Stop()
	req, err := r.request(actx, mode, "http://"+l.addr)
	if err != nil {
		return 0, 0, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return outDropped, 0, nil
	}
	defer resp.Body.Close()
	watchdog.Reset(w.idle)
	body := &idleReader{r: resp.Body, t: watchdog, d: w.idle}

	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		return r.nonStream(mode, resp, body)
	}

	var midErr error
	var midWG sync.WaitGroup
	defer midWG.Wait()
	sent := r.cursorIn(mode)
	c := conn{mode: mode}
	if sent.Gen != 0 {
		c.gen, c.next = sent.Gen, sent.Offset+1
	}
	n := 0
	for ev, err := range sse.Read(body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
		if err != nil {
			break
		}
		n++
		if err := r.take(&c, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data}); err != nil {
			return 0, n, err
		}
		if r.done > 0 {
			return outDone, n, nil
		}
		if d != nil && n == d.Events {
			if d.Kind == dropClientClose {
				return outDropped, n, nil
			}
			if mid != nil {
				midWG.Go(func() { midErr = mid() })
			}
		}
	}
	midWG.Wait()
	if midErr != nil {
		return 0, n, midErr
	}
	if c.failed {
		return outFailed, n, nil
	}
	return outDropped, n, nil
}

// nonStream handles an answer that is not an event stream.
func (r *chaosRun) nonStream(mode string, resp *http.Response, body io.Reader) (outcome, int, error) {
	b, err := io.ReadAll(io.LimitReader(body, 1<<20))
	if err != nil {
		return outDropped, 0, nil
	}
	var v struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &v)
	code := v.Error.Code
	switch {
	case resp.StatusCode == http.StatusNoContent:
		// The cursor is at the end of a generation that will not go on,
		// which ended with the error event the client saw last.
		r.tracef("204 at %s", r.cursor)
		if last := r.evs[r.cursorIn(mode).Offset]; r.cursorIn(mode).Gen == r.gen && last.Type != "error" {
			// (TestChaosOwnerLostResumeAfterCursor)
			r.errorf("204 to a cursor at %+v: the generation failed, the client never got its error event", last)
		}
		return outFailed, 0, nil
	case resp.StatusCode == http.StatusNotFound && code == "key_not_found":
		return outNotFound, 0, nil
	case resp.StatusCode == http.StatusServiceUnavailable && (code == "journal_unavailable" || code == "shutting_down"):
		return outBusy, 0, nil
	case mode != modeGet && resp.StatusCode >= 400 && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusUnprocessableEntity:
		// The POST started a generation that ended before its first event
		// (no response head from the upstream, or the burst outlasted the
		// policy): the key failed.
		r.codes = append(r.codes, fmt.Sprintf("%d:%s", resp.StatusCode, code))
		r.w.stats.count("refused:"+itoa(resp.StatusCode)+":"+code, 1)
		if !slices.Contains(r.w.breakCodes, code) {
			r.errorf("POST refused with %d %s, not a failure an injected fault causes", resp.StatusCode, code)
		}
		return outFailed, 0, nil
	}
	return 0, 0, fmt.Errorf("%s: unexpected answer %d %s: %s", mode, resp.StatusCode, resp.Header.Get("Content-Type"), b)
}

// cursorIn is the position the request of mode sends as Last-Event-ID.
func (r *chaosRun) cursorIn(mode string) resume.Position {
	if mode != modePost && mode != modeGet {
		return resume.Position{}
	}
	p, _ := resume.ParsePosition(r.cursor)
	return p
}

func (r *chaosRun) request(ctx context.Context, mode, base string) (*http.Request, error) {
	var req *http.Request
	var err error
	if mode == modeGet {
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/streams/"+r.key, nil)
	} else {
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, base+chatPath, strings.NewReader(r.body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", r.key)
			req.Header.Set(routeHeader, r.runID)
		}
	}
	if err != nil {
		return nil, err
	}
	if (mode == modePost || mode == modeGet) && r.cursor != "" {
		req.Header.Set("Last-Event-ID", r.cursor)
	}
	return req, nil
}

// conn is what one response must deliver: generation gen from offset next
// (gen 0: whatever generation the server serves, from its first event).
type conn struct {
	mode   string
	gen    uint64
	next   uint64
	failed bool
}

// take checks one delivered event against what this connection must
// deliver and merges it into the client's view, deduplicating by id.
func (r *chaosRun) take(c *conn, ev event) error {
	pos, err := resume.ParsePosition(ev.ID)
	if err != nil || pos.Gen == 0 {
		return fmt.Errorf("event with id %q: not a position (%+v)", ev.ID, ev)
	}
	r.cursor = ev.ID
	if pos.Gen < r.gen {
		return fmt.Errorf("event %s of generation %d after the client saw generation %d", ev.ID, pos.Gen, r.gen)
	}
	if ev.Type == "reset" {
		if pos.Offset != 0 || c.gen != 0 && pos.Gen <= c.gen {
			return fmt.Errorf("reset %s does not lead past generation %d", ev.ID, c.gen)
		}
		r.w.stats.count("reset_seen", 1)
		c.gen, c.next = pos.Gen, 1
		r.follow(pos.Gen)
		return nil
	}
	switch {
	case c.gen == 0:
		c.gen, c.next = pos.Gen, 1
	case pos.Gen < c.gen:
		return fmt.Errorf("event %s of generation %d after generation %d on one connection", ev.ID, pos.Gen, c.gen)
	case pos.Gen > c.gen:
		return fmt.Errorf("event %s of generation %d without a reset (the connection was in generation %d)", ev.ID, pos.Gen, c.gen)
	}
	r.follow(pos.Gen)
	switch {
	case pos.Offset > c.next:
		r.lost += int(pos.Offset - c.next)
		r.errorf("%s: event %s delivered after %d-%d: %d event(s) skipped", c.mode, ev.ID, c.gen, c.next-1, pos.Offset-c.next)
	case pos.Offset < c.next:
		r.dup++
		r.errorf("%s: event %s delivered again (expected offset %d)", c.mode, ev.ID, c.next)
	}
	c.next = pos.Offset + 1
	if have, ok := r.evs[pos.Offset]; ok {
		if have != ev {
			r.errorf("offset %d delivered as %+v and as %+v", pos.Offset, have, ev)
			r.dup++
		}
	} else {
		r.evs[pos.Offset] = ev
	}
	switch {
	case ev.Type == "error":
		var v struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal([]byte(ev.Data), &v)
		r.codes = append(r.codes, v.Error.Code)
		r.w.stats.count("error_event:"+v.Error.Code, 1)
		if !slices.Contains(r.w.breakCodes, v.Error.Code) {
			r.errorf("event: error %s (%s), not a failure an injected fault causes", v.Error.Code, ev.ID)
		}
		c.failed = true
		r.failed = true
	case ev.Type == "" && ev.Data == "[DONE]":
		r.done = pos.Offset
	}
	return nil
}

// follow switches the client's view to generation gen when it is newer.
func (r *chaosRun) follow(gen uint64) {
	if gen > r.gen {
		if r.gen != 0 {
			r.w.stats.count("regenerations_followed", 1)
		}
		r.gen, r.evs, r.failed = gen, map[uint64]event{}, false
	}
}

// armUpstream adds the faults that are in place before the first request.
func (r *chaosRun) armUpstream(up *toxicLink) error {
	p := r.plan
	switch p.UpFault {
	case upLimit:
		return up.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": p.UpBytes})
	case upLimitSlowClose:
		if err := up.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": p.UpBytes}); err != nil {
			return err
		}
		return up.add("slow_close", "slow_close", "downstream", map[string]any{"delay": p.UpMS})
	case upLatency:
		return up.add("latency", "latency", "downstream", map[string]any{"latency": p.UpMS, "jitter": p.UpMS / 2})
	case upResetHead:
		return up.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": p.UpMS})
	}
	return nil
}

// upstreamPhase injects a mid-stream upstream fault, waits for generation
// 1 to end, notes whether the fault broke it, and moves the run to a clean
// link so the regeneration (if any) runs on a healthy one. (Toxics are never
// removed from live connections: toxiproxy v2.5.0's RemoveToxic can restart
// a stub on a link whose writer is gone, leaking it.)
func (r *chaosRun) upstreamPhase(ctx context.Context, up *toxicLink) {
	defer close(r.faultDone)
	p := r.plan
	if p.UpFault == "" {
		return
	}
	var err error
	defer func() {
		if err != nil {
			r.errorf("upstream fault phase: %v", err)
		}
	}()
	if p.UpEvents > 0 {
		if err = r.waitUpstreamEvents(ctx, p.UpEvents); err != nil {
			return
		}
		switch p.UpFault {
		case upResetMid:
			err = up.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": 0})
		case upTimeoutMid:
			err = up.addCloser("timeout", "timeout", "downstream", map[string]any{"timeout": p.UpMS})
		case upStall:
			err = up.addCloser("timeout", "timeout", "downstream", map[string]any{"timeout": 0})
		}
		if err != nil {
			return
		}
	}
	st, err := r.awaitEnd(ctx, 1)
	if err != nil {
		return
	}
	fired := st.State == "failed"
	if p.breaksUpstream() {
		r.w.stats.count(fmt.Sprintf("upstream:%s:broke=%v", p.UpFault, fired), 1)
	}
	clean, err := r.w.toxi.link(r.w.upstream)
	if err != nil {
		return
	}
	r.clean = clean
	if err = clean.seal(); err != nil {
		return
	}
	r.w.router.set(r.runID, clean.addr)
	up.close()
	if fired {
		if !slices.Contains(r.w.breakCodes, st.Error) {
			r.errorf("generation 1 failed with %q under upstream fault %s", st.Error, p.UpFault)
		}
		if p.breaksUpstream() {
			r.breaks.Add(1)
		}
	}
}

// waitUpstreamEvents waits until generation 1 wrote n events upstream (or ended).
func (r *chaosRun) waitUpstreamEvents(ctx context.Context, n int) error {
	for {
		gens := r.w.ledger.Generations(r.prompt)
		if len(gens) > 0 && (gens[0].Events >= n || gens[0].Completed || gens[0].Aborted) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d upstream events: %w", n, ctx.Err())
		case <-time.After(2 * time.Millisecond): // polling the in-process ledger
		}
	}
}

// awaitEnd polls the key until generation gen is no longer in progress.
func (r *chaosRun) awaitEnd(ctx context.Context, gen uint64) (keyStatus, error) {
	for {
		st, code, err := chaosStatus(ctx, r.w.direct(), r.key)
		if err == nil && code == 200 && (st.Generation > int(gen) || st.Generation == int(gen) && st.State != "in_progress") {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("generation %d of %s still not over (state %q, HTTP %d, %v): %w", gen, r.key, st.State, code, err, ctx.Err())
		case <-time.After(10 * time.Millisecond): // polling the proxy's key state
		}
	}
}

// awaitUpstreamPhase holds back a POST that could regenerate the key until
// the upstream fault is cleared (a POST for a key that does not exist yet
// starts generation 1 and goes at once).
func (r *chaosRun) awaitUpstreamPhase(ctx context.Context) error {
	select {
	case <-r.faultDone:
		return nil
	default:
	}
	if _, code, err := chaosStatus(ctx, r.w.direct(), r.key); err == nil && code == http.StatusNotFound {
		return nil
	}
	select {
	case <-r.faultDone:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the upstream fault phase: %w", ctx.Err())
	}
}

// check verifies the run's invariants once the client holds [DONE].
func (r *chaosRun) check(ctx context.Context) {
	w := r.w
	// Every event of the completed generation, contiguous from 1, once.
	var evs []event
	for off := uint64(1); off <= r.done; off++ {
		ev, ok := r.evs[off]
		if !ok {
			r.lost++
			r.errorf("offset %d of generation %d never delivered", off, r.gen)
			continue
		}
		evs = append(evs, ev)
	}
	for off := range r.evs {
		if off > r.done {
			r.errorf("offset %d delivered after [DONE] at %d", off, r.done)
		}
	}
	if want := uint64(r.plan.Tokens + 4); r.done != want {
		r.errorf("[DONE] at offset %d, want %d (role, %d tokens, stop, usage, [DONE])", r.done, want, r.plan.Tokens)
	}
	// The upstream phase is over before the ledger is read.
	select {
	case <-r.faultDone:
	case <-ctx.Done():
		r.errorf("upstream fault phase still running at the end")
		return
	}
	// Readers get [DONE] from the tail as soon as JetStream acknowledged it;
	// the key's record is finished right after.
	st, err := r.awaitEnd(ctx, r.gen)
	if err != nil || st.State != "completed" || st.Generation != int(r.gen) || st.Events != int(r.done) {
		r.errorf("key status %+v (%v), want completed generation %d with %d events", st, err, r.gen, r.done)
		return
	}
	// A generation cut before its answer head may never have reached the
	// upstream: wait for the ones it saw.
	if err := w.ledger.Wait(ctx, r.prompt, len(w.ledger.Generations(r.prompt))); err != nil {
		r.errorf("upstream generations not finished: %v", err)
		return
	}
	gens := w.ledger.Generations(r.prompt)
	allowed := 1 + int(r.breaks.Load())
	if len(gens) > allowed {
		r.extra += len(gens) - allowed
		r.errorf("%d upstream generations, %d allowed (injected upstream breaks: %d; error codes seen: %v)", len(gens), allowed, allowed-1, r.codes)
	}
	if len(gens) == 0 || len(gens) > st.Generation {
		// A reprise generation may end before reaching the upstream (an
		// answer head cut by a fault), never the other way round.
		r.errorf("reprise ran %d generations, the upstream saw %d", st.Generation, len(gens))
		return
	}
	final := gens[len(gens)-1]
	want := strings.Join(mockllm.Content(r.prompt, r.plan.Tokens, false), "")
	got := contentOf(evs)
	if !final.Completed || final.Content != want || got != want {
		r.lost++
		r.errorf("content: client reassembled %q; upstream generated %q (completed=%v); expected %q", got, final.Content, final.Completed, want)
	}
	// Replays (past the toxics) are byte-identical and cost no generation.
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		rep, replayed, err := chaosReplay(ctx, w.direct(), method, r.key, r.body, r.runID)
		if err != nil {
			r.errorf("%s replay: %v", method, err)
			continue
		}
		if method == http.MethodPost && replayed != "true" {
			r.errorf("POST replay without Idempotent-Replayed: true")
		}
		if !slices.Equal(rep, evs) {
			r.errorf("%s replay differs from what the client assembled: %d vs %d events; first difference %s", method, len(rep), len(evs), firstDiff(rep, evs))
		}
	}
	if n := len(w.ledger.Generations(r.prompt)); n != len(gens) {
		r.extra += n - len(gens)
		r.errorf("replays made %d upstream generations", n-len(gens))
	}
}

func firstDiff(a, b []event) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("at %d: %+v vs %+v", i, a[i], b[i])
		}
	}
	return "(one is a prefix of the other)"
}

// contentOf reassembles chat chunk text (content() without a testing.TB).
func contentOf(evs []event) string {
	text, err := chatText(evs)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return text
}

// chaosStatus reads a key's JSON status (usable from any goroutine).
func chaosStatus(ctx context.Context, base, key string) (keyStatus, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/streams/"+key, nil)
	if err != nil {
		return keyStatus{}, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return keyStatus{}, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return keyStatus{}, resp.StatusCode, err
	}
	var st keyStatus
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &st); err != nil {
			return st, resp.StatusCode, fmt.Errorf("status %q: %w", b, err)
		}
	}
	return st, resp.StatusCode, nil
}

// chaosReplay reads a key's whole stream (GET, or POST without a cursor).
func chaosReplay(ctx context.Context, base, method, key, body, runID string) ([]event, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var req *http.Request
	var err error
	if method == http.MethodGet {
		req, err = http.NewRequestWithContext(ctx, method, base+"/v1/streams/"+key, nil)
	} else {
		req, err = http.NewRequestWithContext(ctx, method, base+chatPath, strings.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			req.Header.Set(routeHeader, runID)
		}
	}
	if err != nil {
		return nil, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, "", fmt.Errorf("%d %s: %s", resp.StatusCode, ct, b)
	}
	var out []event
	for ev, err := range sse.Read(resp.Body, &sse.ReadConfig{MaxEventSize: 1 << 20}) {
		if err != nil {
			return out, "", err
		}
		out = append(out, event{ID: ev.LastEventID, Type: ev.Type, Data: ev.Data})
	}
	return out, resp.Header.Get("Idempotent-Replayed"), nil
}

// idleReader resets a watchdog on every byte read.
type idleReader struct {
	r io.Reader
	t *time.Timer
	d time.Duration
}

func (ir *idleReader) Read(p []byte) (int, error) {
	n, err := ir.r.Read(p)
	if n > 0 {
		ir.t.Reset(ir.d)
	}
	return n, err
}

// runChaos plays runs [0, runs) with at most parallel at a time.
func runChaos(ctx context.Context, w *chaosWorld, seed int64, runs, parallel int, o planOptions) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= runs || ctx.Err() != nil {
					return
				}
				w.stats.mu.Lock()
				stop := w.stats.failedRuns >= 5
				w.stats.mu.Unlock()
				if stop {
					return // enough failures to read; stop the suite early
				}
				w.run(ctx, newChaosRun(w, seed, i, o))
			}
		})
	}
	wg.Wait()
}
