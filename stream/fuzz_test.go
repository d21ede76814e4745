package stream

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Fuzz targets of the parsers an attacker reaches: the Range header, the
// capability token and an upstream's SSE body. Seeds: testdata/fuzz/.

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

// FuzzVerifyCapability: a made-up token never verifies; the ones that do are
// exactly the tokens the server issues, for their key, before their expiry.
func FuzzVerifyCapability(f *testing.F) {
	s := secServer(secSecret)
	now := time.Unix(1_800_000_000, 0)
	genuine := s.capability("0123456789abcdef0123456789abcdef", "order-42", now.Add(time.Hour))
	f.Add(genuine, "order-42")
	f.Add(genuine, "order-43")
	f.Add(s.capability(anonymous, "k", now), "k")
	f.Add(s.capability("t", "k", now.Add(-time.Second)), "k")
	f.Add("v1.abc.t.AAAAAAAAAAAAAAAAAAAAAA", "k")
	f.Add("v1...", "")
	f.Add("garbage", "k")
	f.Fuzz(func(t *testing.T, token, key string) {
		tenant, ok := s.verifyCapability(token, key, now)
		if !ok {
			if tenant != "" {
				t.Fatalf("a refused token returned tenant %q", tenant)
			}
			return
		}
		parts := strings.Split(token, ".")
		exp, err := strconv.ParseInt(parts[1], 36, 64)
		if err != nil || exp < now.Unix() {
			t.Fatalf("token %q verified with expiry %q at %d", token, parts[1], now.Unix())
		}
		if tenant != parts[2] || token != s.capability(tenant, key, time.Unix(exp, 0)) {
			t.Fatalf("token %q verified for key %q but is not the token the server issues", token, key)
		}
		if _, ok := secServer(secSecret2).verifyCapability(token, key, now); ok {
			t.Fatalf("token %q verified under another secret", token)
		}
	})
}

var errFuzzEmit = errors.New("fuzz: emit refused")

// FuzzReadUpstream: readUpstream never panics on any upstream body; nil
// means the last emitted event was terminal; every emitted event is valid
// UTF-8; the events and bytes limits hold; an emit error ends the read.
func FuzzReadUpstream(f *testing.F) {
	for _, body := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n",
		"data: x\n\n",
		"",
		"garbage without any field\n",
		"data: \xff\xfe\n\ndata: [DONE]\n\n",
		"event: \xc3\x28\ndata: {}\n\n",
		"data: [DONE]\r\n\r\n",
		"data: [DONE]\rdata: more\r\r",
		": comment\n\nid: 1\n\nretry: 5\n\ndata: [DONE]\n\n",
		"event: speech.audio.done\ndata: {}\n\n",
		"data: {\"type\":\"speech.audio.done\"}\n\n",
		"data: " + strings.Repeat("y", 300) + "\n\ndata: [DONE]\n\n",
		"data: a\ndata: b\n\ndata: [DONE]\n\ndata: after\n\n",
		"\xef\xbb\xbfdata: [DONE]\n\n",
		"data: [DONE]",
		"data:[DONE]\n\n",
	} {
		f.Add([]byte(body), uint16(256), uint8(4), uint16(512), uint8(0))
	}
	f.Add([]byte("data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"), uint16(64), uint8(8), uint16(64), uint8(2))
	f.Fuzz(func(t *testing.T, body []byte, maxEvent uint16, maxEvents uint8, maxBytes uint16, failAt uint8) {
		lim := upstreamLimits{maxEvent: 16 + int(maxEvent)%4096, maxEvents: 1 + int(maxEvents)%16, maxBytes: int64(maxBytes) % 8192}
		type ev struct {
			typ  string
			data []byte
		}
		var got []ev
		var total int64
		refused := false
		n, err := readUpstream(bytes.NewReader(body), lim, func(typ string, data []byte) error {
			if refused {
				t.Fatal("readUpstream emitted after emit failed")
			}
			if int(failAt) > 0 && len(got)+1 == int(failAt) {
				refused = true
				return errFuzzEmit
			}
			if !utf8.Valid(data) || !utf8.ValidString(typ) {
				t.Fatalf("emitted invalid UTF-8: type %q data %q", typ, data)
			}
			got = append(got, ev{typ, bytes.Clone(data)})
			total += int64(len(data))
			return nil
		})
		if n != len(got) {
			t.Fatalf("readUpstream counted %d events, emitted %d", n, len(got))
		}
		if n > lim.maxEvents || total > lim.maxBytes {
			t.Fatalf("emitted %d events, %d bytes over limits %+v", n, total, lim)
		}
		for i, e := range got[:max(len(got)-1, 0)] {
			if isTerminal(e.typ, e.data) {
				t.Fatalf("event %d of %d is terminal but more followed", i+1, n)
			}
		}
		if refused != errors.Is(err, errFuzzEmit) {
			t.Fatalf("emit refused: %v; readUpstream returned %v", refused, err)
		}
		if err == nil {
			if n == 0 || !isTerminal(got[n-1].typ, got[n-1].data) {
				t.Fatalf("readUpstream returned nil after %d events, the last not terminal", n)
			}
		}
	})
}
