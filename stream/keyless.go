package stream

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/reprise-dev/reprise/resume"
)

// Keyless retries (see resume/keyless.go for the rule). A POST without an
// Idempotency-Key gets a fresh key, and meanwhile — concurrently with the
// record's create, so a first keyless request waits for no extra round
// trip — its content's entry in the keyless index is asked for a key a
// client of the same content left behind. When there is one, the request is
// that request's retry: the fresh key is withdrawn before anything started
// on it, and the request attaches to or replays the key it claimed. A
// keyless request whose client leaves before its result leaves its key
// behind in turn.

// KeylessRetryHeader turns the recognition off for one request: with the
// value "off", a keyless request is new, whatever was sent before, and no
// later request is taken for its retry.
const KeylessRetryHeader = "Reprise-Keyless-Retry"

// sessionHeaders are the client session identifiers that narrow a keyless
// match to the session that sent the request (Claude Code's, Codex's): a
// request of another session, or of none, is not its retry.
var sessionHeaders = []string{"X-Claude-Code-Session-Id", "Session-Id", "Session_id"}

// keyless is what a keyless request knows of its key while it is decided.
type keyless struct {
	cid    string // the content's ContentID
	fp     string // the request's Fingerprint
	stream bool   // it asks for an event stream
	// key is the key the request is served under: a fresh one, or, once
	// settled, the key it claimed.
	key string
	// retry: key was claimed, the request is a retry of one whose client
	// left before its result.
	retry bool
	// fallback: the retry is a non-streamed request of a streamed one
	// (a client's fallback after a broken stream): it is answered the
	// format's non-streamed answer assembled from the stream (fallback.go).
	fallback bool

	fresh   string         // the fresh key it got first
	done    chan struct{}  // closed once the claim answered
	claimed resume.Leaving // the request claimed (Key "" for none); read after done
	settled bool
	// leftAt is when the keyless index stored what the request left
	// behind (unix ns; 0: not stored): from then on its retry finds it.
	leftAt atomic.Int64
}

// keyless starts deciding the key of a request that came without one: of
// fingerprint fp and streamless fingerprint sfp, streamed or not; assembles
// says its format can answer a non-streamed retry of a streamed request.
// It returns nil when retries are not recognised for it (the window is
// off, or the request said so): then it gets a fresh key, and nothing is
// remembered of it.
func (s *Server) keyless(r *http.Request, tenant, fp, sfp string, stream, assembles bool) *keyless {
	if s.cfg.KeylessRetryWindow <= 0 || strings.EqualFold(strings.TrimSpace(r.Header.Get(KeylessRetryHeader)), "off") {
		return nil
	}
	k := &keyless{cid: resume.ContentID(tenant, session(r), sfp), fp: fp, stream: stream, key: resume.NewKey(), done: make(chan struct{})}
	k.fresh = k.key
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), decisionTimeout)
	go func() {
		defer cancel()
		defer close(k.done)
		// One in flight here whose client is gone first; then the index,
		// which holds the others (once left behind, a request is in flight
		// no more: in this order none falls between the two looks).
		left, ok, _ := s.flights.take(ctx, k, assembles)
		var err error
		if !ok {
			left, ok, err = s.resume.Claim(ctx, k.cid, fp, stream, assembles, s.cfg.KeylessRetryWindow)
		}
		switch {
		case err != nil:
			s.log.Warn("looking up a keyless request's retry failed; it generates afresh", "err", err)
		case ok:
			k.claimed = left
		}
	}()
	return k
}

// settle waits for the claim and reports whether it switched the request to
// the key it claimed. Only the first call waits.
func (k *keyless) settle() bool {
	if k.settled {
		return false
	}
	k.settled = true
	<-k.done
	if k.claimed.Key == "" {
		return false
	}
	k.key, k.retry = k.claimed.Key, true
	k.fallback = k.claimed.Stream && !k.stream
	return true
}

// renew makes a fallback whose stream left no result a new request, on
// the fresh key it got first.
func (k *keyless) renew() {
	k.key, k.retry, k.fallback = k.fresh, false, false
}

// leaving is what the request leaves behind when its client leaves before
// its result: itself, or, a retry, the request it claimed (given back).
func (k *keyless) leaving() resume.Leaving {
	if k.retry {
		return k.claimed
	}
	return resume.Leaving{Key: k.key, Fingerprint: k.fp, Stream: k.stream}
}

// session is the client's session identifier, "" when it sent none.
func session(r *http.Request) string {
	var b strings.Builder
	for _, h := range sessionHeaders {
		if v := r.Header.Get(h); v != "" {
			b.WriteString(h)
			b.WriteByte('=')
			b.WriteString(v)
			b.WriteByte(0)
		}
	}
	return b.String()
}

// withdraw gives back a fresh key's generation that the request decided
// not to run: its record was created, nothing was started under it, and
// nobody knows its key. It ends cancelled, off the request's path.
func (s *Server) withdraw(out resume.Outcome) {
	if out.Lease == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), decisionTimeout)
		defer cancel()
		if err := out.Lease.Finish(ctx, resume.Result{State: resume.Cancelled}); err != nil {
			s.log.Debug("withdrawing an unused key failed", "err", err)
		}
	}()
}

// leaveBehind records, for a keyless request whose client left before its
// result, that its key is there to be claimed by its retry.
func (s *Server) leaveBehind(k *keyless) {
	ctx, cancel := context.WithTimeout(context.Background(), decisionTimeout)
	defer cancel()
	if err := s.resume.Left(ctx, k.cid, k.leaving(), s.cfg.KeylessRetryWindow); err != nil {
		s.log.Warn("remembering a keyless request whose client left failed; its retry will generate again", "err", err)
		return
	}
	k.leftAt.Store(time.Now().UnixNano())
	s.metrics.KeylessLeft()
}

// receipt is what a keyless request's handler learns of its answer: whether
// the generation's answer was written — an event stream to its end, or a
// whole answer — rather than an error of reprise's own (409 in progress, 429
// too many readers, 503), and then whether it reached its client: on
// Linux, over HTTP/1, once its client's TCP acknowledged its last byte
// (received.go). It rides in the request's context.
type receipt struct {
	streamed bool        // the answer is an event stream
	got      atomic.Bool // the generation's answer was written (a stream to its end); read by retries (flights)
	// ended is set once the handler ended with its answer written and its
	// client there: the verdict comes once its client's TCP acknowledged
	// the answer, or could not.
	ended atomic.Bool
	// verdict is closed once it is known whether the answer reached its
	// client: received says.
	verdict  chan struct{}
	received bool // written before verdict is closed
}

// newReceipt returns a receipt of an answer not written yet.
func newReceipt() *receipt { return &receipt{verdict: make(chan struct{})} }

// decide tells the receipt's verdict. Called once, as the handler ends or,
// when the client's TCP is asked, once it answered.
func (rc *receipt) decide(received bool) {
	rc.received = received
	close(rc.verdict)
}

type receiptKey struct{}

// withReceipt returns r carrying a fresh receipt.
func withReceipt(r *http.Request) (*http.Request, *receipt) {
	rc := newReceipt()
	return r.WithContext(context.WithValue(r.Context(), receiptKey{}, rc)), rc
}

// streaming notes that the request's answer is an event stream, which only
// its end delivers.
func streaming(ctx context.Context) {
	if rc, ok := ctx.Value(receiptKey{}).(*receipt); ok {
		rc.streamed = true
	}
}

// wroteAnswer notes, for a keyless request's own answer, that the
// generation's whole answer (not an event stream) is being written to it.
func wroteAnswer(ctx context.Context) {
	if rc, ok := ctx.Value(receiptKey{}).(*receipt); ok && !rc.streamed {
		rc.got.Store(true)
	}
}

// gotResult is told that a reader in ctx was written rec's generation to its
// end. For a keyless request's own answer that is its receipt; any other
// reader of a keyless key (a resume, the Location) received the result the
// request's client left without, and the index hears so before the reader's
// response ends: a request the client sends once it has its result is new.
func (s *Server) gotResult(ctx context.Context, rec *resume.Record) {
	if rc, ok := ctx.Value(receiptKey{}).(*receipt); ok {
		rc.got.Store(true)
		return
	}
	if rec.Content == "" || s.cfg.KeylessRetryWindow <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receivedTimeout)
	defer cancel()
	if err := s.resume.Received(ctx, rec.Content, rec.Key); err != nil {
		s.log.Warn("telling the keyless index a result was received failed; the same request may replay it", "err", err)
	}
}

// receivedTimeout bounds the keyless index's update by a reader that
// received a result.
const receivedTimeout = 5 * time.Second

// delivered reports whether a keyless request's result was handed to its
// client: an event stream written to its end, or the generation's whole
// answer written by a handler that returned with its client still there —
// and, either way, a connection its client did not reset (clientReset).
// Whether it reached the client is then up to its TCP (received.go). An
// error of reprise's own is no result: a retry that got one keeps nothing
// of the key it claimed, and its client's next try claims it again.
func (rc *receipt) delivered(r *http.Request, returned bool) bool {
	if rc.streamed {
		return rc.got.Load() && !clientReset(r)
	}
	return returned && rc.got.Load() && r.Context().Err() == nil && !clientReset(r)
}
