package stream

import (
	"errors"
	"strconv"
	"strings"
)

// Range errors: a malformed header is 400, a range outside the result 416.
var (
	errRangeSyntax        = errors.New("stream: malformed Range")
	errRangeUnsatisfiable = errors.New("stream: unsatisfiable Range")
)

// parseRange reads a Range header against a result of size bytes. It
// serves one range (bytes=first-last, bytes=first-, bytes=-suffix);
// partial is false when the whole result is to be sent (no header, or
// several ranges, which RFC 9110 lets a server ignore).
func parseRange(h string, size int64) (start, end int64, partial bool, err error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, size, false, nil
	}
	unit, spec, ok := strings.Cut(h, "=")
	if !ok || !strings.EqualFold(strings.TrimSpace(unit), "bytes") {
		return 0, 0, false, errRangeSyntax
	}
	if strings.Contains(spec, ",") {
		for part := range strings.SplitSeq(spec, ",") {
			if _, _, err := rangeSpec(strings.TrimSpace(part)); errors.Is(err, errRangeSyntax) {
				return 0, 0, false, err
			}
		}
		return 0, size, false, nil
	}
	first, last, err := rangeSpec(strings.TrimSpace(spec))
	if err != nil {
		return 0, 0, false, err
	}
	switch {
	case first < 0: // suffix: the last -first bytes
		n := -first
		if size == 0 {
			return 0, 0, false, errRangeUnsatisfiable
		}
		return max(size-n, 0), size, true, nil
	case first >= size:
		return 0, 0, false, errRangeUnsatisfiable
	case last < 0 || last >= size:
		return first, size, true, nil
	}
	return first, last + 1, true, nil
}

// rangeSpec parses "a-b", "a-" (last = -1) or "-n" (first = -n).
func rangeSpec(s string) (first, last int64, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, errRangeSyntax
	}
	a, b = strings.TrimSpace(a), strings.TrimSpace(b)
	if a == "" {
		n, err := digits(b)
		if err != nil {
			return 0, 0, err
		}
		if n == 0 {
			return 0, 0, errRangeUnsatisfiable // a zero-length suffix selects nothing
		}
		return -n, -1, nil
	}
	if first, err = digits(a); err != nil {
		return 0, 0, err
	}
	if b == "" {
		return first, -1, nil
	}
	if last, err = digits(b); err != nil || last < first {
		return 0, 0, errRangeSyntax
	}
	return first, last, nil
}

func digits(s string) (int64, error) {
	if s == "" || len(s) > 18 {
		return 0, errRangeSyntax
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errRangeSyntax
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, errRangeSyntax
	}
	return n, nil
}
