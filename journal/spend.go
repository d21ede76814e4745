package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// spendTTL is how long an instance's spend entry is kept after its last
// write: longer than the day and hour the cost guard looks back.
const spendTTL = 26 * time.Hour

// Spend is the fleet's spend ledger (cost.Fleet): a KV bucket beside the
// records where each instance keeps its own spend per minute under its own
// key — no two instances write one key, so nothing contends — and reads
// every other instance's.
type Spend struct {
	kv  jetstream.KeyValue
	key string
}

// Spend opens the fleet's spend ledger (creating its bucket, the records
// bucket's name with a _spend suffix) for the instance named instance.
func (j *Journal) Spend(ctx context.Context, instance string) (*Spend, error) {
	kv, err := j.ledger(ctx, "_spend", "reprise: each instance's spend per minute, for the fleet's cost guard", spendTTL)
	if err != nil {
		return nil, err
	}
	return &Spend{kv: kv, key: spendKey(instance)}, nil
}

// ledger creates (or updates) a bucket beside the records, the records
// bucket's name with suffix, where each instance keeps one entry of its
// own for ttl after its last write.
func (j *Journal) ledger(ctx context.Context, suffix, description string, ttl time.Duration) (jetstream.KeyValue, error) {
	storage := jetstream.FileStorage
	if j.cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	bucket := j.cfg.Bucket + suffix
	kv, err := j.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: description,
		History:     1,
		TTL:         ttl,
		Storage:     storage,
		Replicas:    j.cfg.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("journal: bucket %s: %w", bucket, err)
	}
	return kv, nil
}

// spendKey is instance as a KV key: characters keys do not allow become _.
func spendKey(instance string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, instance)
}

// Publish stores this instance's spend per minute (Unix minutes).
func (s *Spend) Publish(ctx context.Context, minutes map[int64]float64) error {
	b, err := json.Marshal(minutes)
	if err == nil {
		_, err = s.kv.Put(ctx, s.key, b)
	}
	if err != nil {
		return fmt.Errorf("journal: publish spend: %w", err)
	}
	return nil
}

// Others returns every other instance's spend per minute, summed.
func (s *Spend) Others(ctx context.Context) (map[int64]float64, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("journal: read spend: %w", err)
	}
	defer func() { _ = w.Stop() }()
	sum := map[int64]float64{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("journal: read spend: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("journal: read spend: the watch ended")
			}
			if e == nil { // every current entry was delivered
				return sum, nil
			}
			if e.Key() == s.key {
				continue
			}
			var minutes map[int64]float64
			if json.Unmarshal(e.Value(), &minutes) != nil {
				continue // not an instance's: ignored
			}
			for m, v := range minutes {
				sum[m] += v
			}
		}
	}
}

// keySpendTTL is how long an instance's per-key spend is kept after its
// last write: longer than the month a proxy key's budget may cover.
const keySpendTTL = 32 * 24 * time.Hour

// KeySpend is the fleet's per-key spend ledger (cost.KeyFleet): a KV
// bucket beside the records where each instance keeps its own spend per
// proxy key and window under its own key, and watches every other
// instance's.
type KeySpend struct {
	kv  jetstream.KeyValue
	key string
}

// KeySpend opens the fleet's per-key spend ledger (creating its bucket,
// the records bucket's name with a _keyspend suffix) for the instance
// named instance.
func (j *Journal) KeySpend(ctx context.Context, instance string) (*KeySpend, error) {
	kv, err := j.ledger(ctx, "_keyspend", "reprise: each instance's spend per proxy key and window, for the keys' budgets", keySpendTTL)
	if err != nil {
		return nil, err
	}
	return &KeySpend{kv: kv, key: spendKey(instance)}, nil
}

// Publish stores this instance's spend: proxy key (a tenant hash) →
// window id → spend.
func (s *KeySpend) Publish(ctx context.Context, spend map[string]map[string]float64) error {
	b, err := json.Marshal(spend)
	if err == nil {
		_, err = s.kv.Put(ctx, s.key, b)
	}
	if err != nil {
		return fmt.Errorf("journal: publish key spend: %w", err)
	}
	return nil
}

// Watch calls seen with every other instance's spend as it is now and as
// it changes (nil: the instance's entry went), until ctx ends (nil) or the
// watch fails.
func (s *KeySpend) Watch(ctx context.Context, seen func(instance string, spend map[string]map[string]float64)) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("journal: watch key spend: %w", err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("journal: watch key spend: the watch ended")
			}
			if e == nil || e.Key() == s.key {
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				seen(e.Key(), nil)
				continue
			}
			var spend map[string]map[string]float64
			if json.Unmarshal(e.Value(), &spend) != nil {
				continue // not an instance's: ignored
			}
			seen(e.Key(), spend)
		}
	}
}
