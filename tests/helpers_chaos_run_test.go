package tests

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/chaoscore"
	"github.com/reprise-dev/reprise/internal/mockllm"
)

// A chaos run is one key (package chaoscore plays and checks it): a
// streamed chat whose client link is broken 1–5 times, each time by a toxic
// on a fresh toxiproxy link or by the client hanging up, and resumed by GET
// + Last-Event-ID, POST + Last-Event-ID or a plain retry; whose upstream
// link may be broken once mid-stream, and whose upstream may answer with a
// burst of 429/5xx first. What is this suite's own: the toxiproxy links
// (client and upstream) below, and the NATS node and instance kills of the
// scenarios.

// Client link faults (one per planned drop, besides chaoscore.AfterEvents).
const (
	dropLimit          = "limit_data"            // cut after N bytes of the response
	dropLimitSlowClose = "limit_data+slow_close" // cut after N bytes, the close comes late
	dropResetRequest   = "reset_peer_request"    // the request is swallowed, then RST
	dropResetResponse  = "reset_peer_response"   // the answer is swallowed, then RST
	dropResetMid       = "reset_peer_mid"        // RST after the client read k events
	dropTimeoutMid     = "timeout_mid"           // data stops after k events, closed after T
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

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// linkDrop draws one client drop: a toxic on the attempt's link, or the
// client hanging up after k events (1 in 7 each).
func linkDrop(rng *rand.Rand, p chaoscore.Plan) chaoscore.Drop {
	events := p.Events() - 1 // a drop after [DONE] would be none
	bytes := p.AnswerBytes()
	switch rng.IntN(7) {
	case 0:
		return chaoscore.Drop{Kind: dropLimit, Bytes: rng.IntN(bytes)}
	case 1:
		return chaoscore.Drop{Kind: dropLimitSlowClose, Bytes: rng.IntN(bytes), Wait: ms(10 + rng.IntN(300))}
	case 2:
		return chaoscore.Drop{Kind: dropResetRequest, Wait: ms(rng.IntN(50))}
	case 3:
		return chaoscore.Drop{Kind: dropResetMid, Events: 1 + rng.IntN(events)}
	case 4:
		return chaoscore.Drop{Kind: dropTimeoutMid, Events: 1 + rng.IntN(events), Wait: ms(10 + rng.IntN(300))}
	case 5:
		return chaoscore.Drop{Kind: chaoscore.AfterEvents, Events: 1 + rng.IntN(events)}
	default:
		return chaoscore.Drop{Kind: dropResetResponse, Wait: ms(rng.IntN(50))}
	}
}

// linkFaults is this suite's part of a run's plan (chaoscore.Plan.Faults).
type linkFaults struct {
	Statuses  []int // the upstream's burst of retryable statuses first
	RetryMS   int   // their retry_after_ms
	UpFault   string
	UpBytes   int
	UpEvents  int
	UpMS      int
	LatencyMS int // client link latency, both directions
}

func faultsOf(r *chaoscore.Run) *linkFaults { return r.Plan.Faults.(*linkFaults) }

func (f *linkFaults) breaksUpstream() bool {
	switch f.UpFault {
	case upLimit, upLimitSlowClose, upResetMid, upResetHead, upTimeoutMid, upStall:
		return true
	}
	return false
}

// drawFaults draws p's link faults (upstream ones only if the world routes
// upstream requests through per-run links) and adds the fake model's
// directives for the status burst.
func drawFaults(rng *rand.Rand, p *chaoscore.Plan, upstream bool) *linkFaults {
	f := &linkFaults{}
	events := p.Events()
	upBytes := 150 + events*150 // the upstream's SSE
	if upstream {
		if rng.IntN(4) == 0 { // a burst of retryable statuses before the stream
			s := make([]string, 1+rng.IntN(3))
			for i := range s {
				f.Statuses = append(f.Statuses, []int{429, 500, 502, 503, 504}[rng.IntN(5)])
				s[i] = itoa(f.Statuses[i])
			}
			p.Directives = append(p.Directives, "[status="+strings.Join(s, ",")+"]")
			if rng.IntN(2) == 0 {
				f.RetryMS = 1 + rng.IntN(10)
				p.Directives = append(p.Directives, fmt.Sprintf("[retry_after_ms=%d]", f.RetryMS))
			}
		}
		switch rng.IntN(11) {
		case 0:
			f.UpFault, f.UpBytes = upLimit, 100+rng.IntN(upBytes)
		case 1:
			f.UpFault, f.UpBytes, f.UpMS = upLimitSlowClose, 100+rng.IntN(upBytes), 10+rng.IntN(300)
		case 2:
			f.UpFault, f.UpEvents = upResetMid, 1+rng.IntN(events)
		case 3:
			f.UpFault, f.UpEvents, f.UpMS = upTimeoutMid, 1+rng.IntN(events), 10+rng.IntN(300)
		case 4:
			if rng.IntN(3) == 0 { // costs reprise's whole idle timeout: rarer
				f.UpFault, f.UpEvents = upStall, 1+rng.IntN(events)
			}
		case 5:
			f.UpFault, f.UpMS = upLatency, 1+rng.IntN(10)
		case 6:
			f.UpFault, f.UpMS = upResetHead, rng.IntN(50)
		}
	}
	if rng.IntN(5) == 0 {
		f.LatencyMS = 1 + rng.IntN(15)
	}
	return f
}

// chaosWorld is the in-process chaoscore.World: every attempt goes through
// a fresh toxiproxy link (with the drop's toxics) to an instance; with
// upstream set, each run's upstream requests go through links of its own
// too, which its upstream fault breaks.
type chaosWorld struct {
	toxi *toxi
	// target is the host:port of the instance the run's next attempt
	// reaches (it may draw from the run's rng).
	target func(r *chaoscore.Run) string
	// direct is the base URL of an instance for checks that bypass the toxics.
	direct   func() string
	upstream *upstreamFaults // nil: no upstream faults
	runs     sync.Map        // key → *upstreamRun
}

// Link opens a toxic link for one attempt of r: its latency, then the toxics
// of drop d (the mid-stream ones once the client read d.Events events).
func (w *chaosWorld) Link(_ context.Context, r *chaoscore.Run, d *chaoscore.Drop) (chaoscore.Link, error) {
	l, err := w.toxi.link(w.target(r))
	if err != nil {
		return chaoscore.Link{}, err
	}
	link := chaoscore.Link{Base: "http://" + l.addr, Close: l.close}
	fail := func(err error) (chaoscore.Link, error) { l.close(); return chaoscore.Link{}, err }
	if ms := faultsOf(r).LatencyMS; ms > 0 {
		for _, dir := range []string{"downstream", "upstream"} {
			if err := l.add("latency_"+dir, "latency", dir, map[string]any{"latency": ms, "jitter": ms / 2}); err != nil {
				return fail(err)
			}
		}
	}
	if d != nil {
		wait := d.Wait.Milliseconds()
		switch d.Kind {
		case dropLimit:
			err = l.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": d.Bytes})
		case dropLimitSlowClose:
			err = l.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": d.Bytes})
			if err == nil {
				err = l.add("slow_close", "slow_close", "downstream", map[string]any{"delay": wait})
			}
		case dropResetRequest:
			err = l.addCloser("reset", "reset_peer", "upstream", map[string]any{"timeout": wait})
		case dropResetResponse:
			err = l.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": wait})
		case dropResetMid:
			link.Mid = func() error { return l.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": 0}) }
		case dropTimeoutMid:
			link.Mid = func() error { return l.addCloser("timeout", "timeout", "downstream", map[string]any{"timeout": wait}) }
		}
		if err != nil {
			return fail(err)
		}
	}
	if err := l.seal(); err != nil {
		return fail(err)
	}
	return link, nil
}

func (w *chaosWorld) Direct(*chaoscore.Run) string { return w.direct() }

// upstreamFaults route each run's upstream requests through its own link.
type upstreamFaults struct {
	router *router
	addr   string // the fake model's host:port
	ledger *mockllm.Ledger
}

// upstreamRun is one run's upstream fault phase.
type upstreamRun struct {
	done  chan struct{} // closed when the upstream fault phase is over
	clean *toxicLink    // the upstream link after the fault phase
}

// Begin arms r's upstream fault (the ones in place before the first
// request) and starts its fault phase; end waits for the phase and
// releases r's links.
func (w *chaosWorld) Begin(ctx context.Context, r *chaoscore.Run) (func(), error) {
	u := &upstreamRun{done: make(chan struct{})}
	w.runs.Store(r.Plan.Key, u)
	if w.upstream == nil {
		close(u.done)
		return func() {}, nil
	}
	up, err := w.toxi.link(w.upstream.addr)
	if err != nil {
		close(u.done)
		return nil, err
	}
	key := r.Plan.Key
	w.upstream.router.set(key, up.addr)
	err = armUpstream(up, faultsOf(r))
	if err == nil {
		err = up.seal()
	}
	if err != nil {
		close(u.done)
		w.upstream.router.remove(key)
		up.close()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { w.upstreamPhase(ctx, r, u, up) })
	return func() {
		wg.Wait()
		w.upstream.router.remove(key)
		up.close()
		if u.clean != nil {
			u.clean.close()
		}
	}, nil
}

// Settled holds back a POST that could regenerate the key until the
// upstream fault is cleared (a POST for a key that does not exist yet
// starts generation 1 and goes at once), and the checks until it is over.
func (w *chaosWorld) Settled(ctx context.Context, r *chaoscore.Run) error {
	v, _ := w.runs.Load(r.Plan.Key)
	u := v.(*upstreamRun)
	select {
	case <-u.done:
		return nil
	default:
	}
	if _, code, err := r.Status(ctx, w.direct()); err == nil && code == http.StatusNotFound {
		return nil
	}
	select {
	case <-u.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the upstream fault phase is not over: %w", ctx.Err())
	}
}

// armUpstream adds the faults that are in place before the first request.
func armUpstream(up *toxicLink, f *linkFaults) error {
	switch f.UpFault {
	case upLimit:
		return up.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": f.UpBytes})
	case upLimitSlowClose:
		if err := up.addCloser("limit", "limit_data", "downstream", map[string]any{"bytes": f.UpBytes}); err != nil {
			return err
		}
		return up.add("slow_close", "slow_close", "downstream", map[string]any{"delay": f.UpMS})
	case upLatency:
		return up.add("latency", "latency", "downstream", map[string]any{"latency": f.UpMS, "jitter": f.UpMS / 2})
	case upResetHead:
		return up.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": f.UpMS})
	}
	return nil
}

// upstreamPhase injects a mid-stream upstream fault, waits for generation
// 1 to end, notes whether the fault broke it, and moves the run to a clean
// link so the regeneration (if any) runs on a healthy one. (Toxics are never
// removed from live connections: toxiproxy v2.5.0's RemoveToxic can restart
// a stub on a link whose writer is gone, leaking it.)
func (w *chaosWorld) upstreamPhase(ctx context.Context, r *chaoscore.Run, u *upstreamRun, up *toxicLink) {
	defer close(u.done)
	f := faultsOf(r)
	if f.UpFault == "" {
		return
	}
	var err error
	defer func() {
		if err != nil {
			r.Errorf("upstream fault phase: %v", err)
		}
	}()
	if f.UpEvents > 0 {
		if err = waitUpstreamEvents(ctx, w.upstream.ledger, r.Plan.Prompt(), f.UpEvents); err != nil {
			return
		}
		switch f.UpFault {
		case upResetMid:
			err = up.addCloser("reset", "reset_peer", "downstream", map[string]any{"timeout": 0})
		case upTimeoutMid:
			err = up.addCloser("timeout", "timeout", "downstream", map[string]any{"timeout": f.UpMS})
		case upStall:
			err = up.addCloser("timeout", "timeout", "downstream", map[string]any{"timeout": 0})
		}
		if err != nil {
			return
		}
	}
	st, err := r.AwaitEnd(ctx, 1)
	if err != nil {
		return
	}
	fired := st.State == "failed"
	if f.breaksUpstream() {
		r.Count(fmt.Sprintf("upstream:%s:broke=%v", f.UpFault, fired), 1)
	}
	clean, err := w.toxi.link(w.upstream.addr)
	if err != nil {
		return
	}
	u.clean = clean
	if err = clean.seal(); err != nil {
		return
	}
	w.upstream.router.set(r.Plan.Key, clean.addr)
	up.close()
	if fired && f.breaksUpstream() {
		r.Broke()
	}
}

// waitUpstreamEvents waits until generation 1 of prompt wrote n events
// upstream, or ended before.
func waitUpstreamEvents(ctx context.Context, l *mockllm.Ledger, prompt string, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan error, 2)
	go func() { got <- l.WaitEvents(ctx, prompt, n) }()
	go func() { got <- l.Wait(ctx, prompt, 1) }()
	err := <-got
	cancel()
	<-got //nolint:errcheck // the canceled wait's own error
	if err != nil {
		return fmt.Errorf("waiting for %d upstream events: %w", n, err)
	}
	return nil
}

// chaosSuite is one scenario's runs.
type chaosSuite struct {
	world      *chaosWorld
	ledger     *mockllm.Ledger
	shape      chaoscore.Shape
	idle       time.Duration // a client connection silent this long is dead
	timeout    time.Duration // one run's deadline
	breakCodes []string      // the error codes a generation broken by an injected fault may end with
	keyPrefix  string        // distinguishes the keys of scenarios sharing a journal
}

// chaosShape is a scenario's plans: tokens and pace, 1–5 drops from linkDrop.
func chaosShape(minTokens, maxTokens, maxDelayMS int) chaoscore.Shape {
	return chaoscore.Shape{
		MinTokens: minTokens, MaxTokens: maxTokens, MaxDelay: ms(maxDelayMS), MaxDrops: 5,
		Resumes: []chaoscore.Mode{chaoscore.Get, chaoscore.Post, chaoscore.Retry},
		Drop:    linkDrop,
	}
}

// mockContent is what the fake model writes for a prompt of n tokens.
func mockContent(prompt string, n int) string {
	return strings.Join(mockllm.Content(prompt, n, false), "")
}

// runner builds the scenario's runner; each failed run is reported to t.
func (s *chaosSuite) runner(t *testing.T, seed uint64) *chaoscore.Runner {
	t.Helper()
	client := newChaosClient()
	t.Cleanup(client.CloseIdleConnections)
	rn, err := chaoscore.New(chaoscore.Config{
		World:  s.world,
		Ledger: chaoscore.LocalLedger(s.ledger),
		Rules: chaoscore.Rules{
			Breaks:   s.breakCodes,
			Refusals: []string{"journal_unavailable", "shutting_down", "overloaded"},
			Content:  mockContent,
		},
		Shape:     s.shape,
		KeyPrefix: s.keyPrefix,
		Extend: func(rng *rand.Rand, p *chaoscore.Plan) {
			p.Faults = drawFaults(rng, p, s.world.upstream != nil)
		},
		Client:      client,
		Checks:      http.DefaultClient,
		RunHeader:   routeHeader,
		Idle:        s.idle,
		Timeout:     s.timeout,
		RefusalWait: 50 * time.Millisecond,
		StopAfter:   5, // enough failures to read; stop the suite early
		OnEnd: func(r *chaoscore.Run) {
			if r.Verdict().Failed() {
				t.Errorf("%s\n  reproduce with -chaos.seed=%d", r.Report(), seed)
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rn
}

// newChaosClient is the runs' client: no keep-alive, one TCP connection per
// attempt (each attempt has a link of its own).
func newChaosClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}}
}
