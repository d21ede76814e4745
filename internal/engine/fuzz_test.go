package engine

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/reprise-dev/reprise/internal/apierr"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
)

// Fuzz target of the parser an upstream reaches: its SSE body. Seeds:
// testdata/fuzz/.

// fuzzProto is chat and speech at once (both terminal events count), with
// no error events, so every body is read to its terminal event.
type fuzzProto struct{}

func (fuzzProto) Path() string                 { return "/fuzz" }
func (fuzzProto) Streams([]byte) (bool, error) { return true, nil }
func (fuzzProto) Inspect(typ string, data []byte) Inspection {
	c, s := Chat{}.Inspect(typ, data), Speech{}.Inspect(typ, data)
	return Inspection{Terminal: c.Terminal || s.Terminal}
}
func (fuzzProto) Result(string, []byte) (cost.Usage, bool) { return cost.Usage{}, false }
func (fuzzProto) Whole(string, []byte) bool                { return true }
func (fuzzProto) Shape() apierr.Shape                      { return apierr.OpenAI }

var errFuzzEmit = errors.New("fuzz: emit refused")

// FuzzReadUpstream: readUpstream never panics on any upstream body; nil
// means the last emitted event was terminal; every emitted event is valid
// UTF-8 and named as no event of reprise's own; the events and bytes
// limits hold; an emit error ends the read.
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
		"event: error\ndata: [DONE]\n\n",
		"event: reset\ndata: {\"generation\":2}\n\ndata: [DONE]\n\n",
		"event: reprise.body\ndata: x\n\ndata: [DONE]\n\n",
		"event: error\ndata: {\"error\":{\"message\":\"m\"}}\n\n",
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
		n, _, err := readUpstream(bytes.NewReader(body), fuzzProto{}, lim, func(typ string, data []byte, _ Inspection, _ *cost.Usage) error {
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
			if reserved(typ) {
				t.Fatalf("emitted an event named %q, as reprise's own", typ)
			}
			got = append(got, ev{typ, bytes.Clone(data)})
			total += int64(journal.EventSize(typ, data))
			return nil
		})
		if n != len(got) {
			t.Fatalf("readUpstream counted %d events, emitted %d", n, len(got))
		}
		if n > lim.maxEvents || total > lim.maxBytes {
			t.Fatalf("emitted %d events, %d bytes over limits %+v", n, total, lim)
		}
		for i, e := range got[:max(len(got)-1, 0)] {
			if (fuzzProto{}).Inspect(e.typ, e.data).Terminal {
				t.Fatalf("event %d of %d is terminal but more followed", i+1, n)
			}
		}
		if refused != errors.Is(err, errFuzzEmit) {
			t.Fatalf("emit refused: %v; readUpstream returned %v", refused, err)
		}
		if err == nil {
			if n == 0 || !(fuzzProto{}).Inspect(got[n-1].typ, got[n-1].data).Terminal {
				t.Fatalf("readUpstream returned nil after %d events, the last not terminal", n)
			}
		}
	})
}

// FuzzInspect: every format's Inspect takes any event without panicking; a
// failure always names a code and a message; chat's terminal event is
// exactly [DONE]; an event is never both terminal and a failure.
func FuzzInspect(f *testing.F) {
	for _, s := range []string{
		"[DONE]", `{"choices":[]}`, `{"usage":{"prompt_tokens":1}}`, `{"usage" :null}`, `{"error":{"message":"m","code":7}}`,
		`{"error":null}`, `{"type":"error"}`, `{"type":"speech.audio.done","usage":{"input_tokens":-1}}`, `{"error":{"code":{}}}`,
	} {
		f.Add("", s)
	}
	f.Add("speech.audio.done", "{}")
	f.Fuzz(func(t *testing.T, typ, data string) {
		for _, p := range Protocols() {
			in := p.Inspect(typ, []byte(data))
			if in.Terminal && in.Failure != nil {
				t.Fatalf("%s: %q %q is terminal and a failure", p.Path(), typ, data)
			}
			if in.Failure != nil && (in.Failure.Code == "" || in.Failure.Message == "" || in.Failure.Status < 400) {
				t.Fatalf("%s: %q %q: failure %+v without a code, message or status", p.Path(), typ, data, in.Failure)
			}
		}
		if got := (Chat{}).Inspect(typ, []byte(data)).Terminal; got != (data == "[DONE]") {
			t.Fatalf("chat: %q terminal = %v", data, got)
		}
	})
}
