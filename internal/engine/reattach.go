package engine

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"time"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// Reattaching. With an upstream in background mode (Upstream.Background),
// a streamed generation of a Backgrounder format is asked to run in the
// background: the upstream generates on when the connection drops, and
// gives its stream again after any event. When the generation's owner dies,
// the instance that finds its lease run out (resume.Adopter) takes the
// record over — the same generation, itself the owner under a fresh lease
// — and asks the upstream for the stream after the last journaled event's
// sequence number. It journals on in the same generation, offsets going on
// from the last: readers see no reset, no gap and no duplicate, and
// nothing is generated twice. Its first append is the fence
// (journal.NewWriterAfter): it expects the event the stream was taken up
// after to be still the last stored, so should the old owner be alive
// after all (paused, cut from NATS) and store more first, the taker stores
// nothing and the generation is settled as before (owner_lost); and once
// the taker has stored, the old owner is fenced. The generation has one
// writer. Everything the taker needs is in the journal: the upstream's id
// in the first event, the sequence number in the last. When the upstream
// cannot give the stream (404: it does not keep it, or does not run
// background mode), the generation ends as it did without: owner_lost, and
// the key generates afresh.

// A Backgrounder is a Protocol whose upstream can run a streamed generation
// in the background and give its stream again after any event (OpenAI
// Responses' background mode).
type Backgrounder interface {
	// Background returns a streaming request's body asking for background
	// mode, and true when it could.
	Background(body []byte) ([]byte, bool)
	// Resumable reads a generation's first event: the upstream's id of a
	// generation running in the background, or false.
	Resumable(typ string, data []byte) (id string, ok bool)
	// Sequence reads an event's sequence number.
	Sequence(data []byte) (uint64, bool)
	// Resume is the path and query that give id's stream after the event
	// of sequence number after.
	Resume(id string, after uint64) (path, query string)
	// Cancel is the path a POST to stops id's generation (closing its
	// stream does not).
	Cancel(id string) string
}

// Continuer is what reattaching needs of the journal besides Journal.
// journal.Journal implements it.
type Continuer interface {
	Sealer
	Last(ctx context.Context, ref journal.Ref) (journal.Event, error)
	NewWriterAfter(ctx context.Context, ref journal.Ref, sink func(journal.Event)) (*journal.Writer, journal.Event, error)
}

// errNotContinuable: the journal holds no point to continue the generation
// from (its end, its terminal event, an error).
var errNotContinuable = errors.New("engine: the generation cannot be continued")

// resumeAfter is the sequence number of the upstream's event after which a
// generation whose last stored event is last goes on: that event's.
func resumeAfter(bg Backgrounder, proto Protocol, last journal.Event, found bool) (uint64, error) {
	switch {
	case !found || last.IsEnd(), reserved(last.Type) || proto.Inspect(last.Type, last.Data).Terminal:
		return 0, errNotContinuable
	}
	seq, ok := bg.Sequence(last.Data)
	if !ok {
		return 0, errNotContinuable
	}
	return seq, nil
}

// backgrounds lists the upstreams in background mode that serve path.
func (e *Engine) backgrounds(path string) []Upstream {
	var out []Upstream
	for _, up := range e.upstreams(path, "") {
		if up.Background {
			out = append(out, up)
		}
	}
	return out
}

// reattachable returns what continuing rec's generation takes, and whether
// this instance has it.
func (e *Engine) reattachable(rec resume.Record) (Continuer, Backgrounder, Protocol, bool) {
	proto, ok := ProtocolOf(rec.Path)
	if !ok || !rec.Stream || e.Closing() || len(e.backgrounds(rec.Path)) == 0 {
		return nil, nil, nil, false
	}
	bg, isBG := proto.(Backgrounder)
	j, isC := e.cfg.Journal.(Continuer)
	return j, bg, proto, isBG && isC
}

// Adoptable implements resume.Adopter: a streamed generation that runs in
// the background upstream (its first event says so) and whose journal can
// be continued (resumeAfter), with an upstream in background mode here.
func (e *Engine) Adoptable(ctx context.Context, id string, rec resume.Record) bool {
	j, bg, proto, ok := e.reattachable(rec)
	if !ok {
		return false
	}
	ref := journal.Ref{ID: id, Gen: rec.Generation}
	first, err := j.First(ctx, ref)
	if err != nil {
		return false
	}
	if _, ok := bg.Resumable(first.Type, first.Data); !ok {
		return false
	}
	last, err := j.Last(ctx, ref)
	if err != nil {
		return false
	}
	_, err = resumeAfter(bg, proto, last, true)
	return err == nil
}

// Adopts reports whether a generation of path whose owner died can be
// adopted here: an upstream serving it runs background mode.
func (e *Engine) Adopts(path string) bool { return len(e.backgrounds(path)) > 0 }

// SealCaller returns what the upstream calls of a generation of path take
// of its caller, sealed for the key of stream id id (resume.Request.Caller):
// when another instance may take the generation over (Adopts), it asks the
// upstream as the generation's caller — not as whoever finds its owner
// dead (a capability URL's reader without a credential, or of another
// tenant). Nil otherwise.
func (e *Engine) SealCaller(id, path string, caller http.Header) []byte {
	ups := e.backgrounds(path)
	if len(ups) == 0 {
		return nil
	}
	return ups[0].Decorator.Seal(id, caller)
}

// Adopt implements resume.Adopter: a pump continues the generation, on
// behalf of its caller (the record's, SealCaller). Its tail is not shown to
// readers (it holds only what it appends): readers here follow the
// journal, as on any other instance.
func (e *Engine) Adopt(ctx context.Context, id string, rec resume.Record, lease *resume.Lease) {
	proto, _ := ProtocolOf(rec.Path)
	var caller http.Header
	if ups := e.backgrounds(rec.Path); len(ups) > 0 {
		var err error
		if caller, err = ups[0].Decorator.Open(id, rec.Caller); err != nil {
			e.cfg.Logger.Warn("the caller of an adopted generation was not restored", "key_id", id, "err", err)
		}
	}
	g := Generation{Key: rec.Key, Ref: journal.Ref{ID: id, Gen: rec.Generation}, Lease: lease, Protocol: proto,
		Model: rec.Model, Stream: true, Path: rec.Path, Header: caller}
	p := &pump{e: e, g: g, tail: newTail(), log: e.cfg.Logger.With("key_id", id), tenant: rec.Tenant, adopted: true}
	if err := e.startPump(p); err != nil {
		go func() {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Journal.AppendTimeout()+10*time.Second)
			defer cancel()
			e.settle(ctx, g)
		}()
	}
}

// settle ends an adopted generation that is not continued as salvage ends
// one: completed if its journal holds its terminal event, else sealed with
// owner_lost.
func (e *Engine) settle(ctx context.Context, g Generation) resume.Result {
	res := resume.Result{State: resume.Failed, Error: apierr.OwnerLost}
	got, done, err := e.Salvage(ctx, g.Ref.ID, g.Lease.Record())
	if err != nil {
		e.cfg.Logger.Warn("settling an adopted generation", "key_id", g.Ref.ID, "err", err)
	}
	if done {
		res = got
	}
	if err := g.Lease.Finish(ctx, res); err != nil {
		e.cfg.Logger.Warn("finishing an adopted generation", "key_id", g.Ref.ID, "err", err)
		return res
	}
	if done {
		e.salvaged(ctx, g.Ref.ID, g.Lease.Record(), g.Lease.Settled())
	}
	return res
}

// reattach continues an adopted generation from the upstream, after the
// last event its journal holds. A nil writer means the generation could
// not be continued and was settled (res is how).
func (p *pump) reattach(ctx context.Context, sink func(journal.Event)) (w *journal.Writer, res resume.Result) {
	j, bg, proto, ok := p.e.reattachable(p.g.Lease.Record())
	var id string
	var last journal.Event
	var after uint64
	err := errNotContinuable
	if ok {
		var first journal.Event
		if first, err = j.First(ctx, p.g.Ref); err == nil {
			if id, ok = bg.Resumable(first.Type, first.Data); !ok {
				err = errNotContinuable
			}
		}
	}
	if err == nil {
		if w, last, err = j.NewWriterAfter(ctx, p.g.Ref, sink); err == nil {
			if after, err = resumeAfter(bg, proto, last, true); err != nil {
				w.Abort() // nothing appended
			}
		}
	}
	if err != nil {
		p.log.Info("generation not reattached: settled as its owner left it", "gen", p.g.Ref.Gen, "err", err)
		return nil, p.e.settle(ctx, p.g)
	}
	p.log.Info("reattaching a generation whose owner was lost", "gen", p.g.Ref.Gen, "response", id, "starting_after", after)
	p.response = id
	res = p.resume(ctx, w, bg, id, after)
	if errors.Is(w.Err(), journal.ErrFenced) && w.Stored() == last.Offset {
		// The old owner was alive and stored more first: this instance
		// stored nothing, and ends the generation as before.
		w.Abort()
		p.log.Warn("generation not reattached: its old owner stored more first", "gen", p.g.Ref.Gen)
		return nil, p.e.settle(ctx, p.g)
	}
	return w, res
}

// resume journals the upstream's stream of response id after the event of
// sequence number after, asking the upstreams in background mode in turn;
// when none gives it, the generation ends with owner_lost, as it would have
// without background mode — once each upstream asked was told to cancel
// the response: one that failed to give a stream it still runs would
// generate (and bill) on beside the key's next generation.
func (p *pump) resume(ctx context.Context, w *journal.Writer, bg Backgrounder, id string, after uint64) resume.Result {
	ctx, cancel := context.WithTimeout(ctx, p.e.cfg.Limits.MaxGeneration)
	defer cancel()
	streamCtx, stall := context.WithCancelCause(ctx)
	defer stall(nil)
	path, query := bg.Resume(id, after)
	var asked []Upstream
	for _, up := range p.e.backgrounds(p.g.Path) {
		p.up = up
		asked = append(asked, up)
		resp, release, _, err := p.call(streamCtx, up, p.bareRequest(http.MethodGet, path, query))
		if err != nil {
			p.log.Warn("the upstream did not resume the generation", "upstream", up.Name, "response", id, "err", err)
			continue
		}
		defer release()
		defer resp.Body.Close()
		ct := resp.Header.Get("Content-Type")
		if mt, _, _ := mime.ParseMediaType(ct); mt != "text/event-stream" {
			p.log.Warn("the upstream resumed the generation with no event stream", "upstream", up.Name, "status", resp.StatusCode, "content_type", ct)
			break
		}
		p.streamed = true
		p.answer(&Head{Status: resp.StatusCode, ContentType: ct, Streaming: true, Upstream: up.Name})
		res := p.events(ctx, streamCtx, w, resp.Body, stall)
		res.Upstream = up.Name
		return res
	}
	for _, up := range asked {
		p.up = up
		p.cancelBackground(ctx)
	}
	e := apierr.New(apierr.OwnerLost)
	_ = w.AppendFinal(context.WithoutCancel(ctx), TypeError, e.BodyIn(p.shape()))
	return resume.Result{State: resume.Failed, Status: http.StatusOK, ContentType: "text/event-stream", Error: e.Code}
}

// resumable reports whether another instance may continue the generation
// from what its journal stores (it runs in background mode). Its events are
// then shown to readers only once stored: one shown but lost with its owner
// would be stored again by the instance that continues it, under another id
// (its seek hint).
func (p *pump) resumable() bool {
	_, ok := p.g.Protocol.(Backgrounder)
	return ok && p.up.Background && p.g.Stream
}

// cancelBackground asks the upstream to stop a background generation that
// ends here without its result (a client cancelled it, the proxy shut down,
// its stream stalled or broke a limit): closing its stream does not. Not
// one whose lease was lost: another instance continues it. A failure costs
// the generation's tokens, not its end.
func (p *pump) cancelBackground(ctx context.Context) {
	bg, ok := p.g.Protocol.(Backgrounder)
	if !ok || !p.up.Background || p.response == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	resp, release, _, err := p.call(ctx, p.up, p.bareRequest(http.MethodPost, bg.Cancel(p.response), ""))
	if err != nil {
		p.log.Warn("the upstream did not cancel the background generation", "upstream", p.up.Name, "response", p.response, "err", err)
		return
	}
	_ = resp.Body.Close()
	release()
}

// bareRequest builds a bodiless request to the generation's upstream
// response (a resume, a cancel) at path and query.
func (p *pump) bareRequest(method, path, query string) func(context.Context) (*http.Request, error) {
	return func(ctx context.Context) (*http.Request, error) {
		u, err := upstreamURL(p.up.URL, path, query) // the upstream's id, which it may have made up
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		p.up.Decorator.Decorate(req, p.g.Header, p.shape())
		return req, nil
	}
}
