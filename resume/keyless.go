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
// narrows the match, it never widens it) and the request's fingerprint
// without its stream fields (StreamlessFingerprint): a request asked
// streamed and its non-streamed fallback share an entry, and each left
// request in it says which it was (Leaving).
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
	Leaving
	At time.Time `json:"at"` // when its client left
}

// Leaving is a request whose client left before its result, as the keyless
// index keeps it.
type Leaving struct {
	// Key is the key the request got.
	Key string `json:"key"`
	// Fingerprint is its Fingerprint, stream fields included ("" in an
	// entry of an earlier version: any request of the content matches).
	Fingerprint string `json:"fp,omitempty"`
	// Stream: it asked for an event stream.
	Stream bool `json:"stream,omitempty"`
}

// Left records that the client of request l, of content contentID, left
// before its result: for window, the next request of the same content is
// its retry (Claim). Entries older than window are dropped.
func (m *Manager) Left(ctx context.Context, contentID string, l Leaving, window time.Duration) error {
	key := l.Key
	return m.changeKeyless(ctx, contentID, func(e *keylessEntry, now time.Time) bool {
		e.Left = slices.DeleteFunc(e.Left, func(l leftKey) bool { return l.Key == key || now.Sub(l.At) > window })
		e.Left = append(e.Left, leftKey{Leaving: l, At: now})
		if len(e.Left) > maxLeft {
			e.Left = e.Left[len(e.Left)-maxLeft:]
		}
		return true
	})
}

// Claim takes the latest request of content contentID whose client left
// before its result within window and that a request of fingerprint fp
// (streamed or not) retries, and reports whether there was one: one of the
// same fingerprint; else, for a request not streamed when fallback is set,
// a streamed one (the non-streamed fallback of a broken stream). A left
// request is claimed once: of two retries of it, the second is a new
// request — unless the first leaves too, or gives it back (Left again).
func (m *Manager) Claim(ctx context.Context, contentID, fp string, stream, fallback bool, window time.Duration) (left Leaving, ok bool, err error) {
	err = m.changeKeyless(ctx, contentID, func(e *keylessEntry, now time.Time) bool {
		left, ok = Leaving{}, false
		take := func(match func(leftKey) bool) bool {
			for i := len(e.Left) - 1; i >= 0; i-- {
				if l := e.Left[i]; now.Sub(l.At) <= window && match(l) {
					left, ok = l.Leaving, true
					e.Left = slices.Delete(e.Left, i, i+1)
					return true
				}
			}
			return false
		}
		return take(func(l leftKey) bool { return l.Fingerprint == fp || l.Fingerprint == "" }) ||
			!stream && fallback && take(func(l leftKey) bool { return l.Stream })
	})
	if err != nil {
		return Leaving{}, false, err
	}
	return left, ok, nil
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
