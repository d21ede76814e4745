package stream

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/resume"
)

// Load shedding. A new generation is what adds load: its upstream stream
// is journaled event by event for as long as it runs. Past what the
// instance can journal, every running generation falls behind together —
// its appends wait, then time out (journal_failure), its readers see
// events later and later — so once the journal is behind by more than
// Settings.ShedLag, new generations are refused with 429 overloaded and a
// Retry-After, and the running ones get the capacity. What costs the
// upstream nothing and the journal little is served as ever: a duplicate
// that attaches to a running generation or replays a completed one, a
// resume, a reader. The signal is measured, not guessed: the age of the
// oldest event appended here that JetStream has not acknowledged
// (journal.Journal.Lag), which grows as soon as events arrive faster than
// they are stored, whatever the bottleneck (this process's CPU, the NATS
// server's, its disk, the network).

// lagEvery is how often the lag is measured at most: a look at every
// running writer, shared by the requests in between.
const lagEvery = 50 * time.Millisecond

// maxRetryAfter caps the Retry-After of a shed request, in seconds.
const maxRetryAfter = 30

// lagGauge is the journal's lag, measured at most every lagEvery.
type lagGauge struct {
	measure func() time.Duration

	mu   sync.Mutex
	at   time.Time
	last time.Duration
}

func (g *lagGauge) get() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now := time.Now(); now.Sub(g.at) >= lagEvery {
		g.last, g.at = g.measure(), now
	}
	return g.last
}

// shed answers r with 429 overloaded and reports true when the journal is
// behind and r would start a new generation: of a fresh key (one the proxy
// just made), or of a key whose record neither runs nor completed. A key
// whose generation runs or completed goes on to attach or replay. Only
// while the journal is behind is c settled (a keyless request's retry
// looked up, to know its key) and its record read.
func (s *Server) shed(w http.ResponseWriter, r *http.Request, tenant string, c *claim) bool {
	if s.cfg.ShedLag < 0 {
		return false
	}
	lag := s.lag.get()
	if lag <= s.cfg.ShedLag {
		return false
	}
	c.settle(tenant)
	if !c.fresh {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), decisionTimeout)
		rec, err := s.resume.Get(ctx, c.id)
		cancel()
		if err == nil && (rec.State == resume.InProgress || rec.State == resume.Completed) {
			return false
		}
	}
	s.metrics.Shed()
	noteDecision(r, "shed")
	e := apierr.New(apierr.Overloaded)
	e.RetryAfter = min(max(seconds(lag), e.RetryAfter), maxRetryAfter)
	fail(w, r, e)
	return true
}
