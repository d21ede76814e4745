package engine

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	sse "github.com/tmaxmax/go-sse"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
)

// Reasons an upstream stream is no result.
var (
	errNoTerminal = errors.New("engine: upstream stream ended without its terminal event")
	errOverLimit  = errors.New("engine: upstream stream over the events or bytes limit")
	errNotUTF8    = errors.New("engine: upstream event is not valid UTF-8")
	// errTooLong is go-sse's error for an event over its size limit.
	errTooLong = bufio.ErrTooLong
)

// reservedEvent is an upstream event named as reprise names its own
// control events, which is not its format's error: the stream is no answer.
type reservedEvent struct{ typ string }

func (r *reservedEvent) Error() string {
	return "engine: upstream event named " + strconv.Quote(r.typ) + ", as one of reprise's own"
}

// reserved reports whether an event type is one of reprise's own: its error
// and reset events, its reprise.* records. No upstream event reaches the
// journal or the wire under such a name, so a reader can never mistake one
// for reprise's.
func reserved(typ string) bool {
	return typ == TypeError || typ == TypeReset || strings.HasPrefix(typ, "reprise.")
}

// failure is an upstream's own error event: the stream ends with it.
type failure struct{ e apierr.Error }

func (f *failure) Error() string { return "engine: upstream reported an error: " + f.e.Error() }

// upstreamLimits bound what one generation may journal.
type upstreamLimits struct {
	maxEvent  int   // bytes of one event as sent, every field and line of it (go-sse's parser limit)
	maxEvents int   // events per generation
	maxBytes  int64 // bytes stored per generation: each event's journal.Event.Size
}

// readUpstream parses an upstream SSE body of format proto and hands every
// event to emit, up to and including the terminal one, with the usage the
// stream reported up to and including it (nil: none yet). It returns nil only
// when the terminal event arrived; usage is what the stream reported, also
// when it failed (the upstream bills what it generated);
// anything else — a read error, a clean end without the terminal event, an
// error event (a *failure, not emitted), an event under a reserved name
// that is no error (a *reservedEvent, not emitted), an oversized or invalid
// event, a limit — is an error, and the events already emitted are not a
// result.
func readUpstream(body io.Reader, proto Protocol, lim upstreamLimits, emit func(typ string, data []byte, in Inspection, usage *cost.Usage) error) (n int, usage *cost.Usage, err error) {
	var bytes int64
	for ev, rerr := range sse.Read(body, &sse.ReadConfig{MaxEventSize: lim.maxEvent}) {
		if rerr != nil {
			return n, usage, rerr
		}
		// The event's bytes are go-sse's string's, not a copy: nothing
		// writes to an event's data (the journal frame copies it; readers
		// only read it), and the slice keeps the string alive.
		data := unsafe.Slice(unsafe.StringData(ev.Data), len(ev.Data)) //nolint:gosec // audited above
		if !utf8.Valid(data) || !utf8.ValidString(ev.Type) {
			return n, usage, errNotUTF8
		}
		bytes += int64(journal.EventSize(ev.Type, data)) // its type too: an upstream may put anything there
		if n >= lim.maxEvents || bytes > lim.maxBytes {
			return n, usage, errOverLimit
		}
		in := proto.Inspect(ev.Type, data)
		if in.Failure == nil && reserved(ev.Type) {
			// An event named error is the upstream's failure when it
			// carries an error (Inspect's, or any OpenAI-shaped or typed
			// one); anything else under a reserved name is no answer.
			if ev.Type == TypeError {
				in.Failure = upstreamFailure(data)
			}
			if in.Failure == nil {
				return n, usage, &reservedEvent{typ: ev.Type[:min(len(ev.Type), 64)]}
			}
		}
		if in.Failure != nil {
			f := *in.Failure
			f.Code = apierr.Foreign(f.Code) // never taken for one of reprise's own
			return n, usage, &failure{f}
		}
		if in.Usage != nil {
			u := in.Usage.Filled()
			if usage != nil {
				u = usage.Merge(*in.Usage)
			}
			usage = &u
		}
		if err := emit(ev.Type, data, in, usage); err != nil {
			return n, usage, err
		}
		n++
		if in.Terminal {
			return n, usage, nil // nothing after the terminal event counts
		}
	}
	return n, usage, errNoTerminal
}

// upstreamError is the client-visible error for a classified failure: the
// upstream's own error when it answered with one, else the catalogue's.
func upstreamError(ce *classify.Error) apierr.Error {
	if ce.Code != "" {
		e := apierr.New(ce.Code)
		e.RetryAfter = seconds(ce.RetryAfter)
		return e
	}
	var v struct {
		Error *apierr.Error `json:"error"`
	}
	if json.Unmarshal(ce.Body, &v) == nil && v.Error != nil && v.Error.Message != "" {
		e := *v.Error
		e.Status = ce.Status
		e.Code = apierr.Foreign(e.Code)
		if e.Code == "" {
			e.Code = apierr.UpstreamError
		}
		if e.Type == "" {
			e.Type = apierr.TypeFor(ce.Status)
		}
		e.RetryAfter = seconds(ce.RetryAfter)
		return e
	}
	e := apierr.New(apierr.UpstreamError).WithMessage("upstream answered " + http.StatusText(ce.Status))
	e.Status, e.Type = ce.Status, apierr.TypeFor(ce.Status)
	e.RetryAfter = seconds(ce.RetryAfter)
	return e
}

// seconds rounds a wait up to whole seconds for Retry-After.
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// Codes lists every code the engine can end a generation with, besides the
// upstream's own error codes: its own and classify's.
func Codes() []string {
	return append([]string{apierr.OwnerLost, apierr.Cancelled, apierr.ProxyShutdown, apierr.JournalFailure, apierr.StreamTooLarge,
		apierr.InvalidEvent, apierr.UpstreamBody, apierr.UpstreamError, apierr.NoUpstream, apierr.ShuttingDown, apierr.TooManyGenerations}, classify.Codes()...)
}
