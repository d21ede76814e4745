package stream

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/internal/metrics"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// progressiveHead is the head of rec's generation when it runs on this
// instance and its upstream answered with media journaled as it arrives
// (raw audio): its readers follow the tail.
func (s *Server) progressiveHead(id string, rec resume.Record) (*engine.Tail, *engine.Head) {
	if rec.State != resume.InProgress {
		return nil, nil
	}
	t := s.engine.Tail(journal.Ref{ID: id, Gen: rec.Generation})
	if t == nil {
		return nil, nil
	}
	if head, ok := t.Answered(); ok && head.Progressive {
		return t, head
	}
	return nil, nil
}

// serveMedia answers with a progressive answer's body as the tail holds
// it, then live until its end. With ranged (a GET of the Location), one
// Range is served as 206 from its first byte, then live — `curl -C -` and
// an <audio> element resume mid-sentence while the audio is still being
// generated. The size is the upstream's Content-Length; without one the
// Range is ignored and the whole body sent (RFC 9110 allows it). A body
// that ends without its result (the upstream broke) ends the response
// broken, never complete.
func (s *Server) serveMedia(w http.ResponseWriter, r *http.Request, rec resume.Record, t *engine.Tail, head *engine.Head, ranged bool) {
	h := w.Header()
	status := head.Status
	start, end := int64(0), int64(-1) // end: exclusive; -1 unknown
	if head.Length >= 0 {
		end = head.Length
		h.Set("Accept-Ranges", "bytes")
		if ranged {
			a, b, partial, err := parseRange(r.Header.Get("Range"), head.Length)
			switch {
			case errors.Is(err, errRangeUnsatisfiable):
				h.Set("Content-Range", "bytes */"+strconv.FormatInt(head.Length, 10))
				failFor(w, rec, apierr.New(apierr.Unsatisfiable))
				return
			case err != nil:
				failFor(w, rec, apierr.New(apierr.BadRange))
				return
			case partial:
				s.metrics.Resume(metrics.TransportRange)
				start, end, status = a, b, http.StatusPartialContent
				h.Set("Content-Range", "bytes "+strconv.FormatInt(a, 10)+"-"+strconv.FormatInt(b-1, 10)+"/"+strconv.FormatInt(head.Length, 10))
			}
		}
		h.Set("Content-Length", strconv.FormatInt(end-start, 10))
	}
	h.Set("Content-Type", head.ContentType)
	wroteAnswer(r.Context())
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	write := func(b []byte) error {
		if s.cfg.WriteTimeout > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	var after uint64 // the tail's offset read so far
	var pos int64    // body bytes before the next chunk
	for {
		evs, changed := t.Since(after)
		for _, ev := range evs {
			after = ev.Offset
			switch {
			case ev.End == journal.EndCompleted:
				return
			case ev.IsEnd() || ev.Type == engine.TypeError:
				panic(http.ErrAbortHandler) // no result: a broken response, not a short one
			case ev.Type != engine.TypeBody:
				continue
			}
			lo, hi := max(start-pos, 0), int64(len(ev.Data))
			if end >= 0 {
				hi = min(hi, end-pos)
			}
			pos += int64(len(ev.Data))
			if lo < hi {
				if err := write(ev.Data[lo:hi]); err != nil {
					return // the client left
				}
			}
			if end >= 0 && end < head.Length && pos >= end {
				return // a range that ends before the body does
			}
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		}
	}
}
