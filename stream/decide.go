package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// The POST decision: what a request to create a generation may do (start,
// attach, replay, resume, or be refused) and doing it. Keyless requests
// (keyless.go) and shedding (shed.go) are part of it; the answers are
// served as any reader's (serve.go).

// create serves POST of format proto: the body is forwarded untouched,
// reprise reads only whether it asks for a stream.
func (s *Server) create(proto engine.Protocol) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		who, err := s.caller(r)
		if err != nil {
			fail(w, r, authError(err))
			return
		}
		body, stream, apiErr := s.readCreate(w, r, proto)
		if apiErr != nil {
			fail(w, r, *apiErr)
			return
		}
		s.begin(w, r, who, proto, body, stream)
	}
}

// begin decides what a valid POST may do and does it. It claims the key
// the request is served under, refuses it while shedding (shed.go), then
// decides, starts, counts and answers, in that order.
func (s *Server) begin(w http.ResponseWriter, r *http.Request, who auth.Caller, proto engine.Protocol, body []byte, stream bool) {
	tenant := who.Tenant
	key, err := requestKey(r)
	if err != nil {
		fail(w, r, apierr.New(apierr.BadKey))
		return
	}
	cur, err := resume.ParsePosition(r.Header.Get("Last-Event-ID"))
	if err != nil {
		fail(w, r, apierr.New(apierr.BadCursor))
		return
	}
	if s.engine.Closing() {
		fail(w, r, apierr.New(apierr.ShuttingDown))
		return
	}
	model := modelOf(body)
	noteModel(r, model)
	if !who.AllowsModel(model) {
		fail(w, r, apierr.New(apierr.ModelNotAllowed))
		return
	}
	if !s.engine.Serves(r.URL.Path, model) {
		// Configuration, not a generation: no record for the key (a
		// duplicate gets the same answer), nothing for a retry to attach to.
		fail(w, r, apierr.New(apierr.NoUpstream))
		return
	}
	path := requestPath(r)
	fp := resume.Fingerprint(path, body)
	c := s.claim(r, tenant, key, proto, path, body, fp, stream)
	if s.shed(w, r, tenant, &c) {
		return
	}
	var fl *flight
	returned := false // the handler returned rather than panicked
	if c.kl != nil {
		// In flight from here: its retry, should it come now, waits for its
		// decision; as the handler ends, finishKeyless leaves its key behind
		// unless its result reached its client.
		var rc *receipt
		r, rc = withReceipt(r)
		fl = s.flights.add(c.kl, r, rc)
		defer func() { s.finishKeyless(w, r, fl, returned) }()
	}

	out, err := s.decide(r, tenant, &c, fp, resume.BytesFingerprint(path, body), stream, model)
	noteKey(r, c.served())
	if err != nil {
		s.failDecision(w, r, err)
		return
	}
	if c.fallback() {
		if s.serveFallback(w, r, tenant, c.kl, proto.(assembler), body) {
			s.withdraw(out)
			returned = true
			return
		}
		c.kl.renew() // the stream it fell back from has no result: a new request, on the key it was decided under
		noteKey(r, c.key)
	}
	if c.kl != nil && out.Decision == resume.Start && (r.Context().Err() != nil || clientClosed(r)) {
		// A keyless request whose client left while it was decided: nobody
		// waits for its generation, and nobody can reach it but a retry,
		// which starts the one it needs. (A client with a key may come back
		// for it: its generation runs.)
		s.withdraw(out)
		return
	}

	var t *engine.Tail
	if out.Decision == resume.Start {
		// Only a new generation spends: attaches, replays and resumes of
		// what the key already paid for are served over its budget.
		if until, over := s.overBudget(who); over {
			s.withdraw(out)
			s.metrics.KeyRefused(s.auth.Label(who.Name))
			fail(w, r, budgetExceeded(until))
			return
		}
		// Only a new generation takes one of the tenant's places; attaching
		// and replaying cost the upstream nothing.
		g := engine.Generation{
			Tenant: tenant, KeyName: who.Name, Key: c.key, Ref: journal.Ref{ID: c.id, Gen: out.Record.Generation}, Lease: out.Lease, Protocol: proto, Model: model,
			Stream: stream, Path: r.URL.Path, Query: r.URL.RawQuery, Body: body, Header: r.Header.Clone(),
		}
		if fl != nil {
			g.Reachable = fl.reachable // a keyless generation's retry finds it only through the index
		}
		if t, err = s.engine.Start(g); err != nil {
			fail(w, r, startError(err))
			return
		}
	}
	if fl != nil {
		// Decided: a retry may claim it before its handler ends; its
		// client gone, it is left behind at once.
		kl := c.kl
		s.flights.run(fl, func() { s.leaveBehind(kl) })
	}

	s.count(r, &c, out, cur)
	s.answer(w, r, tenant, c.key, c.id, out, t, cur)
	returned = true
}

// claim is the key a POST is decided under, resolved once: the client's
// Idempotency-Key, or a key made for a request that came without one
// (fresh). A keyless request whose retries are recognised (keyless.go) is
// decided on its fresh key while the key of the request it may retry is
// looked up; once the lookup settled, a retry moves to the key it claimed
// (settle). A fallback stays on its fresh key: it is answered from the
// stream it claimed (fallback.go), or, when that left no result, as a new
// request under its fresh key.
type claim struct {
	key   string
	id    string   // key's stream id, resume.StreamID(tenant, key)
	fresh bool     // key was made for this request: nothing is stored under it
	kl    *keyless // the keyless lookup; nil with a key, or when retries are not recognised
}

// claim resolves the key of a POST that sent key as its Idempotency-Key
// ("" for none), for a request of path (requestPath) and body of
// fingerprint fp. Without a key, a keyless lookup starts here.
func (s *Server) claim(r *http.Request, tenant, key string, proto engine.Protocol, path string, body []byte, fp string, stream bool) claim {
	if key != "" {
		return claim{key: key, id: resume.StreamID(tenant, key)}
	}
	c := claim{fresh: true}
	_, assembles := proto.(assembler)
	if c.kl = s.keyless(r, tenant, fp, resume.StreamlessFingerprint(path, body), stream, assembles); c.kl != nil {
		c.key = c.kl.key
	} else {
		c.key = resume.NewKey()
	}
	c.id = resume.StreamID(tenant, c.key)
	return c
}

// settle waits for a keyless request's lookup (only the first call waits)
// and reports whether it moved c to the key the request claimed: a
// retry's, not a fallback's.
func (c *claim) settle(tenant string) bool {
	if c.kl == nil || !c.kl.settle() || c.kl.fallback {
		return false
	}
	c.key, c.id, c.fresh = c.kl.key, resume.StreamID(tenant, c.kl.key), false
	return true
}

// retry reports whether the request is a keyless retry: of a request
// whose client left before its result, whose key it claimed.
func (c *claim) retry() bool { return c.kl != nil && c.kl.retry }

// fallback reports whether the request is a keyless fallback: a
// non-streamed retry of a streamed request (fallback.go).
func (c *claim) fallback() bool { return c.kl != nil && c.kl.fallback }

// served is the key the request is answered under: its key, or a
// fallback's, the key of the stream it falls back on.
func (c *claim) served() string {
	if c.fallback() {
		return c.kl.key
	}
	return c.key
}

// decide asks resume what a POST may do with c's key. A keyless request
// whose lookup has not settled is decided on its fresh key while its retry
// is looked up; if it turns out to be a retry, the fresh key is withdrawn
// and the request is decided again on the key it claimed (c moves to it).
func (s *Server) decide(r *http.Request, tenant string, c *claim, fp, bfp string, stream bool, model string) (resume.Outcome, error) {
	// The decision is not the client's to cut short: a record created for a
	// client that left meanwhile would otherwise name a generation nobody
	// runs (owner_lost once its lease ran out).
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), decisionTimeout)
	defer cancel()
	req := resume.Request{
		ID: c.id, Key: c.key, Path: r.URL.Path, Fingerprint: fp, BytesFingerprint: bfp,
		Stream: stream, Model: model, Tenant: tenant,
	}
	req.Caller = s.engine.SealCaller(req.ID, req.Path, r.Header)
	if c.kl != nil {
		req.Content = c.kl.cid
	}
	out, err := s.resume.Begin(ctx, req)
	if !c.settle(tenant) {
		// A fallback keeps its fresh key's decision: it is served from the
		// stream it claimed, or, if that left no result, as a new request.
		return out, err
	}
	if err == nil {
		s.withdraw(out)
	}
	req.Key, req.ID = c.key, c.id
	out, err = s.resume.Begin(ctx, req)
	if err != nil {
		s.leaveBehind(c.kl) // the claim is not lost with this request: its client's next try claims it
	}
	return out, err
}

// failDecision answers a POST whose decision failed with err.
func (s *Server) failDecision(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, resume.ErrMismatch) {
		s.metrics.Decision("mismatch")
		noteDecision(r, "reject")
		fail(w, r, apierr.New(apierr.Mismatch))
		return
	}
	s.metrics.Decision("unavailable")
	s.log.Error("resume decision failed", "err", err)
	fail(w, r, unavailable(err))
}

// count counts what a POST of claim c was decided (out), resuming at cur:
// the decision and duplicate metrics, the access log's decision, the
// timing of a generation it started (startedHere), and what a request
// served without a generation saved (saved.go: attach, replay, retry, or a
// resume with Last-Event-ID).
func (s *Server) count(r *http.Request, c *claim, out resume.Outcome, cur resume.Position) {
	retry := c.retry()
	s.metrics.Decision(out.Decision.String())
	if retry {
		s.metrics.Decision("retry")
	}
	if how := duplicateHow(out.Decision, retry); how != "" {
		s.metrics.Duplicate(how)
	}
	if out.Decision == resume.Start {
		startedHere(r)
	}
	if out.Decision != resume.Start && r.Header.Get("Last-Event-ID") != "" {
		noteDecision(r, "resume")
	} else {
		noteDecision(r, out.Decision.String())
	}
	if how := savedHow(out.Decision, retry, out.Record, cur); how != "" {
		s.saved(c.id, out.Record, how)
	}
}

// duplicateHow names how a request decided d was a suppressed duplicate
// (a keyless retry recognised as its first request's, whatever it then
// did), "" when it was none.
func duplicateHow(d resume.Decision, retry bool) string {
	switch {
	case d == resume.Start:
		return ""
	case retry:
		return metrics.HowRetry
	case d == resume.Attach:
		return metrics.HowAttach
	case d == resume.Replay:
		return metrics.HowReplay
	}
	return ""
}

// requestPath is what of r's URL the upstream gets and a key's fingerprint
// covers: its path, and its query when it has one (a pass-through's
// ?limit=, a gateway's ?api-version=), so that the same key with another
// query is another request.
func requestPath(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return r.URL.Path
	}
	return r.URL.Path + "?" + r.URL.RawQuery
}

// requestKey is r's Idempotency-Key, "" when it sent none (or an empty
// one). Two are refused like a malformed key (resume.ErrInvalidKey): which
// one the caller meant is unknowable, and a gateway on the way may have
// added the second.
func requestKey(r *http.Request) (string, error) {
	switch vs := r.Header.Values("Idempotency-Key"); {
	case len(vs) > 1:
		return "", resume.ErrInvalidKey
	case len(vs) == 0 || vs[0] == "":
		return "", nil
	default:
		return resume.ParseKey(vs[0])
	}
}

// modelOf is the model a request body names, "" when it names none.
func modelOf(body []byte) string {
	var v struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &v) // a body that is no JSON object names none
	return v.Model
}

// respondAsync reports whether the request asks, RFC 7240's way, not to
// wait for the answer.
func respondAsync(r *http.Request) bool {
	for _, v := range r.Header.Values("Prefer") {
		for p := range strings.SplitSeq(v, ",") {
			if name, _, _ := strings.Cut(strings.TrimSpace(p), ";"); strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

// readCreate validates a POST of format proto and returns its body and
// whether it asks for a stream.
func (s *Server) readCreate(w http.ResponseWriter, r *http.Request, proto engine.Protocol) ([]byte, bool, *apierr.Error) {
	fail := func(code string) ([]byte, bool, *apierr.Error) {
		e := apierr.New(code)
		return nil, false, &e
	}
	// application/json is required, not assumed: a cross-site form or an
	// untyped fetch (no CORS preflight) must not start a billable generation.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return fail(apierr.MediaType)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return fail(apierr.TooLarge)
	case err != nil:
		return fail(apierr.InvalidBody)
	case !json.Valid(body):
		return fail(apierr.InvalidJSON)
	}
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return fail(apierr.InvalidRequest)
	}
	stream, err := proto.Streams(body)
	if err != nil {
		e := apierr.New(apierr.InvalidRequest).WithMessage("request fields have the wrong type: " + err.Error())
		return nil, false, &e
	}
	return body, stream, nil
}

// decisionTimeout bounds Begin, which outlives the client's request.
const decisionTimeout = 30 * time.Second
