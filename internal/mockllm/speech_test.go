package mockllm_test

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/reprise-dev/reprise/internal/mockllm"
)

func speechBody(input, responseFormat, streamFormat string) map[string]any {
	return map[string]any{"model": "tts-mock", "input": input, "voice": "alloy", "response_format": responseFormat, "stream_format": streamFormat}
}

func TestSpeechSSE(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		input  string
		chunks int
	}{
		{"default chunks", "say hello", mockllm.DefaultSpeechChunks},
		{"tokens directive", "say more [tokens=3] [delay=1ms]", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			fake, srv := newFake(t, mockllm.Config{})
			resp := mustPost(t, ctx, srv.URL+mockllm.SpeechPath, speechBody(tt.input, "pcm", "sse"))
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			events, err := readEvents(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if len(events) != tt.chunks+1 {
				t.Fatalf("got %d events, want %d", len(events), tt.chunks+1)
			}
			var pcm []byte
			for _, data := range events[:tt.chunks] {
				var ev struct{ Type, Audio string }
				if err := json.Unmarshal([]byte(data), &ev); err != nil || ev.Type != "speech.audio.delta" {
					t.Fatalf("bad delta %q: %v", data, err)
				}
				b, err := base64.StdEncoding.DecodeString(ev.Audio)
				if err != nil || len(b) != mockllm.ChunkBytes {
					t.Fatalf("bad audio chunk (%d bytes): %v", len(b), err)
				}
				pcm = append(pcm, b...)
			}
			var done struct {
				Type  string
				Usage struct {
					InputTokens  int `json:"input_tokens"`
					OutputTokens int `json:"output_tokens"`
					TotalTokens  int `json:"total_tokens"`
				}
			}
			if err := json.Unmarshal([]byte(events[tt.chunks]), &done); err != nil || done.Type != "speech.audio.done" ||
				done.Usage.OutputTokens != tt.chunks || done.Usage.TotalTokens != done.Usage.InputTokens+tt.chunks {
				t.Errorf("bad done event %q: %v", events[tt.chunks], err)
			}
			if err := fake.Ledger().Wait(ctx, tt.input, 1); err != nil {
				t.Fatal(err)
			}
			g := fake.Ledger().Generations(tt.input)[0]
			if g.Content != string(pcm) || !bytes.Equal(pcm, mockllm.Audio(tt.input, tt.chunks)) {
				t.Errorf("decoded audio differs from ledger content / Audio()")
			}
			if !g.Completed || g.Tokens != tt.chunks || g.Events != tt.chunks+1 || g.Path != mockllm.SpeechPath {
				t.Errorf("generation = %+v", g)
			}
		})
	}
}

func TestSpeechRaw(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, format, contentType string
		wav                       bool
	}{
		{"wav", "wav", "audio/wav", true},
		{"default format", "", "audio/wav", true},
		{"pcm", "pcm", "audio/pcm", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			fake, srv := newFake(t, mockllm.Config{})
			input := "raw audio " + tt.name
			resp := mustPost(t, ctx, srv.URL+mockllm.SpeechPath, speechBody(input, tt.format, ""))
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			pcm := body
			if tt.wav {
				pcm = checkWAV(t, body)
			}
			want := mockllm.Audio(input, mockllm.DefaultSpeechChunks)
			if !bytes.Equal(pcm, want) {
				t.Errorf("audio differs from Audio(): got %d bytes, want %d", len(pcm), len(want))
			}
			if err := fake.Ledger().Wait(ctx, input, 1); err != nil {
				t.Fatal(err)
			}
			if g := fake.Ledger().Generations(input)[0]; g.Content != string(want) || !g.Completed {
				t.Errorf("generation: completed=%v content %d bytes", g.Completed, len(g.Content))
			}
		})
	}
}

func TestSpeechAbort(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	fake, srv := newFake(t, mockllm.Config{})
	const input = "cut [abort_after=2]"
	resp := mustPost(t, ctx, srv.URL+mockllm.SpeechPath, speechBody(input, "wav", ""))
	body, err := io.ReadAll(resp.Body)
	if !isAbrupt(err) {
		t.Fatalf("read error = %v, want abrupt end", err)
	}
	if len(body) != mockllm.WAVHeaderSize+2*mockllm.ChunkBytes {
		t.Errorf("got %d bytes before the cut", len(body))
	}
	if err := fake.Ledger().Wait(ctx, input, 1); err != nil {
		t.Fatal(err)
	}
	if g := fake.Ledger().Generations(input)[0]; !g.Aborted || g.Tokens != 2 || len(g.Content) != 2*mockllm.ChunkBytes {
		t.Errorf("generation: aborted=%v tokens=%d content=%d bytes", g.Aborted, g.Tokens, len(g.Content))
	}
}

// checkWAV validates a canonical 24 kHz mono 16-bit RIFF header and returns the data.
func checkWAV(tb testing.TB, b []byte) []byte {
	tb.Helper()
	if len(b) < mockllm.WAVHeaderSize {
		tb.Fatalf("wav too short: %d bytes", len(b))
	}
	le := binary.LittleEndian
	dataLen := int(le.Uint32(b[40:44]))
	switch {
	case string(b[0:4]) != "RIFF" || string(b[8:16]) != "WAVEfmt " || string(b[36:40]) != "data":
		tb.Fatalf("bad wav magic: %q", b[:mockllm.WAVHeaderSize])
	case int(le.Uint32(b[4:8])) != len(b)-8:
		tb.Errorf("RIFF size = %d, want %d", le.Uint32(b[4:8]), len(b)-8)
	case le.Uint32(b[16:20]) != 16 || le.Uint16(b[20:22]) != 1 || le.Uint16(b[22:24]) != 1:
		tb.Errorf("fmt chunk is not mono PCM")
	case le.Uint32(b[24:28]) != mockllm.SampleRate || le.Uint32(b[28:32]) != 2*mockllm.SampleRate ||
		le.Uint16(b[32:34]) != 2 || le.Uint16(b[34:36]) != 16:
		tb.Errorf("fmt chunk is not 24 kHz 16-bit")
	case dataLen != len(b)-mockllm.WAVHeaderSize:
		tb.Errorf("data size = %d, want %d", dataLen, len(b)-mockllm.WAVHeaderSize)
	}
	return b[mockllm.WAVHeaderSize:]
}
