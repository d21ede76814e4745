package stream

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// readBatch bounds how many events a journal reader's goroutine hands over
// at once (one channel send per batch of a backlog, not per event).
const readBatch = 64

// eventWriter is a client connection that takes events: SSE or WebSocket.
type eventWriter interface {
	send(id string, ev journal.Event) error
	reset(id string, gen uint64) error
	ping() error
	flush() error
}

// follow writes rec's current generation to out, after cur, then follows it
// live until its end marker. A cursor in an older generation gets a reset
// first. The caller has validated cur.Gen <= rec.Generation. What was
// stored before the reader caught up it writes a batch per turn of
// tenant's (replayTurns); what it follows live, as it comes.
//
// rec goes by pointer down to where an idle reader waits (followTail,
// followJournal): each copy of a Record (~400 bytes) on the way is stack the
// reader keeps while it waits, and the runtime halves an idle goroutine's
// stack only while it uses less than a quarter of it.
func (s *Server) follow(ctx context.Context, out eventWriter, tenant, id string, rec *resume.Record, cur resume.Position) error {
	err := s.followFrom(ctx, out, tenant, id, rec, cur)
	if err == nil {
		s.gotResult(ctx, rec)
	}
	return err
}

func (s *Server) followFrom(ctx context.Context, out eventWriter, tenant, id string, rec *resume.Record, cur resume.Position) error {
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	var after, hint uint64
	switch {
	case cur.Gen == ref.Gen:
		after, hint = cur.Offset, cur.Seq
	case cur.Gen != 0:
		if err := out.reset(resume.Position{Gen: ref.Gen}.String(), ref.Gen); err != nil {
			return err
		}
	}
	if t, source := s.tail(ref, rec.State); t != nil && after <= t.Last() { // a tail behind the cursor was taken over: see fitCursor
		return s.followTail(ctx, out, tenant, ref, t, after, source)
	}
	if rec.State == resume.InProgress {
		// A generation running elsewhere: its reader here is cut when this
		// instance closes, and resumes on another.
		var cut context.CancelFunc
		ctx, cut = context.WithCancel(ctx)
		defer cut()
		defer context.AfterFunc(s.closing, cut)()
	}
	owner := "" // a finished generation has none to ask about
	if rec.State == resume.InProgress {
		owner = rec.Owner
	}
	return s.followJournal(ctx, out, tenant, ref, engine.ShapeOf(rec.Path), after, hint, owner)
}

// tail is the tail of ref's generation on this instance, and the source
// its readers count as (reprise_stream_readers): the generation it runs
// ("tail"), or, completed, one that completed here lately ("result",
// engine.Finished).
func (s *Server) tail(ref journal.Ref, state resume.State) (*engine.Tail, string) {
	if t := s.engine.Tail(ref); t != nil || state != resume.Completed {
		return t, "tail"
	}
	if rec, t := s.engine.Finished(ref.ID); rec != nil && rec.Generation == ref.Gen {
		return t, "result"
	}
	return nil, ""
}

func eventID(ref journal.Ref, ev journal.Event) string {
	return resume.Position{Gen: ref.Gen, Offset: ev.Offset, Seq: ev.Seq}.String()
}

// followTail writes a generation from this instance's tail of it (one it
// runs, or a result kept here). What the tail holds when the reader comes
// goes out a batch per turn of tenant's; once the reader has caught up, it
// takes none: it follows live.
func (s *Server) followTail(ctx context.Context, out eventWriter, tenant string, ref journal.Ref, t *engine.Tail, after uint64, source string) error {
	defer s.metrics.Reader(source)()
	q := s.turns.Stream(tenant) // nil once caught up
	hb := time.NewTicker(s.cfg.Heartbeat)
	defer hb.Stop()
	first, unflushed := true, false
	for {
		evs, changed := t.Since(after)
		for len(evs) > 0 {
			n := len(evs)
			if q != nil {
				n = min(n, readBatch)
				if !q.TryWait() {
					if unflushed { // out of turn: a slow client holds up no turn, and what was written reaches it meanwhile
						if err := out.flush(); err != nil {
							return err
						}
					}
					if err := q.Wait(ctx); err != nil {
						return err
					}
				}
			}
			end, err := sendTail(out, ref, t, evs[:n], &after, &first)
			q.Done()
			if end || err != nil {
				return err
			}
			evs, unflushed = evs[n:], true
			if len(evs) == 0 {
				if err := out.flush(); err != nil {
					return err
				}
				unflushed = false
			}
		}
		q = nil // caught up: what comes next is live
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-hb.C:
			if err := out.ping(); err != nil {
				return err
			}
		}
	}
}

// sendTail writes evs, events of t after *after, to out, and moves *after
// on; the first event of a reader (*first) is flushed at once. end
// reports the generation's end marker: out is flushed then.
func sendTail(out eventWriter, ref journal.Ref, t *engine.Tail, evs []journal.Event, after *uint64, first *bool) (end bool, err error) {
	for _, ev := range evs {
		if ev.IsEnd() {
			return true, out.flush()
		}
		id := eventID(ref, ev)
		if ev.Type == engine.TypeError && t.Unplaced(ev) { // the type first: no lock per event
			id = "" // its place in the journal is not known yet
		}
		if err := out.send(id, ev); err != nil {
			return false, err
		}
		*after = ev.Offset
		if *first { // a resume's first missed event goes out at once, before the backlog
			if err := out.flush(); err != nil {
				return false, err
			}
			*first = false
		}
	}
	return false, nil
}

// followJournal reads a generation from JetStream: a completed one, or one
// running on another instance. A reading goroutine feeds this one, which
// owns the connection and selects over events, the idle tick and the
// client: a slow journal read is never cut by the tick. While idle it
// checks the owner's lease, so a reader of a generation whose owner died
// gets an error instead of waiting forever — unless the journal holds
// more than the reader got (its reads stalled, on a NATS node that
// died): then it reads on from the journal afresh, and gets the
// generation's own end.
// Errors it writes itself are in shape, the key's format's. What it reads
// of what was stored goes out a batch per turn of tenant's, and its gets
// take their turns as tenant's; what it reads live goes out as it comes.
// A generation running on another instance, owner, that goes quiet (a
// quietTick with nothing read) is looked at sooner than its lease:
// resume.Manager.Check asks whether owner is gone, and settles the
// generation at once if so — sealed with owner_lost, which this reader
// reads as the generation's end, or adopted, which it follows on.
func (s *Server) followJournal(ctx context.Context, out eventWriter, tenant string, ref journal.Ref, shape apierr.Shape, after, hint uint64, owner string) error {
	q := s.turns.Stream(tenant)
	if q == nil {
		tenant = "" // no turns by tenant: the gets' in the order they come
	}
	rd, err := s.journal.Read(ctx, ref, after, hint, journal.For(tenant))
	if err != nil {
		return err
	}
	defer s.metrics.Reader("journal")()
	events, stop := feed(ctx, rd)
	defer func() { stop() }() // the last feed's

	idle := time.NewTicker(s.idleTick())
	defer idle.Stop()
	ow := s.watchOwner(ctx, ref, owner)
	defer ow.stop()
	sent, unflushed := 0, false
	var lost *apierr.Error // why the generation can no longer end, once seen
	for {
		var r journalRead
		var ok bool
		select {
		case r, ok = <-events:
		default: // nothing ready: flush what was written, then wait
			if unflushed {
				if err := out.flush(); err != nil {
					return err
				}
				unflushed = false
			}
			select {
			case r, ok = <-events:
			case <-ow.tick:
				ow.quiet()
				continue
			case c := <-ow.checked:
				ow.answer(c)
				continue
			case <-idle.C:
				if err := out.ping(); err != nil {
					return err
				}
				if lost != nil { // a second tick with the generation ended elsewhere
					stalled, err := s.stalled(ctx, ref, after)
					switch {
					case err != nil:
						continue // the journal may be back soon; keep waiting
					case !stalled: // nothing stored past this reader, and no end will come
						return sendError(out, ref, after, lost.BodyIn(shape), true)
					}
					// The journal holds more than this reader got: its reads
					// stalled (its NATS node died, say). Read on afresh.
					stop()
					if rd, err = s.journal.Read(ctx, ref, after, 0, journal.For(tenant)); err != nil {
						return err
					}
					events, stop = feed(ctx, rd)
					lost = nil
					continue
				}
				lost = s.lost.check(ref, s.idleTick()/2, func() *apierr.Error { return s.ownerLost(ctx, ref) })
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if !ok {
			return ctx.Err()
		}
		if r.live { // what was stored before says nothing of the owner now
			ow.heard = true
		}
		if !r.live && !q.TryWait() { // a batch of what was stored: in its turn
			if unflushed { // out of turn: a slow client holds up no turn, and what was written reaches it meanwhile
				if err := out.flush(); err != nil {
					return err
				}
				unflushed = false
			}
			if err := q.Wait(ctx); err != nil {
				return err
			}
		}
		n, end, err := sendJournal(out, ref, r.evs, &after, &sent)
		q.Done()
		if n > 0 {
			lost, unflushed = nil, sent > 1 // the first was flushed
		}
		if end || err != nil {
			return err
		}
		if r.err != nil {
			return readFailed(ctx, out, ref, shape, after, r.err)
		}
	}
}

// sendJournal writes evs, events read from the journal after *after, to
// out, moves *after on and counts them in *sent; n is how many it wrote.
// The first event goes out at once (resume latency); a backlog goes out as
// the writer's buffer fills, and whatever is left when the reader idles
// (followJournal). end reports the generation's end marker: out is flushed
// then.
func sendJournal(out eventWriter, ref journal.Ref, evs []journal.Event, after *uint64, sent *int) (n int, end bool, err error) {
	for _, ev := range evs {
		if ev.IsEnd() {
			return n, true, out.flush()
		}
		if err := out.send(eventID(ref, ev), ev); err != nil {
			return n, false, err
		}
		*after = ev.Offset
		*sent++
		n++
		if *sent == 1 {
			if err := out.flush(); err != nil {
				return n, false, err
			}
		}
	}
	return n, false, nil
}

// idleTick is how often an idle journal reader pings its client and looks
// at its generation's owner.
func (s *Server) idleTick() time.Duration { return min(s.cfg.Heartbeat, s.resume.Lease()/2) }

// lostChecks shares ownerLost's answers among an instance's readers of one
// generation for an idle tick: a thousand idle readers of a generation
// cost one record read per tick, not a thousand.
type lostChecks struct {
	mu   sync.Mutex
	seen map[journal.Ref]lostCheck
}

type lostCheck struct {
	at   time.Time
	lost *apierr.Error
}

// check returns ref's answer if one is younger than fresh, or asks (and
// keeps the answer).
func (c *lostChecks) check(ref journal.Ref, fresh time.Duration, ask func() *apierr.Error) *apierr.Error {
	now := time.Now()
	c.mu.Lock()
	if v, ok := c.seen[ref]; ok && now.Sub(v.at) < fresh {
		c.mu.Unlock()
		return v.lost
	}
	c.mu.Unlock()
	lost := ask()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen = map[journal.Ref]lostCheck{}
	}
	if len(c.seen) >= 1024 { // forget the stale answers of generations nobody reads any more
		for r, v := range c.seen {
			if now.Sub(v.at) >= fresh {
				delete(c.seen, r)
			}
		}
	}
	c.seen[ref] = lostCheck{at: now, lost: lost}
	return lost
}

// stalled reports whether the journal stores events of ref past after: a
// reader that has not got them while its generation ended is stalled, not
// waiting for events that will never come.
func (s *Server) stalled(ctx context.Context, ref journal.Ref, after uint64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	last, err := s.journal.Last(ctx, ref)
	if errors.Is(err, journal.ErrNotFound) {
		return false, nil
	}
	return err == nil && last.Offset > after, err
}

// journalRead is one result of the reading goroutine: the events read
// without waiting (at most readBatch), then the error that ended the
// reading, if any. live reports that the reader had caught up with what
// was stored (journal.Reader.Live): the events came as they were written.
type journalRead struct {
	evs  []journal.Event
	err  error
	live bool
}

// feed reads rd in a goroutine of its own, so that the connection's
// goroutine selects over events, the idle tick and the client: a slow
// journal read is never cut by the tick. Events the reader holds already
// travel together (a backlog costs one channel send per batch, not per
// event); a batch never waits for an event not yet read. The channel
// closes after the end marker or an error; stop ends the reading and
// closes rd.
func feed(ctx context.Context, rd *journal.Reader) (events <-chan journalRead, stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	ch := make(chan journalRead, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		// Three batches in turn: with one in the channel and one being
		// written to the client, the third is free.
		var bufs [3][]journal.Event
		for i := 0; ; i = (i + 1) % len(bufs) {
			r := journalRead{evs: bufs[i][:0]}
			for {
				ev, err := rd.Next(rctx)
				if err != nil {
					r.err = err
					break
				}
				r.evs = append(r.evs, ev)
				if ev.IsEnd() || len(r.evs) == readBatch || !rd.Buffered() {
					break
				}
			}
			bufs[i], r.live = r.evs, rd.Live()
			select {
			case ch <- r:
			case <-rctx.Done():
				return
			}
			if r.err != nil || r.evs[len(r.evs)-1].IsEnd() {
				return
			}
		}
	}()
	return ch, func() { cancel(); <-done; rd.Close() }
}

// readFailed tells the reader the journal failed it, rather than end the
// stream as if it were complete. A gap ends the generation for good; an
// outage does not, so its error carries no id: the client's cursor stays
// on the last event it got, and a resume continues from there.
func readFailed(ctx context.Context, out eventWriter, ref journal.Ref, shape apierr.Shape, after uint64, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, journal.ErrGap) {
		_ = sendError(out, ref, after, apierr.New(apierr.JournalFailure).BodyIn(shape), true)
	} else {
		_ = sendError(out, ref, after, apierr.New(apierr.Unavailable).BodyIn(shape), false)
	}
	return err
}

// sendError writes data as the error event after offset after, with its
// id when it ends the generation for good, and flushes.
func sendError(out eventWriter, ref journal.Ref, after uint64, data []byte, final bool) error {
	ev := journal.Event{Offset: after + 1, Type: engine.TypeError, Data: data}
	id := ""
	if final {
		id = eventID(ref, ev)
	}
	if err := out.send(id, ev); err != nil {
		return err
	}
	return out.flush()
}

// ownerLost reports why ref's generation can no longer end with its end
// marker, or nil: its owner's lease ran out, the key moved on to another
// generation or expired, or the record says it failed. Readers get the
// same error as the owner's own readers: journal_failure when the owner
// could not store the generation, owner_lost otherwise.
func (s *Server) ownerLost(ctx context.Context, ref journal.Ref) *apierr.Error {
	code := apierr.OwnerLost
	rec, err := s.resume.Get(ctx, ref.ID)
	switch {
	case errors.Is(err, resume.ErrNotFound):
	case err != nil:
		return nil // the journal may be back soon; keep waiting
	case rec.Generation == ref.Gen && rec.State == resume.Failed && rec.Error == apierr.JournalFailure:
		code = apierr.JournalFailure
	case rec.Generation != ref.Gen || rec.Error == resume.OwnerLost || rec.State == resume.Failed:
		// A failed record always follows its end marker, so a failed one
		// without it (after the caller's last look) will never get one. A
		// completed one does have it: the read is slow, not lost.
	default:
		return nil
	}
	e := apierr.New(code)
	return &e
}

// quietTick is how long a generation running on another instance may go
// without an event before its reader asks whether its owner is gone
// (ownerWatch): a dead owner's readers learn of it within about two of
// them and the ask, not a lease.
const quietTick = 400 * time.Millisecond

// ownerWatch is a journal reader's watch on the instance that runs its
// generation. It asks only when the generation went quiet, in a goroutine
// of its own: an ask that takes long (an owner that does not answer
// waits out its timeout) holds up no event. An ask runs to its end though
// its reader ended meanwhile: the settling it may start seals the journal
// first — which ends this reader — and records the end next, which a
// reader's end must not cut.
type ownerWatch struct {
	s      *Server
	ctx    context.Context // the reader's values, not its end
	ref    journal.Ref
	owner  string // "": nothing to watch (a finished generation, or settled)
	ticker *time.Ticker
	tick   <-chan time.Time // nil while nothing is watched
	// heard is set by the reader for each live read (the owner wrote it
	// lately; a stored backlog says nothing of it now): the generation was
	// not quiet since the last tick.
	heard  bool
	asking bool
	// checked takes an ask's answer (one ask at a time), by pointer: a
	// Record is stack an idle reader would keep (see follow).
	checked chan *ownerChecked
}

// ownerChecked is resume.Manager.Check's answer.
type ownerChecked struct {
	resume.Checked
	err error
}

// watchOwner watches owner, which runs ref's generation ("" for none; this
// instance is never watched).
func (s *Server) watchOwner(ctx context.Context, ref journal.Ref, owner string) *ownerWatch {
	if owner == s.resume.Owner() {
		owner = ""
	}
	w := &ownerWatch{s: s, ctx: context.WithoutCancel(ctx), ref: ref, owner: owner, checked: make(chan *ownerChecked, 1)}
	if owner != "" {
		w.ticker = time.NewTicker(quietTick)
		w.tick = w.ticker.C
	}
	return w
}

// quiet is a tick: unless something was read since the last one, or an
// ask is under way, ask whether the owner is gone. An ask and the
// settling it starts take at most a lease: a lease later, the generation
// is the lease's to settle.
func (w *ownerWatch) quiet() {
	if w.heard || w.asking {
		w.heard = false
		return
	}
	w.asking = true
	owner := w.owner
	go func() {
		ctx, cancel := context.WithTimeout(w.ctx, w.s.resume.Lease())
		defer cancel()
		c, err := w.s.resume.Check(ctx, w.ref.ID, owner)
		if c.Settled && err == nil {
			w.s.log.Info("the instance running a generation read here is gone; the generation was settled without waiting for its lease",
				"key_id", w.ref.ID, "gen", c.Record.Generation, "owner", owner, "state", c.Record.State)
		}
		w.checked <- &ownerChecked{Checked: c, err: err}
	}()
}

// answer takes an ask's answer. An owner gone had its generation settled:
// sealed (its end comes through the journal), completed, or adopted by an
// instance whose name the watch takes on. An error changes nothing: the
// next quiet tick asks again.
func (w *ownerWatch) answer(c *ownerChecked) {
	w.asking = false
	if !c.Gone || c.err != nil {
		return
	}
	if rec := c.Record; rec.State == resume.InProgress && rec.Generation == w.ref.Gen && rec.Owner != w.owner && rec.Owner != w.s.resume.Owner() {
		w.owner = rec.Owner // adopted elsewhere
		return
	}
	w.owner, w.tick = "", nil
	w.ticker.Stop()
}

// stop ends the watch; an ask under way runs on (see ownerWatch).
func (w *ownerWatch) stop() {
	if w.ticker != nil {
		w.ticker.Stop()
	}
}
