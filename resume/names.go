package resume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

type contentEntry struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

// remember records that the index entry contentID (a name) leads to key.
// A later one replaces it.
func (m *Manager) remember(ctx context.Context, contentID, key string) error {
	val, _ := json.Marshal(contentEntry{Key: key, At: m.cfg.Now()})
	for range maxCAS {
		if _, created, err := m.cfg.Store.Create(ctx, contentID, val); err != nil || created {
			return err
		}
		_, rev, found, err := m.cfg.Store.Get(ctx, contentID)
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		if _, updated, err := m.cfg.Store.Update(ctx, contentID, val, rev); err != nil || updated {
			return err
		}
	}
	return ErrContended
}

// lookup returns the key contentID led to within the last window.
func (m *Manager) lookup(ctx context.Context, contentID string, window time.Duration) (string, bool, error) {
	val, _, found, err := m.cfg.Store.Get(ctx, contentID)
	if err != nil || !found {
		return "", false, err
	}
	var e contentEntry
	if json.Unmarshal(val, &e) != nil || e.Key == "" || m.cfg.Now().Sub(e.At) > window {
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
func (m *Manager) RememberName(ctx context.Context, tenant, name, key string) error {
	return m.remember(ctx, NameID(tenant, name), key)
}

// LookupName returns the key whose generation the upstream named name.
func (m *Manager) LookupName(ctx context.Context, tenant, name string) (string, bool, error) {
	return m.lookup(ctx, NameID(tenant, name), 1<<62) // the records' TTL bounds it
}
