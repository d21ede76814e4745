package mockllm

import (
	"encoding/binary"
	"math"
)

// Audio format of the speech endpoint: 16-bit little-endian mono PCM.
const (
	SampleRate     = 24_000
	BytesPerSample = 2
	// ChunkBytes is the PCM size of one audio chunk (50 ms).
	ChunkBytes = 2400
	// DefaultSpeechChunks is the chunk count when the prompt gives no tokens directive.
	DefaultSpeechChunks = 8
	// WAVHeaderSize is the size of the RIFF header written before WAV data.
	WAVHeaderSize = 44
)

// Audio returns the deterministic PCM the speech endpoint produces for input
// with the given number of chunks: a sine tone whose pitch (220..659 Hz)
// depends on the input hash.
func Audio(input string, chunks int) []byte {
	if chunks <= 0 {
		return []byte{}
	}
	freq := 220 + float64(promptHash(input)%440)
	samples := chunks * ChunkBytes / BytesPerSample
	out := make([]byte, 0, samples*BytesPerSample)
	for i := range samples {
		v := 0.3 * math.MaxInt16 * math.Sin(2*math.Pi*freq*float64(i)/SampleRate)
		out = binary.LittleEndian.AppendUint16(out, uint16(int16(v)))
	}
	return out
}

// wavHeader returns a canonical 44-byte RIFF/WAVE header for dataLen bytes of
// mono 16-bit PCM at SampleRate.
func wavHeader(dataLen int) []byte {
	le := binary.LittleEndian
	h := make([]byte, 0, WAVHeaderSize)
	h = append(h, "RIFF"...)
	h = le.AppendUint32(h, uint32(36+dataLen))
	h = append(h, "WAVEfmt "...)
	h = le.AppendUint32(h, 16) // fmt chunk size
	h = le.AppendUint16(h, 1)  // PCM
	h = le.AppendUint16(h, 1)  // mono
	h = le.AppendUint32(h, SampleRate)
	h = le.AppendUint32(h, SampleRate*BytesPerSample) // byte rate
	h = le.AppendUint16(h, BytesPerSample)            // block align
	h = le.AppendUint16(h, 8*BytesPerSample)          // bits per sample
	h = append(h, "data"...)
	h = le.AppendUint32(h, uint32(dataLen))
	return h
}
