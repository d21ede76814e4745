package stream

import (
	"context"
	"time"

	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/resume"
)

// savedTimeout bounds the record write that counts a saving.
const savedTimeout = 10 * time.Second

// saved counts a request of kind how (metrics.HowAttach, HowReplay,
// HowResume, HowRetry) that reprise served rec's generation of key id
// instead of the generation a naive client would have caused: one record
// CAS (resume.Manager.Save), off the request's cancellation and bounded.
// One served a completed generation is counted at once here, with that
// generation's usage, cost and call (reprise_generations_saved_total,
// reprise_tokens_saved_total, reprise_cost_saved_total,
// reprise_calls_saved_total); one served a
// running generation when it completes, by the instance that runs it
// (engine), and not at all if it fails or is cancelled. A failure costs
// only the count.
func (s *Server) saved(id string, rec resume.Record, how string) {
	ctx, cancel := context.WithTimeout(context.Background(), savedTimeout)
	defer cancel()
	got, now, err := s.resume.Save(ctx, id, rec.Generation, how)
	if err != nil {
		s.log.Warn("counting a request served without a generation failed", "how", how, "err", err)
		return
	}
	if !now {
		return
	}
	by, _ := cost.SavedOne(how) // Save refused any other kind
	_, entry, _ := s.prices.Lookup(got.Model)
	s.metrics.Saved(by, got.Usage, entry, got.Cost, got.Call)
}

// savedLater is saved on a goroutine of its own, for a request whose
// answer must not wait for the record write (a resume: its first event is
// the latency that matters). Close waits for it; once Close began, it runs
// here.
func (s *Server) savedLater(id string, rec resume.Record, how string) {
	if !s.detached.Track(func(context.Context) { s.saved(id, rec, how) }) {
		s.saved(id, rec, how)
	}
}

// savedHow names what a POST that resume decided d for saved: a resume
// when it carries a cursor (Last-Event-ID) that continues rec's
// generation — not one at the end of a completed generation, which is
// answered 204 with nothing —, else a recognised retry (retry), an attach
// or a replay; "" when it started a generation.
func savedHow(d resume.Decision, retry bool, rec resume.Record, cur resume.Position) string {
	switch {
	case d == resume.Start:
		return ""
	case cur.Gen != 0:
		if rec.State == resume.Completed && cur.Gen == rec.Generation && cur.Offset >= rec.Events {
			return ""
		}
		return metrics.HowResume
	case retry:
		return metrics.HowRetry
	case d == resume.Attach:
		return metrics.HowAttach
	case d == resume.Replay:
		return metrics.HowReplay
	}
	return ""
}
