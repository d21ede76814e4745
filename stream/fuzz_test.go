package stream

import (
	"errors"
	"math"
	"testing"
)

// Fuzz target of the Range header, which any reader of a stored result
// sends (the capability token's is in package auth, the upstream SSE body's
// in package engine). Seeds: testdata/fuzz/.

// FuzzParseRange: parseRange never panics; a success is a range inside the
// result; its syntax verdict does not depend on the size (handleStream
// checks syntax against math.MaxInt64 before it knows the size).
func FuzzParseRange(f *testing.F) {
	for _, h := range []string{"", "bytes=0-99", "bytes=-10", "bytes=5-", "bytes=-0", "bytes=0-", "bytes=5-1",
		"bytes=0-1,2-3", "bytes=99999999-", "items=1-2", "bytes=--1", " bytes = 1 - 2 ", "bytes=9223372036854775807-"} {
		f.Add(h, int64(1000))
	}
	f.Add("bytes=0-0", int64(0))
	f.Add("bytes=-1", int64(1))
	f.Fuzz(func(t *testing.T, h string, size int64) {
		if size < 0 {
			size = -(size + 1)
		}
		start, end, partial, err := parseRange(h, size)
		_, _, _, errMax := parseRange(h, math.MaxInt64)
		if errors.Is(err, errRangeSyntax) != errors.Is(errMax, errRangeSyntax) {
			t.Fatalf("parseRange(%q): syntax verdict %v at size %d, %v at MaxInt64", h, err, size, errMax)
		}
		switch {
		case err != nil:
			if !errors.Is(err, errRangeSyntax) && !errors.Is(err, errRangeUnsatisfiable) {
				t.Fatalf("parseRange(%q, %d): unknown error %v", h, size, err)
			}
			if start != 0 || end != 0 || partial {
				t.Fatalf("parseRange(%q, %d) failed with a range %d-%d %v", h, size, start, end, partial)
			}
		case partial:
			if start < 0 || start >= end || end > size {
				t.Fatalf("parseRange(%q, %d) = [%d, %d): not inside the result", h, size, start, end)
			}
		default:
			if start != 0 || end != size {
				t.Fatalf("parseRange(%q, %d) = [%d, %d) whole: want [0, %d)", h, size, start, end, size)
			}
		}
	})
}
