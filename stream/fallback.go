package stream

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// The non-streamed fallback. Some clients, after a broken stream, send the
// same request again without "stream" (Claude Code does, unless
// CLAUDE_CODE_DISABLE_NONSTREAMING_FALLBACK is set). A keyless request that
// differs from a streamed one whose client left before its result only by
// its stream fields is that request's retry (resume.Manager.Claim): it waits
// (bounded) for the stream's generation and is answered the format's
// non-streamed answer assembled from the journal — no new generation. It
// may ask for fewer output tokens (Claude Code's fallback halves
// max_tokens): the stream's answer serves it if it is no longer than that.
// The reverse, a streamed retry of a non-streamed request that left, is a new
// request: a stream cannot be made of a stored answer's events.

// assembler is a format that can answer a non-streamed request from a
// completed streamed generation of it (engine.Assembler).
type assembler interface {
	Assemble(events []journal.Event, usage *cost.Usage) ([]byte, error)
}

// serveFallback answers a non-streamed retry of the streamed request kl
// claimed, under that request's key, with its generation's answer
// assembled. It reports false, having written nothing, when that
// generation left no result (it failed or was cancelled): the request is
// then a new one.
func (s *Server) serveFallback(w http.ResponseWriter, r *http.Request, tenant string, kl *keyless, asm assembler, body []byte) bool {
	id := resume.StreamID(tenant, kl.key)
	rec, err := s.resume.Get(r.Context(), id)
	if err != nil {
		fail(w, r, apierr.New(apierr.Unavailable))
		return true
	}
	h := w.Header()
	h.Set("Idempotency-Key", kl.key)
	h.Set("Location", s.location(tenant, kl.key))
	h.Set("Reprise-Attempts", "0")
	if rec.State == resume.InProgress {
		if rec, err = s.awaitEnd(r.Context(), id, rec, s.cfg.AttachWait); err != nil {
			if r.Context().Err() == nil {
				failFor(w, rec, apierr.New(apierr.InProgress))
			}
			return true
		}
	}
	if rec.State != resume.Completed {
		return false
	}
	if limit := resume.MaxOutputTokens(body); limit > 0 && rec.Usage != nil && uint64(rec.Usage.CompletionTokens) > limit {
		return false // longer than this request allows: not its answer
	}
	s.metrics.Decision("retry")
	s.metrics.Duplicate(metrics.HowRetry)
	noteDecision(r, "retry")
	h.Set("Idempotent-Replayed", "true")
	if rec.Upstream != "" {
		h.Set("Reprise-Upstream", rec.Upstream)
	}
	if !streamed(rec) { // the upstream answered whole: that answer
		s.serveResultLimited(w, r, tenant, id, rec, s.serveResult)
		s.saved(id, rec, metrics.HowRetry)
		return true
	}
	answer, err := s.assembled(r.Context(), journal.Ref{ID: id, Gen: rec.Generation}, rec, asm)
	if err != nil {
		s.log.Warn("assembling a non-streamed answer from a stream failed", "key", kl.key, "err", err)
		failFor(w, rec, apierr.New(apierr.Unavailable))
		return true
	}
	h.Set("Content-Length", strconv.Itoa(len(answer)))
	wroteAnswer(r.Context())
	writeRaw(w, http.StatusOK, "application/json", answer)
	s.saved(id, rec, metrics.HowRetry)
	return true
}

// awaitEnd waits, up to wait, for the generation of the record rec (of
// stream id) to end, and returns its record then; an error when it still
// runs (or the record could not be read).
func (s *Server) awaitEnd(ctx context.Context, id string, rec resume.Record, wait time.Duration) (resume.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for rec.State == resume.InProgress {
		select {
		case <-ctx.Done():
			return rec, ctx.Err()
		case <-poll.C:
		}
		next, err := s.resume.Get(ctx, id)
		if err != nil {
			return rec, err
		}
		rec = next
	}
	return rec, nil
}

// assembled reads ref's completed stream from the journal and assembles
// its non-streamed answer.
func (s *Server) assembled(ctx context.Context, ref journal.Ref, rec resume.Record, asm assembler) ([]byte, error) {
	rd, err := s.journal.Read(ctx, ref, 0, 0)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var events []journal.Event
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ev, err := rd.Next(rctx)
		cancel()
		if err != nil {
			return nil, err
		}
		if ev.IsEnd() {
			break
		}
		events = append(events, journal.Event{Type: ev.Type, Data: append([]byte(nil), ev.Data...)})
	}
	return asm.Assemble(events, rec.Usage)
}
