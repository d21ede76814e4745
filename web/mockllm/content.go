package mockllm

import (
	"hash/fnv"
	"strings"
)

// pseudoWords are the vocabulary of non-readable content.
var pseudoWords = strings.Fields(`alpha bravo charlie delta echo foxtrot golf hotel
india juliett kilo lima mike november oscar papa quebec romeo sierra tango
uniform victor whiskey xray yankee zulu`)

// paragraph is the text cycled through in readable mode.
const paragraph = `Networks fail in ordinary ways. A phone walks out of range,
a laptop lid closes, a load balancer recycles a connection in the middle of a
sentence. When that happens to a streamed answer, the words already generated
are not lost. Every token the model produced was written to a durable journal
the moment it arrived. The client reconnects, presents the last position it
saw, and the proxy replays the missing part before following the live stream
again. The model is never asked twice, so nothing is billed twice. From the
reader's side the pause looks like a short hesitation, and then the text simply
continues where it stopped. Resuming is cheap, honest and boring, which is
exactly what good infrastructure should be.`

var (
	readableWords  = strings.Fields(paragraph)
	sentenceStarts = findSentenceStarts(readableWords)
)

func findSentenceStarts(words []string) []int {
	starts := []int{0}
	for i, w := range words[:len(words)-1] {
		if strings.HasSuffix(w, ".") {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// Content returns the deterministic content tokens (deltas) the mock produces
// for prompt with n tokens. Every token but the first starts with a space, so
// strings.Join(Content(...), "") is the full text. n <= 0 yields an empty
// slice.
func Content(prompt string, n int, readable bool) []string {
	if n <= 0 {
		return []string{}
	}
	out := make([]string, n)
	seed := promptHash(prompt)
	start := sentenceStarts[seed%uint64(len(sentenceStarts))]
	for i := range out {
		var w string
		if readable {
			w = readableWords[(start+i)%len(readableWords)]
		} else {
			w = pseudoWords[mix(seed, uint64(i))%uint64(len(pseudoWords))]
		}
		if i > 0 {
			w = " " + w
		}
		out[i] = w
	}
	return out
}

// promptHash is the seed every deterministic output derives from.
func promptHash(prompt string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(prompt))
	return h.Sum64()
}

// mix is a splitmix64 finaliser over seed and i.
func mix(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// countWords approximates a token count for usage reporting.
func countWords(s string) int {
	return max(1, len(strings.Fields(s)))
}
