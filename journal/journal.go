package journal

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
	DefaultMaxPending = 4096
	// DefaultAckTimeout bounds the wait for one append's acknowledgement.
	DefaultAckTimeout = 10 * time.Second
	subjectPrefix     = "reprise.ev."
)

// Sentinel errors. Match them with errors.Is.
var (
	ErrNotFound      = errors.New("journal: not found")
	ErrConflict      = errors.New("journal: revision conflict")
	ErrFenced        = errors.New("journal: generation already written by another writer")
	ErrClosed        = errors.New("journal: writer closed")
	ErrInvalidOption = errors.New("journal: invalid option")
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
}

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
	if c.TTL < time.Second {
		return fmt.Errorf("%w: ttl %s below 1s", ErrInvalidOption, c.TTL)
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("%w: replicas %d not in 1..5", ErrInvalidOption, c.Replicas)
	}
	return nil
}

// Journal is a handle on the JetStream stream and KV bucket.
type Journal struct {
	cfg    Config
	js     jetstream.JetStream
	stream jetstream.Stream
	kv     jetstream.KeyValue
}

// Ref names one generation of one stream id.
type Ref struct {
	ID  string // opaque, subject-safe id ([A-Za-z0-9_-])
	Gen uint64
}

func (r Ref) subject() string {
	return subjectPrefix + r.ID + "." + strconv.FormatUint(r.Gen, 10)
}

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
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "reprise: journaled upstream events, one subject per (id, generation)",
		Subjects:    []string{subjectPrefix + ">"},
		Storage:     storage,
		Replicas:    cfg.Replicas,
		MaxAge:      cfg.TTL,
		Duplicates:  time.Second, // no message ids are sent; keep the window minimal
		AllowDirect: true,
		Discard:     jetstream.DiscardOld,
	})
	if err != nil {
		return nil, fmt.Errorf("journal: stream %s: %w", cfg.Stream, err)
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "reprise: key records",
		History:     1,
		TTL:         cfg.TTL,
		Storage:     storage,
		Replicas:    cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("journal: bucket %s: %w", cfg.Bucket, err)
	}
	return &Journal{cfg: cfg, js: js, stream: st, kv: kv}, nil
}

// Ready reports whether JetStream answers.
func (j *Journal) Ready(ctx context.Context) error {
	if _, err := j.stream.Info(ctx); err != nil {
		return fmt.Errorf("journal: not ready: %w", err)
	}
	return nil
}

// TTL is the retention of events and records.
func (j *Journal) TTL() time.Duration { return j.cfg.TTL }
