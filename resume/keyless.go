package resume

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"
)

// Keyless requests. Most clients send no Idempotency-Key: each of their
// requests gets a fresh key (NewKey). A client that loses a request's
// answer sends the same request again — an agent CLI, a script, an SDK —
// and that retry must not generate (and bill) again. What tells a retry
// from a new request of the same content is whether the earlier client got
// its result: a request whose client left before it (the connection ended
// before the terminal event was written, a non-streamed caller went away
// before the answer) leaves its key behind, in its content's entry; the
// next request of the same content takes it (Claim) and attaches to or
// replays that key's generation. A client that received its result leaves
// nothing: the same request again (a "regenerate") is new, and so are
// identical requests whose clients are all still connected (parallel
// sampling).

// maxLeft bounds the keys one content's entry holds: clients that left
// before their results, most recent last.
const maxLeft = 16

// ContentID names a keyless request's content for the keyless index: the
// tenant, the client's session (its session header, "" if none: a session
// narrows the match, it never widens it) and the request's fingerprint.
func ContentID(tenant, session, fingerprint string) string {
	h := sha256.New()
	for _, part := range []string{"keyless", tenant, session, fingerprint} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return "c" + hex.EncodeToString(h.Sum(nil)[:16])
}

// keylessEntry is a content's entry in the keyless index: the keys of its
// requests whose clients left before their results, unclaimed.
type keylessEntry struct {
	Left []leftKey `json:"left"`
}

type leftKey struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"` // when its client left
}

// Left records that the client of the request of content contentID, which
// got key, left before its result: for window, the next request of the
// same content is its retry (Claim). Entries older than window are dropped.
func (m *Manager) Left(ctx context.Context, contentID, key string, window time.Duration) error {
	return m.changeKeyless(ctx, contentID, func(e *keylessEntry, now time.Time) bool {
		e.Left = slices.DeleteFunc(e.Left, func(l leftKey) bool { return l.Key == key || now.Sub(l.At) > window })
		e.Left = append(e.Left, leftKey{Key: key, At: now})
		if len(e.Left) > maxLeft {
			e.Left = e.Left[len(e.Left)-maxLeft:]
		}
		return true
	})
}

// Claim takes the key of the latest request of content contentID whose
// client left before its result within window, and reports whether there
// was one. A key is claimed once: of two retries of it, the second is a
// new request — unless the first leaves too.
func (m *Manager) Claim(ctx context.Context, contentID string, window time.Duration) (key string, ok bool, err error) {
	err = m.changeKeyless(ctx, contentID, func(e *keylessEntry, now time.Time) bool {
		key, ok = "", false
		for i := len(e.Left) - 1; i >= 0; i-- {
			if now.Sub(e.Left[i].At) <= window {
				key, ok = e.Left[i].Key, true
				e.Left = slices.Delete(e.Left, i, i+1)
				return true
			}
		}
		return false
	})
	if err != nil {
		return "", false, err
	}
	return key, ok, nil
}

// Received records that key's result reached a client after all (it
// resumed, or read the Location): the request of content contentID is
// answered, and the same request again is new.
func (m *Manager) Received(ctx context.Context, contentID, key string) error {
	return m.changeKeyless(ctx, contentID, func(e *keylessEntry, _ time.Time) bool {
		n := len(e.Left)
		e.Left = slices.DeleteFunc(e.Left, func(l leftKey) bool { return l.Key == key })
		return len(e.Left) != n
	})
}

// changeKeyless applies change to contentID's entry under CAS; change
// reports whether it changed anything to write. An absent entry is empty,
// and created only when change writes.
func (m *Manager) changeKeyless(ctx context.Context, contentID string, change func(*keylessEntry, time.Time) bool) error {
	for range maxCAS {
		val, rev, found, err := m.cfg.Store.Get(ctx, contentID)
		if err != nil {
			return err
		}
		var e keylessEntry
		if found {
			_ = json.Unmarshal(val, &e) // an entry that does not decode (an older version's) holds nothing
		}
		if !change(&e, m.cfg.Now()) {
			return nil
		}
		b, _ := json.Marshal(e) // an entry always marshals
		var ok bool
		if found {
			_, ok, err = m.cfg.Store.Update(ctx, contentID, b, rev)
		} else {
			_, ok, err = m.cfg.Store.Create(ctx, contentID, b)
		}
		if err != nil || ok {
			return err
		}
	}
	return ErrContended
}
