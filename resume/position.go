package resume

import (
	"errors"
	"strconv"
	"strings"
)

// ErrBadCursor means a Last-Event-ID is not a position this proxy issued.
var ErrBadCursor = errors.New("resume: malformed cursor")

// Position is a place in a key's journal: after the event at Offset (1-based)
// of generation Gen. Seq is the event's journal sequence, a seek hint. The
// zero Offset means "before the first event".
type Position struct {
	Gen    uint64
	Offset uint64
	Seq    uint64
}

// String formats p as the opaque SSE id clients send back. Generation 0
// does not exist: the zero Position is written as "" (no cursor).
func (p Position) String() string {
	if p.Gen == 0 {
		return ""
	}
	b := make([]byte, 0, 32)
	b = strconv.AppendUint(b, p.Gen, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, p.Offset, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, p.Seq, 10)
	return string(b)
}

// ParsePosition parses an id issued by String. The empty string is the zero
// Position (no cursor).
func ParsePosition(s string) (Position, error) {
	if s == "" {
		return Position{}, nil
	}
	parts := strings.Split(s, "-")
	if len(parts) != 3 || len(s) > 64 {
		return Position{}, ErrBadCursor
	}
	var n [3]uint64
	for i, p := range parts {
		if p == "" || (len(p) > 1 && p[0] == '0') {
			return Position{}, ErrBadCursor
		}
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return Position{}, ErrBadCursor
		}
		n[i] = v
	}
	if n[0] == 0 {
		return Position{}, ErrBadCursor
	}
	return Position{Gen: n[0], Offset: n[1], Seq: n[2]}, nil
}
