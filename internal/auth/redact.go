package auth

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// redacted replaces the proxy's own upstream key wherever an upstream
// echoes it.
const redacted = "[redacted]"

// hidden is the credential callers must never see: the configured upstream
// key in Static and None ("" in Passthrough, where the credential is the
// caller's own).
func (a *Auth) hidden() string {
	if a.cfg.Mode == Passthrough {
		return ""
	}
	return a.cfg.UpstreamKey
}

// Redact removes the proxy's own upstream key from b, an upstream answer
// read whole (an error body that echoes the request's credential); b
// itself when it holds none.
func (a *Auth) Redact(b []byte) []byte {
	key := a.hidden()
	if key == "" || !bytes.Contains(b, []byte(key)) {
		return b
	}
	return bytes.ReplaceAll(b, []byte(key), []byte(redacted))
}

// RedactResponse takes the proxy's own upstream key out of an upstream
// answer before anything reads it — success or error, streamed or whole,
// journaled or passed through: its header values, and its body as it is
// read (its Content-Length goes, since the length may change). Decorate
// asks for answers it can read (no Accept-Encoding of the caller's).
func (a *Auth) RedactResponse(resp *http.Response) {
	key := a.hidden()
	if key == "" {
		return
	}
	for _, vs := range resp.Header {
		for i, v := range vs {
			vs[i] = strings.ReplaceAll(v, key, redacted)
		}
	}
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	resp.Body = &redactingReader{rc: resp.Body, key: []byte(key)}
}

// redactingReader replaces key in what rc gives as it streams: a key split
// across two reads is still found, because the tail of a read that could
// begin the key is held back until the next one says.
type redactingReader struct {
	rc   io.ReadCloser
	key  []byte
	buf  []byte // reads from rc
	out  []byte // redacted, not yet read
	held []byte // a proper prefix of key that ended the last read
	err  error  // rc's error, once it gave one
}

func (r *redactingReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			if len(r.held) == 0 {
				return 0, r.err
			}
			r.out, r.held = r.held, nil // the input ended: a part of the key is no key
			break
		}
		r.fill()
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// fill reads once from rc and redacts what it can be sure of.
func (r *redactingReader) fill() {
	if r.buf == nil {
		r.buf = make([]byte, 32<<10)
	}
	n, err := r.rc.Read(r.buf)
	r.err = err
	chunk := append(r.held, r.buf[:n]...)
	if bytes.Contains(chunk, r.key) {
		chunk = bytes.ReplaceAll(chunk, r.key, []byte(redacted))
	}
	k := keyPrefixAtEnd(chunk, r.key)
	r.out, r.held = chunk[:len(chunk)-k], bytes.Clone(chunk[len(chunk)-k:])
}

// keyPrefixAtEnd is the length of the longest proper prefix of key that b
// ends with.
func keyPrefixAtEnd(b, key []byte) int {
	for k := min(len(key)-1, len(b)); k > 0; k-- {
		if bytes.HasSuffix(b, key[:k]) {
			return k
		}
	}
	return 0
}

func (r *redactingReader) Close() error { return r.rc.Close() }
