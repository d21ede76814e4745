package resume_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// waitTimeout bounds every wait in these tests.
const waitTimeout = 10 * time.Second

// clock is an injectable clock that only moves when told to.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// lapse moves clk on by d in steps of a quarter lease, each manager in ms
// asking the store at every step: a lease that ran out is only judged
// lapsed by an instance that saw the store answer for a whole lease.
func lapse(tb testing.TB, clk *clock, d time.Duration, ms ...*resume.Manager) {
	tb.Helper()
	look := func() {
		for _, m := range ms {
			if _, err := m.Get(waitCtx(tb), resume.StreamID("tenant", "lapse-probe")); !errors.Is(err, resume.ErrNotFound) {
				tb.Fatalf("probe Get: %v", err)
			}
		}
	}
	look()
	for d > 0 {
		step := min(d, ms[0].Lease()/4)
		clk.Advance(step)
		d -= step
		look()
	}
}

// newStore starts an embedded JetStream server and opens an in-memory
// journal on it; both are shut down when the test ends.
func newStore(tb testing.TB) *journal.Journal {
	tb.Helper()
	return journaltest.New(tb, journal.Config{Memory: true})
}

// newManager returns a Manager on store named owner. lease 0 is the default;
// now nil the real clock.
func newManager(tb testing.TB, store *journal.Journal, owner string, lease time.Duration, now func() time.Time) *resume.Manager {
	tb.Helper()
	return newManagerWith(tb, resume.Config{Store: store, Owner: owner, Lease: lease, Now: now})
}

// newManagerWith is newManager with cfg as it is (an Adopter, a Salvager).
func newManagerWith(tb testing.TB, cfg resume.Config) *resume.Manager {
	tb.Helper()
	m, err := resume.New(cfg)
	if err != nil {
		tb.Fatalf("resume.New: %v", err)
	}
	return m
}

// waitCtx is a context that ends after waitTimeout or with the test.
func waitCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	tb.Cleanup(cancel)
	return ctx
}

// request is a request for key with the given body.
func request(key, body string) resume.Request {
	return resume.Request{
		ID: resume.StreamID("tenant", key), Key: key, Path: "/v1/chat/completions",
		Fingerprint: resume.Fingerprint("/v1/chat/completions", []byte(body)), Stream: true,
	}
}

// begin calls Begin and stops the lease it may get when the test ends.
func begin(tb testing.TB, m *resume.Manager, req resume.Request) (resume.Outcome, error) {
	tb.Helper()
	out, err := m.Begin(waitCtx(tb), req)
	if out.Lease != nil {
		l := out.Lease
		tb.Cleanup(func() { _ = l.Finish(context.Background(), resume.Result{State: resume.Failed}) })
	}
	return out, err
}

// mustStart calls Begin and fails unless it decides Start.
func mustStart(tb testing.TB, m *resume.Manager, req resume.Request) *resume.Lease {
	tb.Helper()
	out, err := begin(tb, m, req)
	if err != nil {
		tb.Fatalf("Begin: %v", err)
	}
	if out.Decision != resume.Start || out.Lease == nil {
		tb.Fatalf("Begin = %s (lease %v), want start with a lease", out.Decision, out.Lease != nil)
	}
	return out.Lease
}

// stored reads the record of id straight from the store.
func stored(tb testing.TB, store *journal.Journal, id string) resume.Record {
	tb.Helper()
	val, _, found, err := store.Get(waitCtx(tb), id)
	if err != nil || !found {
		tb.Fatalf("store.Get(%s): found %v, %v", id, found, err)
	}
	var rec resume.Record
	if err := json.Unmarshal(val, &rec); err != nil {
		tb.Fatalf("record %s: %v", id, err)
	}
	return rec
}

// eventually polls cond until it holds or the deadline passes.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

func TestNewConfig(t *testing.T) {
	store := newStore(t)
	full := resume.Config{Store: store, Owner: "a"}
	tests := []struct {
		name    string
		change  func(*resume.Config)
		wantErr error
	}{
		{name: "complete", change: func(*resume.Config) {}},
		{name: "no store", change: func(c *resume.Config) { c.Store = nil }, wantErr: resume.ErrInvalidOption},
		{name: "no owner", change: func(c *resume.Config) { c.Owner = "" }, wantErr: resume.ErrInvalidOption},
		{name: "lease 10ms", change: func(c *resume.Config) { c.Lease = 10 * time.Millisecond }, wantErr: resume.ErrInvalidOption},
		{name: "negative lease", change: func(c *resume.Config) { c.Lease = -time.Second }, wantErr: resume.ErrInvalidOption},
		{name: "lease 30ms", change: func(c *resume.Config) { c.Lease = 30 * time.Millisecond }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := full
			tc.change(&cfg)
			m, err := resume.New(cfg)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("New: %v, want %v", err, tc.wantErr)
			}
			if err == nil && cfg.Lease == 0 && m.Lease() != resume.DefaultLease {
				t.Fatalf("Lease() = %s, want the default %s", m.Lease(), resume.DefaultLease)
			}
		})
	}
}

// TestBeginDecisions: what Begin decides for each state of a key's record.
func TestBeginDecisions(t *testing.T) {
	const lease = 10 * time.Second
	tests := []struct {
		name     string
		setup    func(t *testing.T, m *resume.Manager, clk *clock, req resume.Request)
		body     string // the request's body; "" is the setup's body
		want     resume.Decision
		wantGen  uint64
		wantErr  error
		wantEvts uint64
	}{
		{
			name:    "new key",
			setup:   func(*testing.T, *resume.Manager, *clock, resume.Request) {},
			want:    resume.Start,
			wantGen: 1,
		},
		{
			name: "in progress, same request",
			setup: func(t *testing.T, m *resume.Manager, _ *clock, req resume.Request) {
				t.Helper()
				mustStart(t, m, req)
			},
			want:    resume.Attach,
			wantGen: 1,
		},
		{
			name: "in progress, lease about to run out",
			setup: func(t *testing.T, m *resume.Manager, clk *clock, req resume.Request) {
				t.Helper()
				mustStart(t, m, req)
				clk.Advance(lease) // not after LeaseUntil yet
			},
			want:    resume.Attach,
			wantGen: 1,
		},
		{
			name: "in progress, other request",
			setup: func(t *testing.T, m *resume.Manager, _ *clock, req resume.Request) {
				t.Helper()
				mustStart(t, m, req)
			},
			body:    "another body",
			wantErr: resume.ErrMismatch,
		},
		{
			name: "completed",
			setup: func(t *testing.T, m *resume.Manager, _ *clock, req resume.Request) {
				t.Helper()
				l := mustStart(t, m, req)
				if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 9, Status: 200}); err != nil {
					t.Fatal(err)
				}
			},
			want:     resume.Replay,
			wantGen:  1,
			wantEvts: 9,
		},
		{
			name: "completed, other request",
			setup: func(t *testing.T, m *resume.Manager, _ *clock, req resume.Request) {
				t.Helper()
				l := mustStart(t, m, req)
				if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 9, Status: 200}); err != nil {
					t.Fatal(err)
				}
			},
			body:    "another body",
			wantErr: resume.ErrMismatch,
		},
		{
			name: "failed",
			setup: func(t *testing.T, m *resume.Manager, _ *clock, req resume.Request) {
				t.Helper()
				l := mustStart(t, m, req)
				if err := l.Finish(waitCtx(t), resume.Result{State: resume.Failed, Events: 3, Error: "upstream"}); err != nil {
					t.Fatal(err)
				}
			},
			want:    resume.Start,
			wantGen: 2,
		},
		{
			name: "failed twice",
			setup: func(t *testing.T, m *resume.Manager, _ *clock, req resume.Request) {
				t.Helper()
				for range 2 {
					l := mustStart(t, m, req)
					if err := l.Finish(waitCtx(t), resume.Result{State: resume.Failed}); err != nil {
						t.Fatal(err)
					}
				}
			},
			want:    resume.Start,
			wantGen: 3,
		},
		{
			name: "failed, other request",
			setup: func(t *testing.T, m *resume.Manager, _ *clock, req resume.Request) {
				t.Helper()
				l := mustStart(t, m, req)
				if err := l.Finish(waitCtx(t), resume.Result{State: resume.Failed}); err != nil {
					t.Fatal(err)
				}
			},
			body:    "another body",
			wantErr: resume.ErrMismatch,
		},
		{
			name: "in progress, lease expired",
			setup: func(t *testing.T, m *resume.Manager, clk *clock, req resume.Request) {
				t.Helper()
				mustStart(t, m, req)
				lapse(t, clk, lease+time.Millisecond, m)
			},
			want:    resume.Start,
			wantGen: 2,
		},
	}
	store := newStore(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			m := newManager(t, store, "owner-a", lease, clk.Now)
			req := request(t.Name(), "body")
			tc.setup(t, m, clk, req)
			if tc.body != "" {
				req.Fingerprint = resume.Fingerprint(req.Path, []byte(tc.body))
			}
			out, err := begin(t, m, req)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Begin: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if out.Decision != tc.want {
				t.Fatalf("Begin = %s, want %s", out.Decision, tc.want)
			}
			if out.Record.Generation != tc.wantGen {
				t.Fatalf("generation %d, want %d", out.Record.Generation, tc.wantGen)
			}
			if out.Record.Events != tc.wantEvts {
				t.Fatalf("events %d, want %d", out.Record.Events, tc.wantEvts)
			}
			if (out.Lease != nil) != (tc.want == resume.Start) {
				t.Fatalf("lease %v for %s", out.Lease != nil, out.Decision)
			}
			if out.Decision == resume.Start {
				rec := stored(t, store, req.ID)
				if rec.State != resume.InProgress || rec.Generation != tc.wantGen || rec.Owner != "owner-a" ||
					rec.Error != "" || rec.Events != 0 || !rec.LeaseUntil.Equal(clk.Now().Add(lease)) {
					t.Fatalf("stored record %+v, want in progress, generation %d, owner-a, lease until %s",
						rec, tc.wantGen, clk.Now().Add(lease))
				}
				if rec.Key != req.Key || rec.Fingerprint != req.Fingerprint || rec.Path != req.Path || !rec.Stream {
					t.Fatalf("stored record %+v does not describe %+v", rec, req)
				}
			}
		})
	}
}

// TestTakeoverFencesOldLease: after another owner takes over an expired
// generation, the old owner cannot finish it.
func TestTakeoverFencesOldLease(t *testing.T) {
	store := newStore(t)
	clk := newClock()
	a := newManager(t, store, "owner-a", 0, clk.Now)
	b := newManager(t, store, "owner-b", 0, clk.Now)
	req := request("takeover", "body")
	old := mustStart(t, a, req)
	lapse(t, clk, a.Lease()+time.Second, b)

	out, err := begin(t, b, req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Decision != resume.Start || out.Record.Generation != 2 || out.Record.Owner != "owner-b" {
		t.Fatalf("Begin = %s gen %d owner %q, want start gen 2 owner-b", out.Decision, out.Record.Generation, out.Record.Owner)
	}
	err = old.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 5})
	if !errors.Is(err, resume.ErrFenced) {
		t.Fatalf("old lease Finish: %v, want ErrFenced", err)
	}
	if rec := stored(t, store, req.ID); rec.State != resume.InProgress || rec.Generation != 2 || rec.Owner != "owner-b" {
		t.Fatalf("record after the fenced Finish: %+v", rec)
	}
	if err := out.Lease.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 7}); err != nil {
		t.Fatalf("new lease Finish: %v", err)
	}
	if rec := stored(t, store, req.ID); rec.State != resume.Completed || rec.Generation != 2 || rec.Events != 7 {
		t.Fatalf("record after the new owner finished: %+v", rec)
	}
}

func TestGet(t *testing.T) {
	store := newStore(t)
	clk := newClock()
	m := newManager(t, store, "owner-a", 0, clk.Now)

	if _, err := m.Get(waitCtx(t), resume.StreamID("tenant", "missing")); !errors.Is(err, resume.ErrNotFound) {
		t.Fatalf("Get missing: %v, want ErrNotFound", err)
	}

	req := request("get", "body")
	l := mustStart(t, m, req)
	rec, err := m.Get(waitCtx(t), req.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != resume.InProgress || rec.Owner != "owner-a" || rec.Generation != 1 {
		t.Fatalf("Get in progress = %+v", rec)
	}

	lapse(t, clk, m.Lease()+time.Millisecond, m)
	rec, err = m.Get(waitCtx(t), req.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != resume.Failed || rec.Error != resume.OwnerLost || rec.Generation != 1 {
		t.Fatalf("Get expired = %+v, want failed with owner_lost", rec)
	}
	if s := stored(t, store, req.ID); s.State != resume.Failed || s.Error != resume.OwnerLost {
		t.Fatalf("stored after Get expired = %+v, want failed with owner_lost", s)
	}
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed}); !errors.Is(err, resume.ErrFenced) {
		t.Fatalf("Finish after owner_lost: %v, want ErrFenced", err)
	}
	// The failed key generates afresh.
	out, err := begin(t, m, req)
	if err != nil {
		t.Fatal(err)
	}
	if out.Decision != resume.Start || out.Record.Generation != 2 || out.Record.Error != "" {
		t.Fatalf("Begin after owner_lost = %s gen %d error %q, want start gen 2", out.Decision, out.Record.Generation, out.Record.Error)
	}
}

// TestBeginConcurrent: many requests with one key on two instances at once;
// exactly one starts, every other attaches to its generation.
func TestBeginConcurrent(t *testing.T) {
	const n = 32
	store := newStore(t)
	ms := []*resume.Manager{
		newManager(t, store, "owner-a", 0, nil),
		newManager(t, store, "owner-b", 0, nil),
	}
	req := request("concurrent", "body")
	outs := make([]resume.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			outs[i], errs[i] = ms[i%2].Begin(waitCtx(t), req)
		})
	}
	close(start)
	wg.Wait()

	var starts int
	var owner string
	for i, out := range outs {
		if errs[i] != nil {
			t.Fatalf("Begin %d: %v", i, errs[i])
		}
		if out.Lease != nil {
			l := out.Lease
			t.Cleanup(func() { _ = l.Finish(context.Background(), resume.Result{State: resume.Failed}) })
		}
		switch out.Decision {
		case resume.Start:
			starts++
			owner = out.Record.Owner
		case resume.Attach:
		default:
			t.Errorf("Begin %d = %s, want start or attach", i, out.Decision)
		}
		if out.Record.Generation != 1 {
			t.Errorf("Begin %d: generation %d, want 1", i, out.Record.Generation)
		}
	}
	if starts != 1 {
		t.Fatalf("%d starts, want exactly 1", starts)
	}
	for i, out := range outs {
		if out.Record.Owner != owner {
			t.Errorf("Begin %d sees owner %q, the starter is %q", i, out.Record.Owner, owner)
		}
	}
}

// TestBeginConcurrentTakeover: many requests race to take over one expired
// generation; exactly one starts generation 2.
func TestBeginConcurrentTakeover(t *testing.T) {
	const n = 16
	store := newStore(t)
	clk := newClock()
	ms := []*resume.Manager{
		newManager(t, store, "owner-a", 0, clk.Now),
		newManager(t, store, "owner-b", 0, clk.Now),
	}
	req := request("concurrent-takeover", "body")
	mustStart(t, ms[0], req)
	lapse(t, clk, ms[0].Lease()+time.Second, ms...)

	outs := make([]resume.Outcome, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { outs[i], errs[i] = ms[i%2].Begin(waitCtx(t), req) })
	}
	wg.Wait()
	var starts int
	for i, out := range outs {
		if out.Lease != nil {
			l := out.Lease
			t.Cleanup(func() { _ = l.Finish(context.Background(), resume.Result{State: resume.Failed}) })
		}
		if errs[i] != nil {
			t.Fatalf("Begin %d: %v", i, errs[i])
		}
		if out.Decision == resume.Start {
			starts++
		}
		if out.Decision == resume.Replay || out.Record.Generation != 2 {
			t.Errorf("Begin %d = %s gen %d, want start or attach of gen 2", i, out.Decision, out.Record.Generation)
		}
	}
	if starts != 1 {
		t.Fatalf("%d starts, want exactly 1", starts)
	}
}

// TestHeartbeat: a live lease renews itself and stores SetEvents progress.
func TestHeartbeat(t *testing.T) {
	const lease = 60 * time.Millisecond
	store := newStore(t)
	m := newManager(t, store, "owner-a", lease, nil)
	req := request("heartbeat", "body")
	out, err := begin(t, m, req)
	if err != nil || out.Decision != resume.Start {
		t.Fatalf("Begin = %s, %v", out.Decision, err)
	}
	l := out.Lease
	first := out.Record.LeaseUntil

	l.SetEvents(7)
	eventually(t, "a heartbeat storing 7 events", func() bool {
		rec := stored(t, store, req.ID)
		return rec.Events == 7 && rec.LeaseUntil.After(first)
	})
	if rec := l.Record(); !rec.LeaseUntil.After(first) {
		t.Errorf("Lease.Record().LeaseUntil = %s, not renewed past %s", rec.LeaseUntil, first)
	}
	l.SetEvents(11)
	eventually(t, "a heartbeat storing 11 events", func() bool { return stored(t, store, req.ID).Events == 11 })

	// Renewed leases keep other requests attaching well past the first lease.
	eventually(t, "three leases' time", func() bool { return time.Now().After(first.Add(2 * lease)) })
	att, err := begin(t, m, req)
	if err != nil || att.Decision != resume.Attach {
		t.Fatalf("Begin after %s = %s, %v; want attach", 3*lease, att.Decision, err)
	}
	select {
	case <-l.Lost():
		t.Fatal("a heartbeating lease was lost")
	default:
	}
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 12}); err != nil {
		t.Fatal(err)
	}
	if rec := stored(t, store, req.ID); rec.Events != 12 || rec.State != resume.Completed {
		t.Fatalf("record after Finish = %+v", rec)
	}
}

// TestLost: Lost closes when the key is taken from a heartbeating lease.
func TestLost(t *testing.T) {
	const lease = 60 * time.Millisecond
	tests := []struct {
		name string
		// take takes the key over, or says why it did not.
		take func(t *testing.T, other *resume.Manager, req resume.Request) error
	}{
		{"another owner starts a new generation", func(t *testing.T, other *resume.Manager, req resume.Request) error {
			t.Helper()
			out, err := begin(t, other, req)
			if err != nil || out.Decision != resume.Start || out.Record.Generation != 2 {
				return fmt.Errorf("takeover Begin = %s gen %d, %w; want start gen 2", out.Decision, out.Record.Generation, err)
			}
			return nil
		}},
		{"another instance marks the owner lost", func(t *testing.T, other *resume.Manager, req resume.Request) error {
			t.Helper()
			rec, err := other.Get(waitCtx(t), req.ID)
			if err != nil || rec.State != resume.Failed || rec.Error != resume.OwnerLost {
				return fmt.Errorf("Get = %+v, %w; want failed owner_lost", rec, err)
			}
			return nil
		}},
	}
	store := newStore(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// a's clock stands still, so its own lease never runs out in its
			// eyes; b's clock is an hour ahead, so b sees a's lease expired.
			clkA, clkB := newClock(), newClock()
			clkB.Advance(time.Hour)
			a := newManager(t, store, "owner-a", lease, clkA.Now)
			b := newManager(t, store, "owner-b", lease, clkB.Now)
			req := request(t.Name(), "body")
			l := mustStart(t, a, req)
			select {
			case <-l.Lost():
				t.Fatal("lease lost before the takeover")
			default:
			}
			// a still renews (every lease/3 of real time): a renewal b sees
			// land between its read and its write shows a alive, and b
			// rightly waits a lease of its clock from that change (contact.go).
			// So the lease is let lapse again, a few times at most.
			var err error
			for range 5 {
				lapse(t, clkB, lease, b)
				if err = tc.take(t, b, req); err == nil {
					break
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-l.Lost():
			case <-time.After(waitTimeout):
				t.Fatal("Lost() not closed after the takeover")
			}
			if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed}); !errors.Is(err, resume.ErrFenced) {
				t.Fatalf("Finish of a lost lease: %v, want ErrFenced", err)
			}
		})
	}
}

func TestFinish(t *testing.T) {
	tests := []struct {
		name    string
		res     resume.Result
		wantErr error
		replay  bool
	}{
		{name: "completed", res: resume.Result{State: resume.Completed, Events: 42, Status: 200, ContentType: "text/event-stream"}, replay: true},
		{name: "failed", res: resume.Result{State: resume.Failed, Events: 3, Status: 502, ContentType: "application/json", Error: "upstream_error"}},
		{name: "in progress is no result", res: resume.Result{State: resume.InProgress}, wantErr: resume.ErrInvalidOption},
		{name: "empty state", res: resume.Result{}, wantErr: resume.ErrInvalidOption},
	}
	store := newStore(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			m := newManager(t, store, "owner-a", 0, clk.Now)
			req := request(t.Name(), "body")
			l := mustStart(t, m, req)
			clk.Advance(time.Second)
			err := l.Finish(waitCtx(t), tc.res)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Finish: %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			rec := stored(t, store, req.ID)
			if rec.State != tc.res.State || rec.Events != tc.res.Events || rec.Status != tc.res.Status ||
				rec.ContentType != tc.res.ContentType || rec.Error != tc.res.Error {
				t.Fatalf("stored %+v, want the result %+v", rec, tc.res)
			}
			if rec.Owner != "" || !rec.LeaseUntil.IsZero() || rec.Generation != 1 || !rec.UpdatedAt.Equal(clk.Now()) {
				t.Fatalf("stored %+v, want no owner, no lease, generation 1, updated at %s", rec, clk.Now())
			}
			if got := l.Record(); got.State != tc.res.State || got.Events != tc.res.Events {
				t.Fatalf("Lease.Record() = %+v after Finish", got)
			}
			if err := l.Finish(waitCtx(t), tc.res); !errors.Is(err, resume.ErrFenced) {
				t.Fatalf("second Finish: %v, want ErrFenced", err)
			}
			// A finished key is never marked owner_lost, however late.
			clk.Advance(time.Hour)
			if got, err := m.Get(waitCtx(t), req.ID); err != nil || got.State != tc.res.State {
				t.Fatalf("Get an hour later = %+v, %v", got, err)
			}
			out, err := begin(t, m, req)
			if err != nil {
				t.Fatal(err)
			}
			if tc.replay && (out.Decision != resume.Replay || out.Record.Events != tc.res.Events || out.Record.Status != tc.res.Status) {
				t.Fatalf("Begin after Finish = %s %+v, want replay of the result", out.Decision, out.Record)
			}
			if !tc.replay && (out.Decision != resume.Start || out.Record.Generation != 2) {
				t.Fatalf("Begin after failing = %s gen %d, want start gen 2", out.Decision, out.Record.Generation)
			}
		})
	}
}

func TestDecisionString(t *testing.T) {
	for d, want := range map[resume.Decision]string{resume.Start: "start", resume.Attach: "attach", resume.Replay: "replay", 0: "unknown"} {
		if got := d.String(); got != want {
			t.Errorf("Decision(%d).String() = %q, want %q", int(d), got, want)
		}
	}
}

// ExampleManager_Begin shows two requests with one key: the first starts a
// generation, the second attaches to it; once finished, a third replays.
func ExampleManager_Begin() {
	dir, err := os.MkdirTemp("", "resume-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	e, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Shutdown()
	nc, err := e.Connect("example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	ctx := context.Background()
	store, err := journal.Open(ctx, nc, journal.Config{Memory: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := resume.New(resume.Config{Store: store, Owner: "instance-1"})
	if err != nil {
		fmt.Println(err)
		return
	}

	key, _ := resume.ParseKey(`"order-42"`)
	body := []byte(`{"model":"m","stream":true}`)
	req := resume.Request{
		ID: resume.StreamID("tenant-a", key), Key: key, Path: "/v1/chat/completions",
		Fingerprint: resume.Fingerprint("/v1/chat/completions", body), Stream: true,
	}
	first, err := m.Begin(ctx, req)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(first.Decision, first.Record.Generation)
	second, _ := m.Begin(ctx, req)
	fmt.Println(second.Decision, second.Record.Generation)

	first.Lease.SetEvents(3)
	if err := first.Lease.Finish(ctx, resume.Result{State: resume.Completed, Events: 3, Status: 200}); err != nil {
		fmt.Println(err)
		return
	}
	third, _ := m.Begin(ctx, req)
	fmt.Println(third.Decision, third.Record.Generation, third.Record.Events)
	// Output:
	// start 1
	// attach 1
	// replay 1 3
}

var (
	salvagedUsage = cost.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}
	salvagedCost  = 1.5
)

// salvager is a resume.Salvager of functions.
type salvager struct {
	salvage  func(resume.Record) (resume.Result, bool, error)
	salvaged func(resume.Record)
}

func (s salvager) Salvage(_ context.Context, _ string, rec resume.Record) (resume.Result, bool, error) {
	return s.salvage(rec)
}

func (s salvager) Salvaged(_ context.Context, _ string, rec resume.Record, _ uint64) { s.salvaged(rec) }

// TestSalvage: an expired generation is asked about before it is declared
// lost. Salvaged, Get records it completed and Begin replays it; not
// salvaged, it is owner_lost as before; a failing salvage changes nothing.
func TestSalvage(t *testing.T) {
	store := newStore(t)
	errJournal := errors.New("journal down")
	type answer struct {
		res resume.Result
		ok  bool
		err error
	}
	for _, tc := range []struct {
		name  string
		ans   answer
		state resume.State
		code  string
	}{
		{"whole", answer{res: resume.Result{State: resume.Completed, Events: 7, Status: 200, ContentType: "text/event-stream", Usage: &salvagedUsage, Cost: &salvagedCost}, ok: true}, resume.Completed, ""},
		{"incomplete", answer{}, resume.Failed, resume.OwnerLost},
		{"journal unreachable", answer{err: errJournal}, resume.InProgress, ""},
	} {
		for _, via := range []string{"Get", "Begin"} {
			t.Run(tc.name+" via "+via, func(t *testing.T) {
				clk := newClock()
				var asked []resume.Record
				var told []resume.Record
				m := newManagerWith(t, resume.Config{Store: store, Owner: "owner-a", Now: clk.Now, Salvager: salvager{
					salvage: func(rec resume.Record) (resume.Result, bool, error) {
						asked = append(asked, rec)
						return tc.ans.res, tc.ans.ok, tc.ans.err
					},
					salvaged: func(rec resume.Record) { told = append(told, rec) },
				}})
				req := request("salvage-"+tc.name+"-"+via, "body")
				mustStart(t, m, req)
				if _, err := m.Get(waitCtx(t), req.ID); err != nil || len(asked) != 0 {
					t.Fatalf("Get with a live lease: %v; Salvage asked %d times, want 0", err, len(asked))
				}
				lapse(t, clk, m.Lease()+time.Millisecond, m)
				var out resume.Outcome
				var err error
				if via == "Get" {
					out.Record, err = m.Get(waitCtx(t), req.ID)
				} else {
					out, err = begin(t, m, req)
				}
				if len(asked) != 1 || asked[0].Generation != 1 || asked[0].State != resume.InProgress {
					t.Fatalf("Salvage asked about %+v, want generation 1 in progress once", asked)
				}
				if tc.ans.err != nil {
					if !errors.Is(err, errJournal) {
						t.Fatalf("%s: %v, want the salvage error", via, err)
					}
					if s := stored(t, store, req.ID); s.State != resume.InProgress || s.Generation != 1 {
						t.Fatalf("stored after a failed salvage = %+v, want unchanged", s)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				s := stored(t, store, req.ID)
				switch {
				case via == "Begin" && tc.ans.ok:
					if out.Decision != resume.Replay || out.Record.State != resume.Completed || out.Record.Events != 7 {
						t.Fatalf("Begin = %s %+v, want replay of the salvaged generation", out.Decision, out.Record)
					}
				case via == "Begin":
					if out.Decision != resume.Start || out.Record.Generation != 2 {
						t.Fatalf("Begin = %s gen %d, want start of generation 2", out.Decision, out.Record.Generation)
					}
					return
				default:
					if out.Record.State != tc.state || out.Record.Error != tc.code {
						t.Fatalf("Get = %+v, want %s %q", out.Record, tc.state, tc.code)
					}
				}
				if s.State != tc.state || s.Error != tc.code || s.Generation != 1 {
					t.Fatalf("stored = %+v, want %s %q generation 1", s, tc.state, tc.code)
				}
				if tc.ans.ok && (s.Events != 7 || s.Status != 200 || s.ContentType != "text/event-stream" || s.Owner != "" || !s.LeaseUntil.IsZero()) {
					t.Fatalf("stored salvaged record = %+v", s)
				}
				if !tc.ans.ok {
					if len(told) != 0 {
						t.Fatalf("Salvaged told of %+v, want nothing", told)
					}
					return
				}
				// Billed as Salvage priced it, once, and told once.
				if s.Usage == nil || *s.Usage != salvagedUsage || s.Cost == nil || *s.Cost != salvagedCost ||
					s.Billed == nil || s.Billed.Usage != salvagedUsage || s.Billed.Generations != 1 || *s.Billed.Cost != salvagedCost {
					t.Fatalf("stored salvaged record usage %+v cost %v billed %+v, want %+v costing %v", s.Usage, s.Cost, s.Billed, salvagedUsage, salvagedCost)
				}
				if len(told) != 1 || told[0].State != resume.Completed || told[0].Billed == nil {
					t.Fatalf("Salvaged told of %+v, want the completed record once", told)
				}
			})
		}
	}
}

// lossyStore applies writes but, while lose is set, reports them failed,
// as when a write's answer is lost in a NATS failover.
type lossyStore struct {
	*journal.Journal
	lose atomic.Bool
	down atomic.Int32 // updates that fail without being applied
	// meanwhile, if set, runs while an update fails unapplied (another
	// instance writing the record during the outage).
	meanwhile func()
}

var errAnswerLost = errors.New("answer lost")

func (s *lossyStore) Create(ctx context.Context, id string, value []byte) (uint64, bool, error) {
	rev, created, err := s.Journal.Create(ctx, id, value)
	if created && s.lose.Load() {
		return 0, false, errAnswerLost
	}
	return rev, created, err
}

func (s *lossyStore) Update(ctx context.Context, id string, value []byte, rev uint64) (uint64, bool, error) {
	if s.down.Add(-1) >= 0 {
		if s.meanwhile != nil {
			s.meanwhile()
		}
		return 0, false, errAnswerLost
	}
	nrev, updated, err := s.Journal.Update(ctx, id, value, rev)
	if updated && s.lose.Load() {
		return 0, false, errAnswerLost
	}
	return nrev, updated, err
}

// TestBeginSettlesLostAnswers: a record write that was applied though its
// answer was lost is recognised by its attempt id: Begin starts (with the
// right revision, so the lease keeps renewing) instead of failing or
// attaching to a generation nobody runs.
func TestBeginSettlesLostAnswers(t *testing.T) {
	store := &lossyStore{Journal: newStore(t)}
	clk := newClock()
	m, err := resume.New(resume.Config{Store: store, Owner: "owner-a", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	req := request("settle", "body")
	store.lose.Store(true)
	l := mustStart(t, m, req) // the create's answer was lost
	store.lose.Store(false)
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Failed, Error: "x"}); err != nil {
		t.Fatalf("Finish with the settled revision: %v", err)
	}
	store.lose.Store(true)
	out, err := begin(t, m, req) // the regeneration's update answer was lost
	store.lose.Store(false)
	if err != nil || out.Decision != resume.Start || out.Record.Generation != 2 {
		t.Fatalf("Begin after a failed generation = %s gen %d, %v; want start of generation 2", out.Decision, out.Record.Generation, err)
	}
	if err := out.Lease.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 3}); err != nil {
		t.Fatalf("Finish generation 2: %v", err)
	}
	if s := stored(t, store.Journal, req.ID); s.State != resume.Completed || s.Generation != 2 {
		t.Fatalf("stored = %+v", s)
	}
	// Another writer's record is not mistaken for ours.
	other := newManager(t, store.Journal, "owner-b", 0, clk.Now)
	req2 := request("settle-other", "body")
	mustStart(t, other, req2)
	store.lose.Store(true)
	out, err = begin(t, m, req2)
	store.lose.Store(false)
	if err != nil || out.Decision != resume.Attach {
		t.Fatalf("Begin on another owner's key = %s, %v; want attach", out.Decision, err)
	}
}

// TestBeginAfterUnansweredUpdate: a regeneration's update fails unapplied
// while another instance regenerates the key: Begin attaches to that
// generation instead of failing with a conflict.
func TestBeginAfterUnansweredUpdate(t *testing.T) {
	store := &lossyStore{Journal: newStore(t)}
	clk := newClock()
	m, err := resume.New(resume.Config{Store: store, Owner: "owner-a", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	other := newManager(t, store.Journal, "owner-b", 0, clk.Now)
	req := request("unanswered", "body")
	if err := mustStart(t, m, req).Finish(waitCtx(t), resume.Result{State: resume.Failed, Error: "x"}); err != nil {
		t.Fatal(err)
	}
	var theirs resume.Outcome
	store.meanwhile = func() { theirs, _ = begin(t, other, req) }
	store.down.Store(1)
	out, err := begin(t, m, req)
	if theirs.Decision != resume.Start || theirs.Record.Generation != 2 {
		t.Fatalf("the other instance's Begin = %s gen %d", theirs.Decision, theirs.Record.Generation)
	}
	if err != nil || out.Decision != resume.Attach || out.Record.Generation != 2 || out.Record.Owner != "owner-b" {
		t.Fatalf("Begin = %s gen %d owner %q, %v; want attach to owner-b's generation 2", out.Decision, out.Record.Generation, out.Record.Owner, err)
	}
}

// TestFinishThroughFailover: Finish asks a store that does not answer
// again until its context ends, and recognises its own update whose
// answer was lost; a second Finish is still fenced.
func TestFinishThroughFailover(t *testing.T) {
	store := &lossyStore{Journal: newStore(t)}
	m, err := resume.New(resume.Config{Store: store, Owner: "owner-a", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	req := request("finish-down", "body")
	l := mustStart(t, m, req)
	store.down.Store(3) // three tries fail, unapplied
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 4}); err != nil {
		t.Fatalf("Finish through 3 failed updates: %v", err)
	}
	if s := stored(t, store.Journal, req.ID); s.State != resume.Completed || s.Events != 4 {
		t.Fatalf("stored = %+v, want completed with 4 events", s)
	}

	req = request("finish-lost", "body")
	l = mustStart(t, m, req)
	store.lose.Store(true) // applied, answer lost: the retry meets a finished record
	err = l.Finish(waitCtx(t), resume.Result{State: resume.Failed, Error: "upstream_interrupted"})
	store.lose.Store(false)
	if err != nil {
		t.Fatalf("Finish whose answer was lost: %v", err)
	}
	if s := stored(t, store.Journal, req.ID); s.State != resume.Failed || s.Error != "upstream_interrupted" {
		t.Fatalf("stored = %+v", s)
	}
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed}); !errors.Is(err, resume.ErrFenced) {
		t.Fatalf("second Finish: %v, want ErrFenced", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	l = mustStart(t, m, request("finish-never", "body"))
	store.down.Store(1 << 20)
	defer store.down.Store(0)
	if err := l.Finish(ctx, resume.Result{State: resume.Completed}); !errors.Is(err, errAnswerLost) {
		t.Fatalf("Finish against a store that never answers: %v, want the store's error once ctx ends", err)
	}
}

// flakyStore is a Store that fails every operation while down is set.
type flakyStore struct {
	resume.Store
	down atomic.Bool
}

var errStoreDown = errors.New("store down")

func (s *flakyStore) Get(ctx context.Context, id string) ([]byte, uint64, bool, error) {
	if s.down.Load() {
		return nil, 0, false, errStoreDown
	}
	return s.Store.Get(ctx, id)
}

// TestLapseNeedsContact: a lease that ran out by the clock is lapsed only
// for an instance that saw the store answer for a whole lease since — a
// clock runs while nobody can write (a NATS pause), and the owner renews
// once the store is back. An instance that just started looking, or whose
// store failed, or that looked nowhere for a while, attaches instead of
// taking over; after watching a whole lease it takes over.
func TestLapseNeedsContact(t *testing.T) {
	const lease = 40 * time.Second
	store := newStore(t)
	for _, tc := range []struct {
		name      string
		interrupt func(clk *clock, fs *flakyStore, m *resume.Manager)
	}{
		{"fresh observer", func(*clock, *flakyStore, *resume.Manager) {}},
		{"after a store failure", func(clk *clock, fs *flakyStore, m *resume.Manager) {
			fs.down.Store(true)
			_, _ = m.Get(waitCtx(t), resume.StreamID("tenant", "probe"))
			fs.down.Store(false)
		}},
		{"after a gap nobody looked", func(clk *clock, fs *flakyStore, m *resume.Manager) { clk.Advance(lease) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			owner := newManager(t, store, "owner-a", lease, clk.Now)
			fs := &flakyStore{Store: store}
			m, err := resume.New(resume.Config{Store: fs, Owner: "owner-b", Lease: lease, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			req := request(t.Name(), "body")
			mustStart(t, owner, req)
			if tc.name != "fresh observer" {
				lapse(t, clk, lease, m) // in contact all along
			}
			clk.Advance(2 * lease) // the lease ran out by the clock, while nobody here looked
			tc.interrupt(clk, fs, m)
			out, err := begin(t, m, req)
			if err != nil || out.Decision != resume.Attach || out.Record.Generation != 1 {
				t.Fatalf("Begin without a lease of contact = %s gen %d, %v; want attach gen 1", out.Decision, out.Record.Generation, err)
			}
			if rec, err := m.Get(waitCtx(t), req.ID); err != nil || rec.State != resume.InProgress {
				t.Fatalf("Get without a lease of contact = %+v, %v; want in progress", rec, err)
			}
			lapse(t, clk, lease, m)
			out, err = begin(t, m, req)
			if err != nil || out.Decision != resume.Start || out.Record.Generation != 2 {
				t.Fatalf("Begin after a lease of contact = %s gen %d, %v; want start gen 2", out.Decision, out.Record.Generation, err)
			}
		})
	}
}

// TestLeaseSurvivesStoreOutage: an owner whose renewals fail for several
// leases (the store away) keeps its lease, and renews once it is back.
func TestLeaseSurvivesStoreOutage(t *testing.T) {
	const lease = 60 * time.Millisecond
	store := newStore(t)
	fs := &flakyUpdates{Store: store}
	m, err := resume.New(resume.Config{Store: fs, Owner: "owner-a", Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	req := request("outage", "body")
	l := mustStart(t, m, req)
	fs.down.Store(true)
	select {
	case <-l.Lost():
		t.Fatal("the lease was lost while the store was away")
	case <-time.After(5 * lease):
	}
	fs.down.Store(false)
	before := stored(t, store, req.ID).LeaseUntil
	renewed := func() bool { return stored(t, store, req.ID).LeaseUntil.After(before) }
	deadline := time.Now().Add(waitTimeout)
	for !renewed() {
		if time.Now().After(deadline) {
			t.Fatal("the lease was not renewed once the store was back")
		}
		time.Sleep(lease / 4) // polling the store; bounded above
	}
	select {
	case <-l.Lost():
		t.Fatal("the lease was lost")
	default:
	}
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed}); err != nil {
		t.Fatalf("Finish after the outage: %v", err)
	}
}

// flakyUpdates is a Store whose updates fail while down is set.
type flakyUpdates struct {
	resume.Store
	down atomic.Bool
}

func (s *flakyUpdates) Update(ctx context.Context, id string, value []byte, rev uint64) (uint64, bool, error) {
	if s.down.Load() {
		return 0, false, errStoreDown
	}
	return s.Store.Update(ctx, id, value, rev)
}

// TestKept: a finished generation that Config.Kept says is no longer whole
// in the journal (the TTL removed its first events before its record) is
// gone: Get answers ErrNotFound, Begin starts a new generation — for any
// body, as for a new key. A kept one replays; Kept's errors count as kept.
func TestKept(t *testing.T) {
	store := newStore(t)
	errJournal := errors.New("journal down")
	for _, tc := range []struct {
		name    string
		kept    bool
		err     error
		wantGet error
		want    resume.Decision
	}{
		{"kept", true, nil, nil, resume.Replay},
		{"gone", false, nil, resume.ErrNotFound, resume.Start},
		{"journal unreachable", false, errJournal, nil, resume.Replay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked atomic.Int32
			m, err := resume.New(resume.Config{
				Store: store, Owner: "owner-a",
				Kept: func(_ context.Context, _ string, rec resume.Record) (bool, error) {
					if rec.State == resume.InProgress {
						t.Errorf("Kept asked about a generation in progress")
					}
					asked.Add(1)
					return tc.kept, tc.err
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			req := request("kept-"+tc.name, "body")
			l := mustStart(t, m, req)
			if _, err := m.Get(waitCtx(t), req.ID); err != nil || asked.Load() != 0 {
				t.Fatalf("Get in progress: %v; Kept asked %d times, want 0", err, asked.Load())
			}
			if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed, Events: 3, Status: 200}); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Get(waitCtx(t), req.ID); !errors.Is(err, tc.wantGet) {
				t.Fatalf("Get: %v, want %v", err, tc.wantGet)
			}
			other := request(req.Key, "another body")
			out, err := begin(t, m, other)
			switch {
			case tc.want == resume.Start && (err != nil || out.Decision != resume.Start || out.Record.Generation != 2 || out.Record.Fingerprint != other.Fingerprint):
				t.Fatalf("Begin with another body: %s %+v, %v; want generation 2 of it", out.Decision, out.Record, err)
			case tc.want == resume.Replay && !errors.Is(err, resume.ErrMismatch):
				t.Fatalf("Begin with another body: %s, %v; want a mismatch", out.Decision, err)
			}
			if tc.want == resume.Replay {
				if out, err := begin(t, m, req); err != nil || out.Decision != resume.Replay {
					t.Fatalf("Begin: %s, %v; want replay", out.Decision, err)
				}
			}
		})
	}
}

// TestLapseAfterLateRenewal: a renewal written before an outage and
// applied after it carries a lease already run out by the clock, yet shows
// its owner alive: an instance that saw the record change judges the lease
// from the change on, a whole lease later.
func TestLapseAfterLateRenewal(t *testing.T) {
	const lease = 40 * time.Second
	store := newStore(t)
	clk := newClock()
	owner := newManager(t, store, "owner-a", lease, clk.Now)
	m := newManager(t, store, "owner-b", lease, clk.Now)
	req := request("late-renewal", "body")
	mustStart(t, owner, req)
	if rec, err := m.Get(waitCtx(t), req.ID); err != nil || rec.State != resume.InProgress {
		t.Fatalf("Get of a live lease = %+v, %v", rec, err)
	}
	lapse(t, clk, 2*lease, m) // in contact, the lease run out by the clock
	// The owner's late renewal: the record changes, its lease still run out.
	val, rev, _, err := store.Get(waitCtx(t), req.ID)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(val, &rec); err != nil {
		t.Fatal(err)
	}
	rec["events"] = 7
	late, _ := json.Marshal(rec)
	if _, ok, err := store.Update(waitCtx(t), req.ID, late, rev); err != nil || !ok {
		t.Fatalf("the late renewal: %v, %v", ok, err)
	}
	lapse(t, clk, lease/2, m)
	if got, err := m.Get(waitCtx(t), req.ID); err != nil || got.State != resume.InProgress {
		t.Fatalf("Get half a lease after the record changed = %+v, %v; want in progress", got, err)
	}
	lapse(t, clk, lease, m)
	if got, err := m.Get(waitCtx(t), req.ID); err != nil || got.State != resume.Failed || got.Error != resume.OwnerLost {
		t.Fatalf("Get a lease after the record changed = %+v, %v; want failed owner_lost", got, err)
	}
}

// TestRecordTenantModel: a generation's record holds, from its start, its
// tenant's hash (never the tenant id) and its request's model — in the
// first generation and in a new one: what an instance that adopts or
// salvages it needs.
func TestRecordTenantModel(t *testing.T) {
	store := newStore(t)
	m := newManager(t, store, "owner-a", 0, nil)
	req := request("tenant-model", "body")
	req.Tenant, req.Model = "tenant-secret-id", "mock-1"
	l := mustStart(t, m, req)
	want := resume.TenantHash(req.Tenant)
	raw, _, _, err := store.Get(waitCtx(t), req.ID)
	if s := stored(t, store, req.ID); err != nil || s.Tenant != want || s.Model != "mock-1" || strings.Contains(string(raw), req.Tenant) {
		t.Fatalf("record tenant %q model %q, want %q and mock-1, never the tenant id", s.Tenant, s.Model, want)
	}
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Failed, Usage: &cost.Usage{PromptTokens: 2, CompletionTokens: 3}}); err != nil {
		t.Fatal(err)
	}
	req.Model = "mock-2"
	mustStart(t, m, req)
	if s := stored(t, store, req.ID); s.Generation != 2 || s.Tenant != want || s.Model != "mock-2" || s.Usage != nil {
		t.Fatalf("generation 2's record %+v, want tenant %q, model mock-2, no usage", s, want)
	}
}

// TestCallerKeptWhileRunning: the sealed caller a generation starts with
// is in its record while it runs (an adopter makes its upstream calls with
// it), is replaced by the next generation's, and is dropped when it ends.
func TestCallerKeptWhileRunning(t *testing.T) {
	store := newStore(t)
	clk := newClock()
	m := newManager(t, store, "owner-a", 0, clk.Now)
	req := request(t.Name(), "body")
	req.Caller = []byte("sealed-1")
	l := mustStart(t, m, req)
	if rec := stored(t, store, req.ID); string(rec.Caller) != "sealed-1" {
		t.Fatalf("running generation's record keeps caller %q, want sealed-1", rec.Caller)
	}
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Failed, Error: "upstream_error"}); err != nil {
		t.Fatal(err)
	}
	if rec := stored(t, store, req.ID); rec.Caller != nil {
		t.Fatalf("finished generation's record keeps caller %q", rec.Caller)
	}
	req.Caller = []byte("sealed-2")
	l = mustStart(t, m, req)
	if rec := stored(t, store, req.ID); rec.Generation != 2 || string(rec.Caller) != "sealed-2" {
		t.Fatalf("generation %d keeps caller %q, want generation 2's sealed-2", rec.Generation, rec.Caller)
	}
	if err := l.Finish(waitCtx(t), resume.Result{State: resume.Completed, Status: 200}); err != nil {
		t.Fatal(err)
	}
	if rec := stored(t, store, req.ID); rec.Caller != nil {
		t.Fatalf("completed record keeps caller %q", rec.Caller)
	}
}
