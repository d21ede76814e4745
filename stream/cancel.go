package stream

import (
	"context"
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// handleCancel serves POST /v1/streams/{key}/cancel: stop is not
// disconnect. The running generation of the key — on whichever instance
// runs it — is cancelled at once: its upstream request ends, the key
// becomes cancelled (no result; readers get an error event cancelled) and
// may generate again. It answers 202 with the key's status once the
// generation ended (cancelled; or, after cancelWait, as it then is: poll
// the status), so that the same request sent after the answer generates
// anew; 409 when no generation of the key runs. Access is the reader's: the
// creator's credential or the Location's capability.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	key, err := resume.ParseKey(r.PathValue("key"))
	if err != nil {
		fail(w, r, apierr.New(apierr.BadKey))
		return
	}
	_, id, rec, ok := s.readerRecord(w, r, key, s.resume.Get) // the stored record: another instance may run it
	if !ok {
		return
	}
	if rec.State != resume.InProgress {
		failFor(w, rec, apierr.New(apierr.NotRunning).WithMessage("no generation of this key is running: it is "+string(rec.State)))
		return
	}
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	if !s.engine.Cancel(ref) { // it runs elsewhere: tell every instance
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := s.journal.Cancel(ctx, ref); err != nil {
			failFor(w, rec, apierr.New(apierr.Unavailable))
			return
		}
	}
	s.metrics.Decision("cancel")
	if done, err := s.awaitEnd(r.Context(), id, rec, cancelWait); err == nil {
		rec = done
	}
	s.writeStatus(w, http.StatusAccepted, s.live(r.Context(), id, rec)) // the record's own count moves only at heartbeats
}

// cancelWait bounds how long a cancel's answer waits for the generation to
// end: a client that sends the same request once the cancel answered must
// find the key cancelled, not attach to the generation being cancelled.
const cancelWait = 5 * time.Second
