package stream

import (
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/journal"
)

// timed returns the wrapper that times the first event written to r's
// client: for a GET (a resume), from the request to it; for the request
// that started the generation, its time to first token. Other readers
// (attaches, replays) are not timed.
func (s *Server) timed(r *http.Request) func(eventWriter) eventWriter {
	l := lifecycleOf(r)
	var observe func(time.Duration)
	switch {
	case l == nil:
	case r.Method == http.MethodGet:
		observe = s.metrics.ResumeFirstEvent
	case l.started:
		observe = s.metrics.FirstToken
	}
	return func(out eventWriter) eventWriter {
		if observe == nil && (l == nil || l.flushed == nil) {
			return out
		}
		return &firstEvent{eventWriter: out, at: l.at, observe: observe, flushed: l.flushed}
	}
}

// firstEvent observes the time to the first event written through it, and
// runs flushed after the first flush.
type firstEvent struct {
	eventWriter
	at      time.Time
	observe func(time.Duration) // nil: not timed
	done    bool
	flushed func()
}

func (f *firstEvent) send(id string, ev journal.Event) error {
	err := f.eventWriter.send(id, ev)
	if err == nil && !f.done {
		f.done = true
		if f.observe != nil {
			f.observe(time.Since(f.at))
		}
	}
	return err
}

func (f *firstEvent) flush() error {
	err := f.eventWriter.flush()
	if err == nil && f.flushed != nil {
		then := f.flushed
		f.flushed = nil
		then()
	}
	return err
}
