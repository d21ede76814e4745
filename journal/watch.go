package journal

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// Watching. A writer's shown events linger (Config.LingerAlone) while only
// the owner's readers follow its generation: they saw the events already,
// nobody else waits, and a live stream's tokens then share far fewer
// messages. An instance whose readers follow a generation from the journal
// (a topic, live.go) says so on watchPrefix when it joins and then every
// probeEvery; the writer that hears it lingers only Config.Linger for
// watchFor, and sends at once what already waited that long. A lost watch
// costs its readers a longer linger, never an event.
const (
	// watchPrefix is the subject space of watch messages: core NATS, not
	// stored, one subject per generation (subjectPrefix's suffix).
	watchPrefix = "reprise.watch."
	// watchFor is how long one watch holds a writer at Config.Linger: a
	// topic repeats it every probeEvery, so two may be lost in a row.
	watchFor = 3 * probeEvery
)

// watch tells the writer of subject, on whichever instance it runs, that a
// reader here follows it from the journal.
func (j *Journal) watch(subject string) {
	_ = j.nc.Publish(watchPrefix+strings.TrimPrefix(subject, subjectPrefix), nil)
}

// hearWatches makes this instance's writers heed the watches of every
// instance (its own included) until the connection closes.
func (j *Journal) hearWatches() error {
	_, err := j.nc.Subscribe(watchPrefix+">", func(m *nats.Msg) {
		if w := j.lag.writer(subjectPrefix + strings.TrimPrefix(m.Subject, watchPrefix)); w != nil {
			w.watched(time.Now().Add(watchFor))
		}
	})
	return err
}

// watched holds the writer at Config.Linger until until, has it publish
// what it stores live (Writer.send), and wakes its flusher: what lingered
// longer than that goes now. A watch that finds the writer unwatched
// announces the last message it knows stored: one stored before the
// writer heard the watch was published to nobody, and the readers that
// watch may have looked at the stream before it was stored.
func (w *Writer) watched(until time.Time) {
	if was := w.watchedUntil.Swap(until.UnixNano()); was <= time.Now().UnixNano() {
		if seq := w.storedSeq.Load(); seq > 0 {
			w.j.announce(w.subject, seq)
		}
	}
	signal(w.wake)
}

// isWatched reports whether a watch holds the writer at now.
func (w *Writer) isWatched(now time.Time) bool {
	return now.UnixNano() < w.watchedUntil.Load()
}

// linger is how long the writer's queue may wait at now (Config.Linger while
// watched, else Config.LingerAlone).
func (w *Writer) linger(now time.Time) time.Duration {
	if w.isWatched(now) {
		return w.j.cfg.Linger
	}
	return w.j.cfg.LingerAlone
}
