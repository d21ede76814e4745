package resume

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Store keeps record values with revisions (journal.Journal implements it).
// Get reports found false for an absent record; Create reports created
// false when the record exists, Update updated false when its revision is
// no longer rev. An error is an answer the store did not give: the write
// may or may not have been applied.
type Store interface {
	Get(ctx context.Context, id string) (value []byte, rev uint64, found bool, err error)
	Create(ctx context.Context, id string, value []byte) (rev uint64, created bool, err error)
	Update(ctx context.Context, id string, value []byte, rev uint64) (nrev uint64, updated bool, err error)
}

// Sentinel errors.
var (
	ErrNotFound      = errors.New("resume: key not found")
	ErrMismatch      = errors.New("resume: idempotency key reused with another request")
	ErrFenced        = errors.New("resume: generation taken over by another owner")
	ErrContended     = errors.New("resume: record changed too often, try again")
	ErrInvalidOption = errors.New("resume: invalid option")
)

// OwnerLost is the Error of a record whose owner's lease ran out.
const OwnerLost = "owner_lost"

// DefaultLease is how long an owner's claim lasts without a heartbeat.
const DefaultLease = 10 * time.Second

// Config configures a Manager.
type Config struct {
	// Store holds the records. Required.
	Store Store
	// Owner names this instance in records. Required.
	Owner string
	// Lease is the owner lease. Default DefaultLease. Heartbeats run every Lease/3.
	Lease time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Kept, when set, is asked whether a finished generation (completed,
	// failed or cancelled) is still whole in the journal. The TTL removes
	// a generation's first events before its record, which was written at
	// the generation's end or later: a generation that is not whole is
	// gone, as its key would be — Get answers ErrNotFound, and Begin starts
	// a new generation for any body. An error counts as kept (the reader
	// meets the journal's own error). Default: every generation is kept.
	Kept func(ctx context.Context, id string, rec Record) (bool, error)
	// Adopter, when set, is asked first about every generation whose
	// owner's lease ran out (before the Salvager): one it can continue is
	// taken over — the record stays in progress, this instance its owner
	// under a fresh lease — and handed to it; Get returns the record so,
	// and Begin attaches to it. Default: none is adopted.
	Adopter Adopter
	// Salvager, when set, is asked about every generation whose owner's
	// lease ran out and that is not adopted, before it is declared lost
	// (Failed, OwnerLost). Default: none is salvaged.
	Salvager Salvager
	// Gone, when set, reports whether the instance named owner is gone:
	// its connection to the store closed (journal.Journal.OwnerGone). Its
	// generations are then settled without waiting for their lease
	// (Check). An error says nothing of the owner. Default: owners are
	// judged by their lease only.
	Gone func(ctx context.Context, owner string) (bool, error)
	// Lost, when set, is told of each generation of a lost owner (its
	// lease ran out, or Gone) this Manager settled, with its state as
	// settled: Completed (its result was stored whole) or Failed
	// (OwnerLost; also when a new generation replaced it at once). Not of
	// one adopted. It must not block.
	Lost func(state State)
}

// An Adopter continues, on this instance, a generation whose owner's lease
// ran out, where the owner left off, instead of its being declared lost:
// one its upstream still runs (a background response). The engine
// implements it.
type Adopter interface {
	// Adoptable reports whether id's generation rec can be continued here.
	// It is asked before the record is taken over, and must be cheap.
	Adoptable(ctx context.Context, id string, rec Record) bool
	// Adopt continues the generation, taken over under lease: the same
	// generation, this instance its owner. It must not block, and it
	// finishes the lease, whatever becomes of the generation. ctx is the
	// request's that found the lease run out, for its values (the caller,
	// of the key's tenant), not its deadline.
	Adopt(ctx context.Context, id string, rec Record, lease *Lease)
}

// A Salvager settles a generation whose owner's lease ran out, before it
// is declared lost: an owner that died after storing the whole generation
// but before recording it leaves a result, not a failure. The engine
// implements it.
type Salvager interface {
	// Salvage returns the result to record and true, or false for a
	// generation that did not complete. An error leaves the record as it
	// is (Get and Begin return it). It may be asked again about the same
	// generation (the record changed meanwhile, another instance asked
	// too): it must bill nothing.
	Salvage(ctx context.Context, id string, rec Record) (Result, bool, error)
	// Salvaged is told of a generation Salvage completed once this Manager
	// stored its record so — once per generation over every instance —
	// with the record stored and the number of duplicates that had
	// attached to it: to report what it billed and they saved.
	Salvaged(ctx context.Context, id string, rec Record, attached uint64)
}

// Manager makes the start/attach/replay decisions.
type Manager struct {
	cfg     Config
	contact *contact     // what this instance saw of the store (contact.go)
	names   Names        // the upstream's own ids of generations
	watched atomic.Int64 // writes that got no answer, watched (unanswered.go)
	gaveUp  gaveUp       // generations this instance gave up on (gaveup.go)
	owners  owners       // the answers of Config.Gone (gone.go)
}

// errRaced: the record changed while a decision was taken on it; decide
// again.
var errRaced = errors.New("resume: record changed meanwhile")

// adopt takes id's lapsed generation rec, at revision rev, over for the
// Adopter when it can continue it. It reports false when it cannot, and
// errRaced when the record changed meanwhile (another instance took it).
func (m *Manager) adopt(ctx context.Context, id string, rec Record, rev uint64, now time.Time) (Record, bool, error) {
	if m.cfg.Adopter == nil || !m.cfg.Adopter.Adoptable(ctx, id, rec) {
		return rec, false, nil
	}
	rec.Owner, rec.LeaseUntil, rec.UpdatedAt, rec.Attempt = m.cfg.Owner, now.Add(m.cfg.Lease), now, newAttempt()
	nrev, ok, err := m.cfg.Store.Update(ctx, id, rec.encode(), rev)
	if err != nil {
		if nrev, ok, err = m.settle(ctx, id, rec.Attempt, err); err != nil {
			return rec, false, err
		}
	}
	if !ok {
		return rec, false, errRaced
	}
	m.cfg.Adopter.Adopt(ctx, id, rec, m.hold(id, rec, nrev))
	return rec, true, nil
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil || cfg.Owner == "" {
		return nil, fmt.Errorf("%w: store and owner are required", ErrInvalidOption)
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Lease < 30*time.Millisecond {
		return nil, fmt.Errorf("%w: lease %s too short", ErrInvalidOption, cfg.Lease)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// Readers look at their generation's record every Lease/2 at most,
	// owners renew every Lease/3: a lease of silence is a gap in what this
	// instance saw.
	c := &contact{gap: cfg.Lease}
	cfg.Store = watchedStore{Store: cfg.Store, c: c, now: cfg.Now}
	return &Manager{cfg: cfg, contact: c, names: Names{store: cfg.Store, now: cfg.Now}}, nil
}

// Lease returns the configured lease duration.
func (m *Manager) Lease() time.Duration { return m.cfg.Lease }

// Decision is what a request with a key may do.
type Decision int

// Decisions.
const (
	Start  Decision = iota + 1 // run a new generation (the caller holds the lease)
	Attach                     // follow the generation in progress
	Replay                     // replay the completed generation
)

func (d Decision) String() string {
	switch d {
	case Start:
		return "start"
	case Attach:
		return "attach"
	case Replay:
		return "replay"
	}
	return "unknown"
}

// Request describes a request that carries a key.
type Request struct {
	ID          string // StreamID(tenant, key)
	Key         string
	Path        string
	Fingerprint string // Fingerprint(path, body)
	// BytesFingerprint is BytesFingerprint(path, body), for records
	// written by versions before Fingerprint.
	BytesFingerprint string
	Stream           bool
	// Tenant is the caller's tenant id: the record keeps its TenantHash,
	// so that an instance that adopts the generation logs it as its owner
	// did.
	Tenant string
	// Model is the model the request names ("" if none): the record keeps
	// it from the start, so that a generation salvaged or adopted after its
	// owner died is priced.
	Model string
	// Content is the ContentID of a keyless request ("" for a key the
	// client sent): the record keeps it (Record.Content).
	Content string
	// Caller is the caller, sealed (engine.Engine.SealCaller), for the
	// generation's upstream calls made on another instance after its
	// owner died; nil when they take nothing of it. The record keeps it
	// while the generation runs (Record.Caller).
	Caller []byte
}

// matches reports whether req is the request rec's key was first used
// with: by Fingerprint, or, in a record of a version before it, by
// BytesFingerprint.
func (rec Record) matches(req Request) bool {
	if rec.Fingerprint == "" {
		return rec.BytesFingerprint == req.BytesFingerprint
	}
	return rec.Fingerprint == req.Fingerprint
}

// Outcome is Begin's answer. Lease is set only for Start.
type Outcome struct {
	Decision Decision
	Record   Record
	Lease    *Lease
}

const maxCAS = 16

// Begin decides atomically what req may do. ErrMismatch when the key was used
// with another request.
func (m *Manager) Begin(ctx context.Context, req Request) (Outcome, error) {
	// Most keys are new: create the record first (one round trip), and
	// read it only when it exists.
	if out, ok, err := m.create(ctx, req); ok {
		return out, err
	}
	for range maxCAS {
		val, rev, found, err := m.cfg.Store.Get(ctx, req.ID)
		now := m.cfg.Now()
		if err != nil {
			return Outcome{}, err
		}
		if !found {
			if out, ok, err := m.create(ctx, req); ok {
				return out, err
			}
			continue
		}
		rec, err := decode(val)
		if err != nil {
			return Outcome{}, fmt.Errorf("resume: corrupt record: %w", err)
		}
		gone := m.gone(ctx, req.ID, rec)
		if gone { // expiring: the key is new again, for any body
			rec.Fingerprint, rec.BytesFingerprint, rec.Path, rec.CreatedAt = req.Fingerprint, req.BytesFingerprint, req.Path, now
		}
		if !rec.matches(req) {
			return Outcome{Record: rec}, ErrMismatch
		}
		switch {
		case rec.State == Completed && !gone:
			return Outcome{Decision: Replay, Record: rec}, nil
		case rec.State == InProgress && !m.lapsed(req.ID, rec, rev, now):
			return Outcome{Decision: Attach, Record: rec}, nil
		}
		if rec.State == InProgress { // lapsed
			if adopted, ok, err := m.adopt(ctx, req.ID, rec, rev, now); errors.Is(err, errRaced) {
				continue
			} else if err != nil {
				return Outcome{}, err
			} else if ok {
				return Outcome{Decision: Attach, Record: adopted}, nil
			}
			done, attached, err := m.expire(ctx, req.ID, rec, now)
			if err != nil {
				return Outcome{}, err
			}
			if done.State == Completed { // the dead owner's generation is the result
				if _, ok, err := m.cfg.Store.Update(ctx, req.ID, done.encode(), rev); err != nil {
					return Outcome{}, err
				} else if !ok {
					continue
				}
				m.cfg.Salvager.Salvaged(ctx, req.ID, done, attached)
				m.lost(Completed)
				return Outcome{Decision: Replay, Record: done}, nil
			}
		}
		lapsed := rec.State == InProgress
		// Failed, cancelled, gone, or in progress under a dead owner: a new
		// generation.
		rec.Generation++
		if rec.Fingerprint == "" { // an older version's record, matched by its bytes
			rec.Fingerprint = req.Fingerprint
		}
		rec.State = InProgress
		rec.Owner = m.cfg.Owner
		rec.LeaseUntil = now.Add(m.cfg.Lease)
		rec.Events, rec.Status, rec.ContentType, rec.Error, rec.Usage, rec.Upstream = 0, 0, "", "", nil, ""
		rec.Model, rec.Cost, rec.Call, rec.Attached, rec.Tenant = req.Model, nil, false, 0, TenantHash(req.Tenant)
		rec.Stream, rec.Caller = req.Stream, req.Caller
		if req.Content != "" {
			rec.Content = req.Content
		}
		rec.UpdatedAt = now
		rec.Attempt = newAttempt()
		nrev, ok, err := m.cfg.Store.Update(ctx, req.ID, rec.encode(), rev)
		if err != nil {
			nrev, ok, err = m.settle(ctx, req.ID, rec.Attempt, err)
			if err != nil {
				m.withdrawLater(req.ID, rec.Attempt) // the update may be applied late
				return Outcome{}, err
			}
		}
		if !ok { // changed meanwhile (or unapplied, and another writer got there): decide again
			continue
		}
		if lapsed {
			m.lost(Failed)
		}
		return Outcome{Decision: Start, Record: rec, Lease: m.hold(req.ID, rec, nrev)}, nil
	}
	return Outcome{}, ErrContended
}

// create starts generation 1 of a new key. ok is false when the key exists.
func (m *Manager) create(ctx context.Context, req Request) (Outcome, bool, error) {
	now := m.cfg.Now()
	rec := Record{
		Key: req.Key, State: InProgress, Fingerprint: req.Fingerprint, BytesFingerprint: req.BytesFingerprint, Generation: 1,
		Owner: m.cfg.Owner, LeaseUntil: now.Add(m.cfg.Lease), Path: req.Path, Stream: req.Stream, Model: req.Model,
		Tenant: TenantHash(req.Tenant), CreatedAt: now, UpdatedAt: now, Attempt: newAttempt(), Content: req.Content,
		Caller: req.Caller,
	}
	nrev, created, err := m.cfg.Store.Create(ctx, req.ID, rec.encode())
	if err != nil {
		nrev, created, err = m.settle(ctx, req.ID, rec.Attempt, err)
	}
	switch {
	case err != nil:
		m.withdrawLater(req.ID, rec.Attempt) // the create may be applied late
		return Outcome{}, true, err
	case !created:
		return Outcome{}, false, nil
	}
	return Outcome{Decision: Start, Record: rec, Lease: m.hold(req.ID, rec, nrev)}, true, nil
}

// settle resolves a write that got no answer (e.g. it was lost in a NATS
// failover): it may have been applied. The record says so by carrying
// attempt; then its revision is returned with applied true. A record
// written by anyone else means the write lost (applied false); otherwise
// werr stands.
func (m *Manager) settle(ctx context.Context, id, attempt string, werr error) (rev uint64, applied bool, err error) {
	val, rev, found, err := m.cfg.Store.Get(ctx, id)
	switch {
	case err != nil:
		return 0, false, errors.Join(werr, err)
	case !found:
		return 0, false, werr
	}
	rec, err := decode(val)
	switch {
	case err != nil:
		return 0, false, werr
	case rec.Attempt == attempt:
		return rev, true, nil
	}
	return 0, false, nil
}

func newAttempt() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Get returns a key's record. An in-progress record whose lease lapsed
// (contact.go) is marked failed (Error OwnerLost) before it is returned — or completed,
// when the Salvager finds the generation whole.
func (m *Manager) Get(ctx context.Context, id string) (Record, error) {
	rec, _, err := m.look(ctx, id, "")
	return rec, err
}

// look is Get; settled reports whether this look found the lease lapsed
// and settled the generation itself (adopted, completed or failed it).
// gone, when set, names an owner found gone (Check): a generation in
// progress under it is lapsed whatever its lease.
func (m *Manager) look(ctx context.Context, id, gone string) (rec Record, settled bool, err error) {
	for range maxCAS {
		val, rev, found, err := m.cfg.Store.Get(ctx, id)
		if err != nil {
			return Record{}, false, err
		}
		if !found {
			return Record{}, false, ErrNotFound
		}
		rec, err := decode(val)
		if err != nil {
			return Record{}, false, fmt.Errorf("resume: corrupt record: %w", err)
		}
		now := m.cfg.Now()
		if !m.lapsed(id, rec, rev, now) && !m.ownerGone(rec, gone) {
			if m.gone(ctx, id, rec) {
				return Record{}, false, ErrNotFound
			}
			return rec, false, nil
		}
		if adopted, ok, err := m.adopt(ctx, id, rec, rev, now); errors.Is(err, errRaced) {
			continue
		} else if err != nil {
			return Record{}, false, err
		} else if ok {
			return adopted, true, nil
		}
		rec, attached, err := m.expire(ctx, id, rec, now)
		if err != nil {
			return Record{}, false, err
		}
		if _, ok, err := m.cfg.Store.Update(ctx, id, rec.encode(), rev); err != nil {
			return Record{}, false, err
		} else if ok {
			if rec.State == Completed {
				m.cfg.Salvager.Salvaged(ctx, id, rec, attached)
			}
			m.lost(rec.State)
			return rec, true, nil
		}
	}
	return Record{}, false, ErrContended
}

// gone reports whether rec's finished generation is no longer whole in
// the journal (Config.Kept): its key is expiring.
func (m *Manager) gone(ctx context.Context, id string, rec Record) bool {
	if m.cfg.Kept == nil || rec.State == InProgress {
		return false
	}
	kept, err := m.cfg.Kept(ctx, id, rec)
	return err == nil && !kept
}

// lost tells Config.Lost of a lost owner's generation settled as state.
func (m *Manager) lost(state State) {
	if m.cfg.Lost != nil {
		m.cfg.Lost(state)
	}
}

// expire is what becomes of an expired generation: completed if the
// Salvager finds it whole (billed as it reports, its attached duplicates
// counted as saved: attached is their number), else failed with OwnerLost.
func (m *Manager) expire(ctx context.Context, id string, rec Record, now time.Time) (done Record, attached uint64, err error) {
	rec.UpdatedAt = now
	if m.cfg.Salvager != nil {
		res, ok, err := m.cfg.Salvager.Salvage(ctx, id, rec)
		if err != nil {
			return rec, 0, fmt.Errorf("resume: salvage: %w", err)
		}
		if ok {
			rec.State, rec.Events, rec.Status, rec.ContentType, rec.Error = res.State, res.Events, res.Status, res.ContentType, res.Error
			rec.Usage, rec.Cost, rec.Call = res.Usage, res.Cost, res.Call
			if res.Model != "" {
				rec.Model = res.Model
			}
			rec.bill(res.Usage, res.Cost, res.Call)
			attached = rec.Attached
			rec.save(rec.Attached, res.Cost, res.Call)
			rec.Attached = 0
			rec.Owner, rec.LeaseUntil, rec.Caller = "", time.Time{}, nil
			return rec, attached, nil
		}
	}
	// A usage an older owner kept in the record is of a generation that
	// did not complete: no result's.
	rec.State, rec.Error, rec.Usage, rec.Caller = Failed, OwnerLost, nil, nil
	return rec, 0, nil
}
