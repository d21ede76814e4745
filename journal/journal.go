package journal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults for Config.
const (
	DefaultStream   = "REPRISE_EVENTS"
	DefaultBucket   = "reprise_records"
	DefaultTTL      = 24 * time.Hour
	DefaultReplicas = 1
	// DefaultMaxPending bounds unacknowledged asynchronous publishes.
	DefaultMaxPending = 16384
	// DefaultAckTimeout bounds the wait for one append's acknowledgement.
	DefaultAckTimeout = 10 * time.Second
	// DefaultAppendTimeout is how long a Writer keeps trying to store a
	// message (through reconnects and leader elections) before the
	// generation fails.
	DefaultAppendTimeout = 30 * time.Second
	subjectPrefix        = "reprise.ev."
)

// Sentinel errors. Match them with errors.Is.
var (
	ErrNotFound      = errors.New("journal: not found")
	ErrConflict      = errors.New("journal: revision conflict")
	ErrFenced        = errors.New("journal: generation already written by another writer")
	ErrClosed        = errors.New("journal: writer closed")
	ErrInvalidOption = errors.New("journal: invalid option")
	ErrGap           = errors.New("journal: events missing from the generation")
)

// Config configures Open.
type Config struct {
	// Stream is the JetStream stream name. Default DefaultStream.
	Stream string
	// Bucket is the KV bucket for records. Default DefaultBucket.
	Bucket string
	// TTL is how long events and records are kept. Default DefaultTTL.
	TTL time.Duration
	// Replicas is the replication factor of the stream and bucket. Default 1.
	Replicas int
	// Memory selects memory storage instead of file storage. Default false.
	Memory bool
	// AppendTimeout is how long a Writer keeps trying to store a message
	// before the generation fails. Default DefaultAppendTimeout.
	AppendTimeout time.Duration
	// OnAppend, when set, is told how long each stored message took to
	// append (its retries included). It must not block. Default: none.
	OnAppend func(time.Duration)
	// OnOpenRetry, when set, is told of each attempt of Open that failed
	// and is tried again (attempt counts from 1), with its error: a
	// cluster still electing its leader, or one that cannot hold the
	// replicas asked for. Default: none.
	OnOpenRetry func(attempt int, err error)
	// Linger is how long a Writer may hold events already shown (Writer.
	// AppendShown) for more to share their message while readers on other
	// instances follow its generation: they see lingering events up to
	// Linger later. Nothing waits on it that a reader is waiting for: an
	// event shown only once stored (Append, End) is sent at once, with
	// whatever lingers before it. Default DefaultLinger; negative: none.
	Linger time.Duration
	// LingerAlone is Linger while no reader on another instance follows the
	// generation (watch.go): only the owner's readers, who saw the events
	// already, so a live stream's tokens, tens of milliseconds apart, share
	// one publish for many. A reader elsewhere that starts following cuts
	// it to Linger at once. Default DefaultLingerAlone; negative, or below
	// Linger: Linger.
	LingerAlone time.Duration
	// MaxReads bounds the batched gets this instance's readers have in
	// flight at once (each brings at most 1 MiB): the others wait their
	// turn, so a thousand long replays queue instead of flooding the
	// connection. Reads that have brought little so far (a resume's first
	// events, a short replay) take turns in a lane of their own, as wide:
	// they do not wait behind long replays. In each lane the turns go
	// round the tenants whose readers wait (Read's For). Default
	// DefaultMaxReads (16).
	MaxReads int
	// Records, when set, is the connection the key records (Get, Create,
	// Update: the resume decisions and the owners' lease renewals) go
	// over. On a connection of their own they do not queue behind the
	// events this instance publishes — in the client's buffers and the
	// server's reading of one connection — so a lease is renewed on time
	// while the events are behind. Open does not close it. Default: the
	// journal's connection.
	Records *nats.Conn
	// ShortReads, when set, is the connection the gets of the short
	// reads' lane (MaxReads: a reader's first, a short replay's) go
	// over. On a connection of their own their replies do not queue
	// behind the long reads' (up to MaxReads of 1 MiB each, in the
	// client's buffers and the server's writing to one connection): a
	// small replay beside thousands of long ones waited tens to hundreds
	// of milliseconds there. Open does not close it. Default: the
	// journal's connection.
	ShortReads *nats.Conn
}

// DefaultLinger is Config.Linger's default: about two tokens of a
// 50-token/s stream.
const DefaultLinger = 40 * time.Millisecond

// DefaultLingerAlone is Config.LingerAlone's default: fifty tokens of a
// 50-token/s stream.
const DefaultLingerAlone = time.Second

func (c *Config) fill() error {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.AppendTimeout == 0 {
		c.AppendTimeout = DefaultAppendTimeout
	}
	if c.MaxReads == 0 {
		c.MaxReads = DefaultMaxReads
	}
	switch {
	case c.Linger == 0:
		c.Linger = DefaultLinger
	case c.Linger < 0:
		c.Linger = 0
	}
	if c.LingerAlone == 0 {
		c.LingerAlone = DefaultLingerAlone
	}
	c.LingerAlone = max(c.LingerAlone, c.Linger)
	if c.TTL < time.Second {
		return fmt.Errorf("%w: ttl %s below 1s", ErrInvalidOption, c.TTL)
	}
	if c.AppendTimeout < 0 {
		return fmt.Errorf("%w: negative append timeout", ErrInvalidOption)
	}
	if c.MaxReads < 0 {
		return fmt.Errorf("%w: negative max reads", ErrInvalidOption)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("%w: replicas %d not in 1..5", ErrInvalidOption, c.Replicas)
	}
	return nil
}

// Journal is a handle on the JetStream stream and KV bucket.
type Journal struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	kv     jetstream.KeyValue
	// watchKV is the bucket on the events' connection: a watch of every
	// record (WatchRecords) never queues lease renewals behind it.
	watchKV jetstream.KeyValue
	// maxFrame bounds a message's packed events: the server's max_payload
	// holds the headers too.
	maxFrame int
	// maxEvent is the largest event (type and data) one message holds.
	maxEvent int
	live     *hub   // the topics this instance's readers follow
	reads    *lanes // the turns of this instance's readers' gets
	direct   string // the subject of the stream's direct gets
	lag      lag    // this instance's writers, for Lag
	conn     conn   // the connection's reconnects, for OwnerGone

	appendRetries, readRetries, recordRetries atomic.Uint64
	appendErrors, appendStalls                atomic.Uint64
	full                                      atomic.Bool // the last write was refused for want of storage (full.go)
}

// Stats counts the failures the journal rode out by trying again, and
// the reads waiting for their turn.
type Stats struct {
	AppendRetries uint64 // messages published again (no answer, an election, a lost acknowledgement)
	ReadRetries   uint64 // reader gets asked again
	RecordRetries uint64 // record operations asked again
	AppendErrors  uint64 // messages that could not be stored (the generation failed)
	AppendStalls  uint64 // writers that stalled: a message got no answer for the append timeout (Writer.Stalled)
	ReadsWaiting  uint64 // reader gets waiting for their turn now (Config.MaxReads)
}

// Stats returns the counts since Open.
func (j *Journal) Stats() Stats {
	return Stats{AppendRetries: j.appendRetries.Load(), ReadRetries: j.readRetries.Load(), RecordRetries: j.recordRetries.Load(), AppendErrors: j.appendErrors.Load(),
		AppendStalls: j.appendStalls.Load(),
		ReadsWaiting: uint64(j.reads.waiting())}
}

// Ref names one generation of one stream id.
type Ref struct {
	ID  string // opaque, subject-safe id ([A-Za-z0-9_-])
	Gen uint64
}

func (r Ref) subject() string {
	return subjectPrefix + r.ID + "." + strconv.FormatUint(r.Gen, 10)
}

// ConnectOptions are the options a connection the Journal uses should be
// opened with (nats.Connect(url, append(opts, journal.ConnectOptions()...)...)).
// A reader's batched get takes a synchronous subscription, whose channel
// nats.go sizes by the connection's SyncQueueLen: 65,536 slots by default,
// a 512 KiB allocation per get that made a resume's first read cost ~2 ms
// of allocation and GC. A get brings at most getBatch messages and its
// end-of-batch sentinel (its subscription's pending limits say so);
// nothing else of reprise subscribes synchronously.
// A connection opened without them works, slower.
func ConnectOptions() []nats.Option {
	return []nats.Option{nats.SyncQueueLen(syncQueueLen)}
}

// syncQueueLen holds a batched get's messages with room to spare.
const syncQueueLen = 4 * getBatch

// Open creates (or updates) the stream and bucket and returns a Journal.
func Open(ctx context.Context, nc *nats.Conn, cfg Config) (*Journal, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(DefaultMaxPending),
		jetstream.WithPublishAsyncTimeout(DefaultAckTimeout))
	if err != nil {
		return nil, fmt.Errorf("journal: jetstream: %w", err)
	}
	storage := jetstream.FileStorage
	if cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	// A fresh cluster may still be electing its leader, and replicas
	// starting together race to create the same assets: retry any error
	// until ctx ends (the options were checked by fill). create's own last
	// outcome decides: failsafe would answer ctx's error even after a
	// create that succeeded.
	var st jetstream.Stream
	var kv jetstream.KeyValue
	rp := retrypolicy.NewBuilder[any]().
		WithBackoff(100*time.Millisecond, 2*time.Second).
		WithMaxAttempts(-1).
		AbortIf(func(_ any, err error) bool { return settledRefusal(err) }).
		OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[any]) {
			if cfg.OnOpenRetry != nil {
				cfg.OnOpenRetry(e.Attempts(), e.LastError())
			}
		}).
		Build()
	_ = failsafe.With(rp).WithContext(ctx).Run(func() error {
		st, kv, err = create(ctx, js, cfg, storage)
		return err
	})
	if err != nil {
		return nil, err
	}
	watchKV := kv
	if cfg.Records != nil {
		if kv, err = recordsOn(ctx, cfg.Records, cfg.Bucket); err != nil {
			return nil, err
		}
	}
	j := &Journal{cfg: cfg, nc: nc, js: js, stream: st, kv: kv, watchKV: watchKV, maxFrame: frameLimit(nc.MaxPayload()), maxEvent: eventLimit(nc.MaxPayload())}
	j.conn.reconnects = nc.Stats().Reconnects
	j.live = &hub{j: j, topics: map[string]*topic{}}
	if j.reads, err = newLanes(cfg.MaxReads); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	j.direct = directSubject(js.Options().APIPrefix, cfg.Stream)
	j.lag.writers, j.lag.bySubject = map[*Writer]struct{}{}, map[string]*Writer{}
	if err := j.hearWatches(); err != nil {
		return nil, fmt.Errorf("journal: listen for watches: %w", err)
	}
	return j, nil
}

// codeReplicasNotSupported: a server that is not clustered refuses
// replicas (nats-server's JSStreamReplicasNotSupportedErr).
const codeReplicasNotSupported jetstream.ErrorCode = 10074

// settledRefusal reports whether JetStream refused Open's assets in a way
// asking again cannot change: replicas on a server that is not clustered.
func settledRefusal(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == codeReplicasNotSupported
}

func create(ctx context.Context, js jetstream.JetStream, cfg Config, storage jetstream.StorageType) (jetstream.Stream, jetstream.KeyValue, error) {
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.CreateOrUpdateStream(actx, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "reprise: journaled upstream events, one subject per (id, generation); the attempt log, one subject per id",
		Subjects:    []string{subjectPrefix + ">", attemptPrefix + ">"},
		Storage:     storage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.TTL,
		Duplicates:  time.Second, // no message ids are sent (writers chain by sequence); keep the window minimal
		AllowDirect: true,
		Discard:     jetstream.DiscardOld,
		// No RePublish: readers follow live generations on core NATS
		// messages their writers publish while watched (live.go); an
		// update drops the RePublish a stream made before had.
	})
	if err != nil {
		return nil, nil, fmt.Errorf("journal: stream %s: %w", cfg.Stream, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(actx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "reprise: key records",
		History:     1,
		TTL:         cfg.TTL,
		Storage:     storage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("journal: bucket %s: %w", cfg.Bucket, err)
	}
	return st, kv, nil
}

// recordsOn binds the bucket on nc, the connection of Config.Records.
func recordsOn(ctx context.Context, nc *nats.Conn, bucket string) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("journal: records connection: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("journal: bucket %s on the records connection: %w", bucket, err)
	}
	return kv, nil
}

// frameLimit is maxFrame for a server whose max_payload is payload.
func frameLimit(payload int64) int {
	return int(max(min(maxFrame, payload-frameRoom), 1024))
}

// eventLimit is the largest event (type and data) that a server whose
// max_payload is payload stores: one alone in a message, with its headers
// and length prefixes.
func eventLimit(payload int64) int {
	return int(max(payload-frameRoom-lengthPrefixes, 0))
}

// MaxEventSize is the most type and data bytes one event may hold: an
// event goes whole into one message, and the NATS server (as connected at
// Open) refuses a message over its max_payload. An Append of a larger
// event fails the writer.
func (j *Journal) MaxEventSize() int { return j.maxEvent }

// Ready reports whether JetStream can take writes: the account answers,
// the stream has a leader, and a record can be stored (which needs a
// quorum of the bucket's replicas, and room in the store).
func (j *Journal) Ready(ctx context.Context) error {
	if _, err := j.js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("journal: not ready: %w", err)
	}
	info, err := j.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("journal: not ready: %w", err)
	}
	if info.Cluster != nil && info.Cluster.Leader == "" {
		return errors.New("journal: not ready: the stream has no leader")
	}
	return j.writable(ctx)
}

// Last returns the last stored event of a generation (its end marker once
// it ended), or ErrNotFound.
func (j *Journal) Last(ctx context.Context, ref Ref) (Event, error) {
	f, err := j.lastFrame(ctx, ref)
	if err != nil {
		return Event{}, err
	}
	return f.events[len(f.events)-1], nil
}

// Note returns the note stored with ref's generation's last noted event
// (Writer.AppendNoted), as its last message carries it: "" when it has
// none; ErrNotFound when nothing is stored.
func (j *Journal) Note(ctx context.Context, ref Ref) (string, error) {
	f, err := j.lastFrame(ctx, ref)
	if err != nil {
		return "", err
	}
	return f.note, nil
}

// Progress is how far a generation's journal has got, as any instance reads
// it back.
type Progress struct {
	// Events is how many events are stored, the end marker not counted.
	Events uint64
	// Ended reports whether the end marker is stored.
	Ended bool
	// At is when JetStream stored the last message.
	At time.Time
}

// Progress returns how far ref's generation is stored: one get of its last
// message. A generation with nothing stored yet has zero Progress and no
// error.
func (j *Journal) Progress(ctx context.Context, ref Ref) (Progress, error) {
	m, err := j.stream.GetLastMsgForSubject(ctx, ref.subject())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Progress{}, nil
	}
	f, err := storedFrame(m, err)
	if errors.Is(err, ErrNotFound) {
		return Progress{}, nil
	}
	if err != nil {
		return Progress{}, err
	}
	last := f.events[len(f.events)-1]
	p := Progress{Events: last.Offset, At: m.Time}
	if last.IsEnd() {
		p.Events, p.Ended = last.Offset-1, true
	}
	return p, nil
}

// First returns the first stored event of a generation, or ErrNotFound.
func (j *Journal) First(ctx context.Context, ref Ref) (Event, error) {
	f, err := storedFrame(j.stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(ref.subject())))
	if err != nil {
		return Event{}, err
	}
	return f.events[0], nil
}

// lastFrame returns the last message stored on ref's subject.
func (j *Journal) lastFrame(ctx context.Context, ref Ref) (frame, error) {
	return storedFrame(j.stream.GetLastMsgForSubject(ctx, ref.subject()))
}

// storedFrame decodes a message got from the stream; ErrNotFound when there
// is none (or it is not an event frame).
func storedFrame(m *jetstream.RawStreamMsg, err error) (frame, error) {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return frame{}, ErrNotFound
	}
	if err != nil {
		return frame{}, fmt.Errorf("journal: get message: %w", err)
	}
	f, ok := decode(m.Header, m.Data, m.Sequence)
	if !ok {
		return frame{}, ErrNotFound
	}
	return f, nil
}

// AppendTimeout is how long a Writer keeps trying to store a message.
func (j *Journal) AppendTimeout() time.Duration { return j.cfg.AppendTimeout }

// TTL is how long events and records are kept.
func (j *Journal) TTL() time.Duration { return j.cfg.TTL }
