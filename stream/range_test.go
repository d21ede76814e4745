package stream

import (
	"errors"
	"testing"
)

// TestParseRangeTable pins parseRange on the forms RFC 9110 §14.1.2 defines.
func TestParseRangeTable(t *testing.T) {
	const size = 1000
	for _, tc := range []struct {
		h          string
		start, end int64
		partial    bool
		err        error
	}{
		{"", 0, size, false, nil},
		{"bytes=0-99", 0, 100, true, nil},
		{"bytes=0-0", 0, 1, true, nil},
		{"bytes=999-999", 999, 1000, true, nil},
		{"bytes=999-", 999, 1000, true, nil},
		{"bytes=10-5000", 10, 1000, true, nil},
		{"bytes=-10", 990, 1000, true, nil},
		{"bytes=-5000", 0, 1000, true, nil},
		{"Bytes = 1-2", 1, 3, true, nil},
		{"bytes=0-1, 4-5", 0, size, false, nil},
		{"bytes=1000-", 0, 0, false, errRangeUnsatisfiable},
		{"bytes=5000-6000", 0, 0, false, errRangeUnsatisfiable},
		{"bytes=5-1", 0, 0, false, errRangeSyntax},
		{"bytes=a-", 0, 0, false, errRangeSyntax},
		{"bytes=-", 0, 0, false, errRangeSyntax},
		{"bytes=1", 0, 0, false, errRangeSyntax},
		{"bytes=+1-2", 0, 0, false, errRangeSyntax},
		{"bytes=1-2,x", 0, 0, false, errRangeSyntax},
		{"items=1-2", 0, 0, false, errRangeSyntax},
		{"bytes=1234567890123456789-", 0, 0, false, errRangeSyntax},
	} {
		start, end, partial, err := parseRange(tc.h, size)
		if start != tc.start || end != tc.end || partial != tc.partial || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
			t.Errorf("parseRange(%q) = %d, %d, %v, %v; want %d, %d, %v, %v", tc.h, start, end, partial, err, tc.start, tc.end, tc.partial, tc.err)
		}
	}
}

// TestRangeEmptySuffixUnsatisfiable: RFC 9110 §14.1.1, a suffix range of
// length 0 ("bytes=-0") is unsatisfiable (416), not the whole result.
func TestRangeEmptySuffixUnsatisfiable(t *testing.T) {
	if _, _, _, err := parseRange("bytes=-0", 1000); !errors.Is(err, errRangeUnsatisfiable) {
		t.Errorf("bytes=-0: %v, want unsatisfiable", err)
	}
}
