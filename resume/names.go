package resume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// Names is the index from an upstream's own id of a generation (a
// Responses response id) to its key, kept in the records' Store: the
// engine remembers each name as the upstream gives it, and a request that
// names it (GET /v1/responses/{id}) finds the key. It needs nothing of a
// Manager, so the engine is built before the Manager that adopts and
// salvages through it.
type Names struct {
	store Store
	now   func() time.Time
}

// NewNames returns the index kept in store.
func NewNames(store Store) *Names { return &Names{store: store, now: time.Now} }

type contentEntry struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

// remember records that the index entry contentID (a name) leads to key.
// A later one replaces it.
func (n *Names) remember(ctx context.Context, contentID, key string) error {
	val, _ := json.Marshal(contentEntry{Key: key, At: n.now()})
	for range maxCAS {
		if _, created, err := n.store.Create(ctx, contentID, val); err != nil || created {
			return err
		}
		_, rev, found, err := n.store.Get(ctx, contentID)
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		if _, updated, err := n.store.Update(ctx, contentID, val, rev); err != nil || updated {
			return err
		}
	}
	return ErrContended
}

// lookup returns the key contentID led to within the last window.
func (n *Names) lookup(ctx context.Context, contentID string, window time.Duration) (string, bool, error) {
	val, _, found, err := n.store.Get(ctx, contentID)
	if err != nil || !found {
		return "", false, err
	}
	var e contentEntry
	if json.Unmarshal(val, &e) != nil || e.Key == "" || n.now().Sub(e.At) > window {
		return "", false, nil
	}
	return e.Key, true, nil
}

// NameID names an upstream's own id of a generation (a Responses response
// id) within tenant, for the index that leads from it to the key.
func NameID(tenant, name string) string {
	h := sha256.New()
	h.Write([]byte("name"))
	h.Write([]byte{0})
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return "n" + hex.EncodeToString(h.Sum(nil)[:16])
}

// RememberName records that the upstream named tenant's key's generation
// name.
func (n *Names) RememberName(ctx context.Context, tenant, name, key string) error {
	return n.remember(ctx, NameID(tenant, name), key)
}

// LookupName returns the key whose generation the upstream named name.
func (n *Names) LookupName(ctx context.Context, tenant, name string) (string, bool, error) {
	return n.lookup(ctx, NameID(tenant, name), 1<<62) // the records' TTL bounds it
}

// LookupName is Names.LookupName on the Manager's store.
func (m *Manager) LookupName(ctx context.Context, tenant, name string) (string, bool, error) {
	return m.names.LookupName(ctx, tenant, name)
}
