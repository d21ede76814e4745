package resume

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/go-json-experiment/json/jsontext"
)

// Fingerprint identifies a request by its path and the canonical form of
// its body (Canonical): the same request serialised with its keys in
// another order, or other whitespace, has the same fingerprint.
func Fingerprint(path string, body []byte) string {
	return hash("c14n", path, Canonical(body))
}

// streamlessFields are what a client's non-streamed fallback of a streamed
// request may change: whether it streams, and its output token limit
// (Claude Code halves max_tokens in its fallback).
var streamlessFields = []string{"stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens"}

// StreamlessFingerprint is Fingerprint of body without its top-level
// stream fields and output token limit (streamlessFields): the same request
// asked streamed or not, as a client that falls back to a non-streamed call
// after a broken stream sends it. A body that is no JSON object is
// Fingerprint's.
func StreamlessFingerprint(path string, body []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil || m == nil {
		return Fingerprint(path, body)
	}
	for _, f := range streamlessFields {
		delete(m, f)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Fingerprint(path, body)
	}
	return hash("c14n-streamless", path, Canonical(b))
}

// BytesFingerprint identifies a request by its path and its body's exact
// bytes: the fingerprint versions before Fingerprint wrote and compare
// (a record's "fingerprint" field). Records keep it next to Fingerprint
// so that during a rolling upgrade those versions still recognise a
// duplicate sent with the same bytes.
func BytesFingerprint(path string, body []byte) string {
	return hash("", path, body)
}

func hash(domain, path string, body []byte) string {
	h := sha256.New()
	if domain != "" {
		h.Write([]byte(domain))
		h.Write([]byte{0})
	}
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Canonical is body in its canonical form, RFC 8785's (JCS) but for
// integers: object members sorted by name, no insignificant whitespace,
// strings in their shortest escaping, numbers with a fraction or an
// exponent in their shortest float64 form (1.0 and 1e0 are 1; one past
// float64's range saturates at its largest). Integers
// keep their digits, as an API may read them beyond float64's precision:
// 9007199254740993 and 9007199254740992 are different requests. A body
// that is no JSON, or that JCS refuses (a duplicate name, invalid UTF-8),
// keeps its bytes.
func Canonical(body []byte) []byte {
	v := jsontext.Value(bytes.Clone(body))
	if err := v.Canonicalize(jsontext.CanonicalizeRawInts(false)); err != nil {
		return body
	}
	return v
}

// MaxOutputTokens is a request body's output token limit (max_tokens,
// max_completion_tokens or max_output_tokens), 0 when it sets none.
func MaxOutputTokens(body []byte) uint64 {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return 0
	}
	for _, f := range streamlessFields[2:] {
		var n uint64
		if v, ok := m[f]; ok && json.Unmarshal(v, &n) == nil && n > 0 {
			return n
		}
	}
	return 0
}
