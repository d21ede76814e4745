package resume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"
)

// ContentID names a tenant's request body for the content index, which
// lets an SDK retry that carries no key find the key reprise made for the
// original request.
func ContentID(tenant, fingerprint string) string {
	h := sha256.New()
	h.Write([]byte("content"))
	h.Write([]byte{0})
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(fingerprint))
	return "c" + hex.EncodeToString(h.Sum(nil)[:16])
}

type contentEntry struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
}

// RememberContent records that the keyless request contentID was given key.
// A later request with the same content replaces the entry.
func (m *Manager) RememberContent(ctx context.Context, contentID, key string) error {
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

// LookupContent returns the key given to contentID within the last window.
func (m *Manager) LookupContent(ctx context.Context, contentID string, window time.Duration) (string, bool, error) {
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
