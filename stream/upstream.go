package stream

import (
	"errors"
	"io"
	"unicode/utf8"

	sse "github.com/tmaxmax/go-sse"
)

// Reasons an upstream stream is no result.
var (
	errNoTerminal = errors.New("stream: upstream stream ended without its terminal event")
	errOverLimit  = errors.New("stream: upstream stream over the events or bytes limit")
	errNotUTF8    = errors.New("stream: upstream event is not valid UTF-8")
)

// upstreamLimits bound what one generation may journal.
type upstreamLimits struct {
	maxEvent  int   // bytes of one event (go-sse's parser limit)
	maxEvents int   // events per generation
	maxBytes  int64 // data bytes per generation
}

// readUpstream parses an upstream SSE body and hands every event to emit,
// up to and including the terminal one. It returns nil only when the
// terminal event arrived; anything else — a read error, a clean end without
// the terminal event, an oversized or invalid event, a limit — is an error,
// and the events already emitted are not a result.
func readUpstream(body io.Reader, lim upstreamLimits, emit func(typ string, data []byte) error) (n int, err error) {
	var bytes int64
	for ev, rerr := range sse.Read(body, &sse.ReadConfig{MaxEventSize: lim.maxEvent}) {
		if rerr != nil {
			return n, rerr
		}
		data := []byte(ev.Data)
		if !utf8.Valid(data) || !utf8.ValidString(ev.Type) {
			return n, errNotUTF8
		}
		bytes += int64(len(data))
		if n >= lim.maxEvents || bytes > lim.maxBytes {
			return n, errOverLimit
		}
		if err := emit(ev.Type, data); err != nil {
			return n, err
		}
		n++
		if isTerminal(ev.Type, data) {
			return n, nil // nothing after the terminal event counts
		}
	}
	return n, errNoTerminal
}
