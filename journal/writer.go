package journal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Writer limits.
const (
	// DefaultWindow is how many appended events a Writer holds until
	// JetStream acknowledges them; Append waits for room beyond it.
	DefaultWindow = 4096
	// windowBytes bounds the held events' bytes the same way.
	windowBytes = 8 << 20
	// maxFrame bounds a message's body (a larger single event goes alone),
	// and less when the server's max_payload is small.
	maxFrame = 256 << 10
	// tryTimeout bounds one publish attempt; a message sent to a stream
	// leader that died is never answered.
	tryTimeout = 3 * time.Second
	// previewLag is how long the oldest event a writer holds may have waited
	// for its acknowledgement for events to be shown before they are stored
	// (AppendShown): a journal that lags longer shows nothing early, so
	// what a reader may have seen ahead of the journal stays small should
	// the instance die before it is stored.
	previewLag = 2 * time.Second
	// forever is the budget of a message's publish attempts: a writer never
	// gives up on what it holds (see Writer.Stalled).
	forever = 100 * 365 * 24 * time.Hour
)

// ErrStalled is what a stalled writer answers appends with (Writer.Stalled).
var ErrStalled = errors.New("journal: no append was stored within the journal's append timeout")

// Writer appends the events of one generation as a chain of messages on
// the generation's subject. Each message carries every event appended
// while the previous one was in flight, and is published expecting the
// previous message as the subject's last: JetStream then stores a
// generation in order and without holes, whatever is lost or delayed on
// the way — a message can only follow the one before it. A publish that
// fails (a NATS node or the stream leader gone, a reconnect, an election,
// an outage of any length) is tried again until JetStream answers; an
// attempt whose acknowledgement was lost is recognised by the writer's id
// on the subject's last message. A writer whose message got no answer for
// the journal's AppendTimeout stalls (Stalled): it takes no more events but
// those that end the generation (AppendFinal, End), and stores all it
// holds, in order, once JetStream answers again. So what it was given is
// stored whole or, should its instance die first, up to a point — never
// with a hole, nor with another event at an offset it handed out.
//
// The first message is the fence: it expects the subject to be empty, so of
// two writers of one generation the second stores nothing (ErrFenced).
//
// An event's Seq, its seek hint, is the sequence of the last message the
// writer had stored when the event was appended; before the first is
// stored, startHint.
//
// sink is called for every event, in order, once it is stored (with Seq
// set). A Writer is used by one goroutine; sink must not block.
type Writer struct {
	j       *Journal
	ref     Ref
	subject string
	id      string
	sink    func(Event)

	ctx    context.Context // ends with Abort
	cancel context.CancelFunc
	wake   chan struct{} // the queue grew, or ended
	room   chan struct{} // the queue shrank
	done   chan struct{} // the flusher returned

	stalled   chan struct{} // closed once a message waited AppendTimeout (Stalled)
	stallOnce sync.Once

	next uint64 // offsets given out (the appending goroutine's)
	base uint64 // the offset written after: 0, or NewWriterAfter's

	mu       sync.Mutex
	queue    []Event     // appended, not yet stored
	queuedAt []time.Time // when each of queue was appended (Lag, Config.Linger)
	qbytes   int
	ended    bool
	// note is the note of the event appended noted at offset noteAt
	// (AppendNoted): every message from that event's on carries it.
	note   string
	noteAt uint64
	stored uint64 // offset of the last stored event
	seq    uint64 // sequence of the message that stored it: the next events' seek hint (startHint before any)
	err    error
	// urgent is the offset of the last queued event a caller waits to see
	// stored (Append, End): queued events linger (Config.Linger) only
	// while it is stored.
	urgent uint64
	// watchedUntil is when the last watch heard ends (unix ns): until then
	// the queue lingers Config.Linger, else Config.LingerAlone, and what is
	// stored is published live (watch.go).
	watchedUntil atomic.Int64
	// storedSeq is the sequence of the last message stored on the subject
	// as this writer knows it (0: none): the one its next message expects
	// (send, the fence's and then the flusher's), and the one a watch that
	// finds the writer unwatched announces (watch.go).
	storedSeq atomic.Uint64
}

// startHint is the seek hint of events appended before a new writer's first
// message is stored: the stream's first sequence, at or before any message.
// A reader seeking by it reads the generation from its first message, as
// without a hint; it is not 0, which no stored event has (an error event an
// instance made for its own readers has: stream/cursor.go).
const startHint = 1

// NewWriter starts a writer for ref. Call End or Abort to stop it.
func (j *Journal) NewWriter(ref Ref, sink func(Event)) *Writer {
	w := j.newWriter(ref, sink)
	j.lag.add(w)
	go w.flush()
	return w
}

func (j *Journal) newWriter(ref Ref, sink func(Event)) *Writer {
	var id [8]byte
	_, _ = rand.Read(id[:])
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writer{
		j:       j,
		ref:     ref,
		subject: ref.subject(),
		id:      hex.EncodeToString(id[:]),
		sink:    sink,
		seq:     startHint,
		ctx:     ctx,
		cancel:  cancel,
		wake:    make(chan struct{}, 1),
		room:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		stalled: make(chan struct{}),
	}
	return w
}

// Appended is the number of events appended so far (stored or not), the
// end marker included.
func (w *Writer) Appended() uint64 { return w.next }

// Stored is the offset of the last event JetStream acknowledged.
func (w *Writer) Stored() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stored
}

// Append journals one event; the writer keeps data until it is stored.
// It fails with the writer's first error, e.g. ErrFenced when another
// writer already started this generation, and with ErrStalled once the
// writer stalled (nothing is appended then). It waits while DefaultWindow
// events are unacknowledged. The generation's first event, the fence, is
// stored before Append returns (or the writer stalled: it is stored once
// JetStream answers).
func (w *Writer) Append(ctx context.Context, typ string, data []byte) error {
	return w.add(ctx, Event{Type: typ, Data: data}, nil, "", false)
}

// AppendFinal appends an event the generation's end depends on — the error
// event that fails it, a whole answer already in memory — like Append, but
// without waiting for room in the window, and once the writer stalled too:
// it is stored after everything appended before it once JetStream answers.
// It fails only with the writer's error.
func (w *Writer) AppendFinal(ctx context.Context, typ string, data []byte) error {
	return w.add(ctx, Event{Type: typ, Data: data}, nil, "", true)
}

// Stalled is closed once a message of the writer got no answer from
// JetStream for the journal's AppendTimeout (NATS away, its quorum lost):
// the generation cannot go on being journaled, and should end — only
// AppendFinal and End append from then on. The writer keeps trying to
// store what it holds, until JetStream answers or Abort.
func (w *Writer) Stalled() <-chan struct{} { return w.stalled }

func (w *Writer) stall() {
	w.stallOnce.Do(func() {
		w.j.appendStalls.Add(1)
		close(w.stalled)
	})
}

func (w *Writer) isStalled() bool {
	select {
	case <-w.stalled:
		return true
	default:
		return false
	}
}

// AppendNoted appends like Append, and stores note with the event: the
// message that holds it and every later one of the writer (its end
// marker's) carry it, and a seal after it keeps it (Seal): it is read back
// from the generation's last message (Note). Something the event's reader
// never sees, which must be stored if, and only if, the event is: a
// generation's usage with its terminal event. A later noted event's note
// replaces it. note is a header value: at most MaxNote bytes, without CR or
// LF or spaces around it (ErrInvalidOption).
func (w *Writer) AppendNoted(ctx context.Context, typ string, data []byte, note string) error {
	if len(note) > MaxNote || strings.ContainsAny(note, "\r\n") || strings.TrimSpace(note) != note {
		return fmt.Errorf("%w: a note must be a header value of at most %d bytes", ErrInvalidOption, MaxNote)
	}
	return w.add(ctx, Event{Type: typ, Data: data}, nil, note, false)
}

// MaxNote bounds an event's note (AppendNoted).
const MaxNote = 1024

// AppendShown appends like Append, and calls show with the event (its
// Offset and Seq set, as sink will get it) once it is queued, before it is
// stored — unless the oldest event the writer holds has waited previewLag
// already: show is then not called. show is called on the appending
// goroutine, with the writer's lock held: it must not block nor call the
// writer. The generation's first event, the fence, is queued and shown like
// any other and sent at once; Append stores it before it returns. Either
// way nothing is sent before it is stored, and a writer it fences
// (ErrFenced) stores nothing.
func (w *Writer) AppendShown(ctx context.Context, typ string, data []byte, show func(Event)) error {
	return w.add(ctx, Event{Type: typ, Data: data}, show, "", false)
}

// End appends the end marker and waits until every event is stored. It
// returns the writer's first error.
//
// End appends once the writer stalled too, and waits as long as ctx lets
// it: JetStream may answer again.
func (w *Writer) End(ctx context.Context, state string) error {
	if err := w.add(ctx, Event{End: state}, nil, "", true); err != nil {
		w.Abort()
		return err
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		w.Abort()
		return fmt.Errorf("journal: waiting for acks: %w", ctx.Err())
	}
	return w.Err()
}

// Abort stops the writer without an end marker; events not yet
// acknowledged may or may not be stored. It is safe to call after End.
func (w *Writer) Abort() {
	w.fail(ErrClosed)
	w.cancel()
}

// Unstored returns the events appended and not acknowledged, in order: once
// the writer failed, what it may have sent without knowing whether
// JetStream stored it (a message in flight when it gave up can be stored
// late, when the server answers again).
func (w *Writer) Unstored() []Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.queue)
}

// Err returns the writer's first error.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *Writer) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.cancel()
	signal(w.room)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (w *Writer) add(ctx context.Context, ev Event, show func(Event), note string, final bool) error {
	if err := w.Err(); err != nil {
		return err
	}
	if !final && w.isStalled() {
		return ErrStalled
	}
	ev.Offset = w.next + 1
	first := ev.Offset == w.base+1
	for {
		w.mu.Lock()
		if w.err != nil {
			w.mu.Unlock()
			return w.err
		}
		if final || len(w.queue) == 0 || len(w.queue) < DefaultWindow && w.qbytes < windowBytes {
			w.next = ev.Offset
			if note != "" {
				w.note, w.noteAt = note, ev.Offset
			}
			now := time.Now()
			ev.Seq = w.seq // the seek hint: the last message stored
			if show != nil && (len(w.queue) == 0 || now.Sub(w.queuedAt[0]) < previewLag) {
				show(ev)
			}
			urgent := show == nil || first
			if urgent {
				w.urgent = ev.Offset // waited for; or the fence, sent at once
			}
			// The flusher needs waking only when this event changes when the
			// queue is due (lingering): a first one, an urgent one, or the
			// one that fills half a message. Any other lingers behind the
			// queue's head, whose deadline the flusher already waits for (or
			// it is sending, and looks again after).
			wake := len(w.queue) == 0 || urgent
			w.queue = append(w.queue, ev)
			w.queuedAt = append(w.queuedAt, now)
			w.qbytes += ev.Size()
			w.ended = ev.IsEnd()
			wake = wake || w.full()
			w.mu.Unlock()
			if wake {
				signal(w.wake)
			}
			if first && show == nil {
				return w.waitStored(ctx, ev.Offset) // the fence: stored before Append returns
			}
			return nil
		}
		w.mu.Unlock()
		select {
		case <-w.room:
		case <-w.stalled:
			return ErrStalled
		case <-ctx.Done():
			w.fail(ctx.Err())
			return ctx.Err()
		}
	}
}

// waitStored waits until the event at offset off is stored, the writer
// fails or stalls (ErrStalled: the event is stored once JetStream
// answers), or ctx ends (the writer goes on trying).
func (w *Writer) waitStored(ctx context.Context, off uint64) error {
	for {
		w.mu.Lock()
		stored, err := w.stored >= off, w.err
		w.mu.Unlock()
		switch {
		case stored:
			return nil
		case err != nil:
			return err
		}
		select {
		case <-w.room:
		case <-w.stalled:
			return ErrStalled
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// flush sends the queue, a message at a time, until the end marker is
// stored or the writer fails.
func (w *Writer) flush() {
	defer close(w.done)
	defer w.j.lag.remove(w)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	for {
		w.mu.Lock()
		if wait := w.lingering(); wait > 0 {
			w.mu.Unlock()
			linger.Reset(wait)
			select {
			case <-linger.C:
			case <-w.wake: // more to send, maybe urgent: look again
				linger.Stop()
			case <-w.ctx.Done():
				return
			}
			continue
		}
		batch := w.take()
		ended, stored := w.ended, w.stored
		var note string
		if len(batch) > 0 {
			note = w.noteOf(batch[len(batch)-1].Offset)
		}
		w.mu.Unlock()
		if len(batch) == 0 {
			if ended && stored > 0 {
				return
			}
			select {
			case <-w.wake:
				continue
			case <-w.ctx.Done():
				return
			}
		}
		seq, err := w.send(w.ctx, batch, w.storedSeq.Load(), note)
		if err != nil {
			w.fail(err)
			return
		}
		for i := range batch {
			w.sink(batch[i])
		}
		w.mu.Lock()
		for _, ev := range batch {
			w.qbytes -= ev.Size()
		}
		w.stored, w.seq = batch[len(batch)-1].Offset, seq
		w.dequeue(len(batch)) // batch is the queue's head: used up
		w.mu.Unlock()
		signal(w.room)
	}
}

// noteOf is the note of a message whose last event is at offset last. The
// caller holds w.mu.
func (w *Writer) noteOf(last uint64) string {
	if w.note == "" || last < w.noteAt {
		return ""
	}
	return w.note
}

// lingering is how much longer the queue may wait for more events to share
// its message (Writer.linger): 0 once any of them is urgent, or the queue
// has been waiting that long, or fills half a message or half the window.
// The caller holds w.mu.
func (w *Writer) lingering() time.Duration {
	now := time.Now()
	linger := w.linger(now)
	if linger <= 0 || len(w.queue) == 0 || w.urgent > w.stored || w.full() {
		return 0
	}
	return w.queuedAt[0].Add(linger).Sub(now)
}

// full reports whether the queue fills half a message or half the window:
// it is sent without lingering. The caller holds w.mu.
func (w *Writer) full() bool {
	return len(w.queue) >= DefaultWindow/2 || w.qbytes >= min(windowBytes, w.j.maxFrame)/2
}

// take returns the queue's head that fits one message: events of one seek
// hint (Event.Seq; it changes when a message is stored while events wait).
// It is the queue's own memory, which only the flusher changes (add only
// appends past it): the flusher reads it without the lock until dequeue.
func (w *Writer) take() []Event {
	n, size := 0, 0
	for n < len(w.queue) {
		s := w.queue[n].Size()
		if n > 0 && (size+s > w.j.maxFrame || w.queue[n].Seq != w.queue[0].Seq) {
			break
		}
		size += s
		n++
	}
	return w.queue[:n:n]
}

// dequeue drops the queue's first n events, moving the rest to the front:
// the queue's array is reused for a writer's whole life, not grown anew
// as its head moves on. The caller holds w.mu.
func (w *Writer) dequeue(n int) {
	rest := copy(w.queue, w.queue[n:])
	clear(w.queue[rest:]) // no event data kept alive by a stale copy
	w.queue = w.queue[:rest]
	w.queuedAt = w.queuedAt[:copy(w.queuedAt, w.queuedAt[n:])]
	if rest == 0 && cap(w.queue) > queueKeep {
		w.queue, w.queuedAt = nil, nil // a burst's array is not kept
	}
}

// queueKeep is how many events' room an empty queue keeps.
const queueKeep = 256

// send publishes evs as one message carrying note that must follow the
// message stored at sequence expect (0: the subject must be empty), trying
// again until JetStream answers (or ctx ends); the writer stalls once it
// has tried for the journal's AppendTimeout. It returns the stored
// message's sequence.
func (w *Writer) send(ctx context.Context, evs []Event, expect uint64, note string) (uint64, error) {
	msg := encode(w.subject, w.id, evs, note)
	defer bodies.release(msg)
	first, last := evs[0].Offset, evs[len(evs)-1].Offset
	t := tries{budget: forever, each: min(tryTimeout, w.j.cfg.AppendTimeout/4), count: &w.j.appendRetries}
	var seq uint64
	start := time.Now()
	err := retry(ctx, t, appendRetryable, func(tctx context.Context) error {
		ack, err := w.j.js.PublishMsg(tctx, msg, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithRetryAttempts(0))
		if err == nil {
			seq = ack.Sequence
			return nil
		}
		if isWrongLast(err) {
			// Stored by an earlier attempt whose acknowledgement was lost,
			// or written by another writer; a replica behind the leader may
			// not show it yet: then ask again.
			lctx, cancel := context.WithTimeout(ctx, tryTimeout)
			f, lerr := w.j.lastFrame(lctx, w.ref)
			cancel()
			switch {
			case lerr == nil && f.writer == w.id && f.last() == last:
				seq = f.seq
				return nil
			case lerr == nil && f.writer != w.id:
				return ErrFenced
			case lerr == nil && f.last() > last:
				// A later message of this writer's is stored: this one is
				// a stale copy.
				return fmt.Errorf("%w: %w", errRefused, err)
			}
		}
		if time.Since(start) >= w.j.cfg.AppendTimeout {
			if refusal(err) {
				// JetStream answers, and keeps refusing the message (it
				// no longer fits, the subject ends elsewhere): it is not
				// stored, and trying on changes nothing.
				return fmt.Errorf("%w: %w", errRefused, err)
			}
			w.stall() // no answer: perhaps stored; the writer tries on
		}
		return err
	})
	switch {
	case errors.Is(err, ErrFenced):
		return 0, ErrFenced
	case ctx.Err() != nil:
		return 0, fmt.Errorf("journal: append %d..%d: %w", first, last, ctx.Err())
	case err != nil:
		w.j.appendErrors.Add(1)
		return 0, fmt.Errorf("journal: append %d..%d: %w", first, last, w.j.wrote(err))
	}
	_ = w.j.wrote(nil)
	if w.j.cfg.OnAppend != nil {
		w.j.cfg.OnAppend(time.Since(start))
	}
	// Stored, then looked at whether watched, in this order: a watch that
	// finds the writer unwatched looks at storedSeq after marking it
	// watched (Writer.watched), so a message is either published live
	// here or announced there.
	w.storedSeq.Store(seq)
	if w.isWatched(time.Now()) {
		w.j.publishLive(msg, seq, expect)
	}
	return seq, nil
}

// errRefused: a message JetStream refused for good — answered refusals for
// the append timeout, or a stale copy of a message stored already.
var errRefused = errors.New("journal: JetStream refused the message")

// refusal reports whether err is JetStream's answer refusing a message, not
// a sign that it is away: an API error, unless its status says JetStream is
// unavailable (an election, a quorum lost).
func refusal(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code != http.StatusServiceUnavailable
}

// appendRetryable: a message is sent again after anything but a fence, a
// refusal for good, a message too large for the server, a full store, or a
// closed connection.
func appendRetryable(err error) bool {
	return !errors.Is(err, ErrFenced) && !errors.Is(err, errRefused) && !errors.Is(err, nats.ErrMaxPayload) && !errors.Is(err, nats.ErrConnectionClosed) && !isFull(err)
}

// Unanswered reports whether an append that failed with err may have been
// stored all the same: JetStream gave no answer (a timeout, a connection
// lost, a NATS stall), and a message on its way may still be stored. An
// answer that refused the message (an API error, a message too large, a
// fence), or a writer closed by its caller, says it was not.
func Unanswered(err error) bool {
	var apiErr *jetstream.APIError
	return err != nil && !errors.As(err, &apiErr) && !errors.Is(err, ErrFenced) && !errors.Is(err, ErrClosed) &&
		!errors.Is(err, nats.ErrMaxPayload)
}

func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// sealWriter is the writer id of messages appended by Seal.
const sealWriter = "seal"

// Seal ends a generation whose writer is gone, or presumed gone. It looks at
// the last stored event and appends right after it the events ending gives
// for it (found is false when nothing is stored): an end marker, perhaps
// after an error event. The append expects that event to be still the last
// (an empty subject when nothing is stored), so of two sealers one stores,
// a writer still alive is fenced from then on (ErrFenced on its next
// message, its first included), and a writer that got further first is seen:
// ending is then asked again about the new last event. A generation with its
// end marker already is left alone. The seal's message carries the note
// of the message it follows (Note). Seal returns the generation's end
// marker, and whether a seal stored it (this one, an earlier one whose
// answer was lost, another instance's): false when its writer did.
func (j *Journal) Seal(ctx context.Context, ref Ref, ending func(last Event, found bool) []Event) (end Event, sealed bool, err error) {
	for range maxSealTries {
		var last Event
		f, err := j.lastFrame(ctx, ref)
		found := err == nil
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return Event{}, false, err
		default:
			last = f.events[len(f.events)-1]
		}
		lastSeq := f.seq // 0 when nothing is stored
		if last.IsEnd() {
			return last, f.writer == sealWriter, nil // ended already: by its writer, or a seal
		}
		evs := ending(last, found)
		if len(evs) == 0 || !evs[len(evs)-1].IsEnd() {
			return Event{}, false, fmt.Errorf("%w: a seal must end with an end marker", ErrInvalidOption)
		}
		for i := range evs {
			evs[i].Offset, evs[i].Seq = last.Offset+1+uint64(i), 0
		}
		msg := encode(ref.subject(), sealWriter, evs, f.note) // the note stays the generation's last message's
		ack, err := j.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(lastSeq), jetstream.WithRetryAttempts(0))
		if err == nil {
			_ = j.wrote(nil)
			// Whoever follows the generation hears its end now: a seal is
			// rare, and its instance does not know who watches.
			j.publishLive(msg, ack.Sequence, lastSeq)
			end := evs[len(evs)-1]
			end.Seq = ack.Sequence
			return end, true, nil
		}
		if !isWrongLast(err) {
			return Event{}, false, fmt.Errorf("journal: seal: %w", j.wrote(err))
		}
		// Something was stored meanwhile (or a replica behind the leader
		// answered): look again.
	}
	return Event{}, false, fmt.Errorf("journal: seal: %w", ErrConflict)
}

const maxSealTries = 8

// NewWriterAfter starts a writer that continues ref's generation after its
// last stored event, stored by a writer that is gone, or presumed gone, and
// returns that event (ErrNotFound when nothing is stored). The writer's
// first message is the fence, as a new writer's: it expects that event's
// message to be still the subject's last, so should its writer be alive and
// store more first, this one stores nothing (ErrFenced), and once this one
// has stored, that one is fenced. Offsets go on from the last event's.
func (j *Journal) NewWriterAfter(ctx context.Context, ref Ref, sink func(Event)) (*Writer, Event, error) {
	f, err := j.lastFrame(ctx, ref)
	if err != nil {
		return nil, Event{}, err
	}
	last := f.events[len(f.events)-1]
	w := j.newWriter(ref, sink)
	w.base, w.next, w.stored, w.seq = last.Offset, last.Offset, last.Offset, f.seq
	w.storedSeq.Store(f.seq)
	j.lag.add(w)
	go w.flush()
	return w, last, nil
}
