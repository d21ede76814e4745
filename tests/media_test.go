package tests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
)

// TestRawAudioLiveAndRangeWhileRunning: raw audio (no stream_format) reaches
// its first client as the upstream generates it, and a client that dropped
// resumes with Range: bytes=N- on the Location while the generation still
// runs — 206 from byte N, then live, as `curl -C -` and an <audio> element
// do — for one upstream generation.
func TestRawAudioLiveAndRangeWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const chunks = 30
	input := uniquePrompt(t, fmt.Sprintf("[tokens=%d] [delay=80ms]", chunks)) // 2.4 s of generation
	total := mockllm.WAVHeaderSize + chunks*mockllm.ChunkBytes
	running := func() bool {
		gens := e.LLM.Ledger().Generations(input)
		return len(gens) == 1 && !gens[0].Completed
	}

	resp := do(t, "POST", e.URL+"/v1/audio/speech", speechBody(input, false), "Idempotency-Key", "raw-live")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "audio/wav" {
		t.Fatalf("POST: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !running() {
		t.Fatal("the answer came after the upstream finished: the audio was not passed on live")
	}
	if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(total) {
		t.Errorf("Content-Length %q, want %d (the upstream's)", cl, total)
	}
	loc := resp.Header.Get("Location")
	const n = 5000 // two chunks and a bit: cut mid-chunk
	head := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, head); err != nil {
		t.Fatalf("read the first %d bytes: %v", n, err)
	}
	_ = resp.Body.Close() // the client drops

	get := func(rng string) *http.Response {
		t.Helper()
		r := do(t, "GET", e.URL+loc, "", "Range", rng)
		if !running() {
			t.Fatalf("%s: the generation ended before the answer; the test needs it running", rng)
		}
		return r
	}

	// A range inside what was generated, and one past it: both while it runs.
	mid := get("bytes=100-199")
	if b := readBody(t, mid); mid.StatusCode != http.StatusPartialContent || len(b) != 100 ||
		mid.Header.Get("Content-Range") != fmt.Sprintf("bytes 100-199/%d", total) {
		t.Errorf("bytes=100-199: %d %q, %d bytes", mid.StatusCode, mid.Header.Get("Content-Range"), len(b))
	}
	bad := get(fmt.Sprintf("bytes=%d-", total))
	if cr := bad.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes */%d", total) {
		t.Errorf("bytes=%d-: Content-Range %q", total, cr)
	}
	testutil.ExpectAPIError(t, bad, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable")

	// curl -C -: resume after the n bytes it has.
	rest := get(fmt.Sprintf("bytes=%d-", n))
	if rest.StatusCode != http.StatusPartialContent || rest.Header.Get("Content-Range") != fmt.Sprintf("bytes %d-%d/%d", n, total-1, total) ||
		rest.Header.Get("Content-Length") != strconv.Itoa(total-n) {
		t.Fatalf("resume: %d, Content-Range %q, Content-Length %q", rest.StatusCode, rest.Header.Get("Content-Range"), rest.Header.Get("Content-Length"))
	}
	whole := append(head, readBody(t, rest)...)

	gen := ledgerOnce(t, e, input)
	if len(whole) != total || !bytes.Equal(whole[mockllm.WAVHeaderSize:], []byte(gen.Content)) || string(whole[:4]) != "RIFF" {
		t.Fatalf("the dropped and resumed audio (%d bytes) is not the upstream's WAV (%d bytes)", len(whole), total)
	}
	if !bytes.Equal([]byte(gen.Content), mockllm.Audio(input, chunks)) {
		t.Fatal("the upstream's audio is not the mock's")
	}
	// Once stored, the same ranges serve from the journal.
	testutil.WaitState(t, e.URL, "raw-live", "completed")
	again := do(t, "GET", e.URL+loc, "", "Range", fmt.Sprintf("bytes=%d-", n))
	if b := readBody(t, again); again.StatusCode != http.StatusPartialContent || b != string(whole[n:]) {
		t.Errorf("stored: %d, %d bytes", again.StatusCode, len(b))
	}
}

// ledgerOnce is the one completed generation input caused upstream.
func ledgerOnce(tb testing.TB, e *env, input string) mockllm.Generation {
	tb.Helper()
	if g := testutil.Settled(tb, e.LLM.Ledger(), input, 1); g.Generations != 1 || g.Requests != 1 {
		tb.Fatalf("upstream ledger: %+v, want 1 request and 1 generation", g)
	}
	gens := e.LLM.Ledger().Generations(input)
	if len(gens) != 1 || !gens[0].Completed {
		tb.Fatalf("upstream generations: %+v", gens)
	}
	return gens[0]
}

// TestRawAudioCutUpstream: raw audio the upstream cuts mid-way is no
// result. Its first client, which already got part of it live, sees a
// broken response (never a short, clean one), and the key is failed.
func TestRawAudioCutUpstream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	input := uniquePrompt(t, "[tokens=20] [delay=20ms] [abort_after=5]")
	resp := do(t, "POST", e.URL+"/v1/audio/speech", speechBody(input, false), "Idempotency-Key", "raw-cut")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err == nil {
		t.Fatalf("the cut audio ended cleanly after %d bytes; want a broken response", len(b))
	}
	if len(b) == 0 || len(b) >= mockllm.WAVHeaderSize+20*mockllm.ChunkBytes {
		t.Errorf("got %d bytes before the cut, want part of the audio", len(b))
	}
	testutil.WaitState(t, e.URL, "raw-cut", "failed")
}
