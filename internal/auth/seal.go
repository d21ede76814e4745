package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
)

// Sealing a caller. A generation running in the background upstream
// outlives its owner: the instance that takes it over asks the upstream
// for the rest of its stream (a resume) or to stop it (a cancel) on behalf
// of the generation's caller — with that caller's credential in
// Passthrough, the only mode where the upstream's credential is the
// caller's. Whoever happens to find the owner dead (a capability URL's
// reader without headers, a caller of another tenant holding one) is not
// that caller. So the credential is kept with the key's record, sealed:
// AES-256-GCM under a key derived from the server secret, with the key's
// stream id as additional data, so a sealed caller copied to another key
// does not open. Every instance shares the secret; the record never holds
// the credential in clear, and nothing shows it.

// forwarded are the caller's headers Decorate forwards in Passthrough.
var forwarded = []string{"Authorization", "X-Api-Key", "Api-Key", "OpenAI-Organization", "OpenAI-Project"}

// ErrSealed is returned by Open for a sealed caller it cannot open: made
// under another secret, for another id, or damaged.
var ErrSealed = errors.New("auth: sealed caller does not open")

// Seal returns what Decorate takes of caller, sealed for the key whose
// stream id is id; nil when Decorate takes nothing of it (Static and None
// send the proxy's own key) or caller sends none of it.
func (a *Auth) Seal(id string, caller http.Header) []byte {
	if a.cfg.Mode != Passthrough {
		return nil
	}
	kept := http.Header{}
	for _, h := range forwarded {
		if v := caller.Values(h); len(v) > 0 {
			kept[http.CanonicalHeaderKey(h)] = v
		}
	}
	if len(kept) == 0 {
		return nil
	}
	plain, err := json.Marshal(kept)
	if err != nil {
		return nil // a header map always marshals
	}
	aead := a.aead
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	_, _ = rand.Read(nonce) // crypto/rand.Read never fails
	return aead.Seal(nonce, nonce, plain, []byte(id))
}

// Open returns the caller headers Seal sealed for id: what Decorate then
// takes of them. A nil sealed (nothing was kept) opens to none.
func (a *Auth) Open(id string, sealed []byte) (http.Header, error) {
	if len(sealed) == 0 {
		return nil, nil
	}
	aead := a.aead
	if len(sealed) < aead.NonceSize() {
		return nil, ErrSealed
	}
	nonce, box := sealed[:aead.NonceSize()], sealed[aead.NonceSize():]
	plain, err := aead.Open(nil, nonce, box, []byte(id))
	if err != nil {
		return nil, ErrSealed
	}
	var h http.Header
	if err := json.Unmarshal(plain, &h); err != nil {
		return nil, ErrSealed
	}
	return h, nil
}

// sealer is the AEAD Seal and Open use: AES-256-GCM under a key derived
// from the server secret for this purpose alone.
func sealer(secret []byte) cipher.AEAD {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("sealed caller\x00"))
	block, err := aes.NewCipher(m.Sum(nil)) // 32 bytes: AES-256
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return aead
}
