package journal

import (
	"sync"
	"time"
)

// lag is the set of this instance's running writers, for Lag, and by
// subject, for the watches (watch.go).
type lag struct {
	mu        sync.Mutex
	writers   map[*Writer]struct{}
	bySubject map[string]*Writer // the newest of a subject's
}

func (l *lag) add(w *Writer) {
	l.mu.Lock()
	l.writers[w] = struct{}{}
	l.bySubject[w.subject] = w
	l.mu.Unlock()
}

func (l *lag) remove(w *Writer) {
	l.mu.Lock()
	delete(l.writers, w)
	if l.bySubject[w.subject] == w {
		delete(l.bySubject, w.subject)
	}
	l.mu.Unlock()
}

// writer returns the running writer of subject, if this instance has one.
func (l *lag) writer(subject string) *Writer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bySubject[subject]
}

// Lag is how far behind this instance's journal writes are: the age of the
// oldest event appended here that JetStream has not acknowledged yet, 0
// when none waits. Each event waits for the message before it, so when
// JetStream (or this process, feeding it) cannot keep up with what is
// appended, the backlog shows here first and keeps growing; a stalled store
// shows too (nothing is acknowledged, everything ages). It costs a look at
// every running writer: call it a few times a second, not per event.
func (j *Journal) Lag() time.Duration {
	j.lag.mu.Lock()
	defer j.lag.mu.Unlock()
	now := time.Now()
	var oldest time.Duration
	for w := range j.lag.writers {
		oldest = max(oldest, w.waiting(now))
	}
	return oldest
}

// waiting is how long the oldest event w holds unacknowledged has waited
// since it was due to be sent: at once, or, while it may linger
// (Writer.linger), when its linger ends or an urgent event came after it.
func (w *Writer) waiting(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0
	}
	if len(w.queuedAt) > 0 {
		due := w.queuedAt[0].Add(w.linger(now))
		if w.urgent > w.stored {
			if i := w.urgent - w.queue[0].Offset; i < uint64(len(w.queuedAt)) {
				due = minTime(due, w.queuedAt[i])
			}
		}
		return max(0, now.Sub(due))
	}
	return 0
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
