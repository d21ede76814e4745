package mockllm

import (
	"hash/fnv"
	"strings"
)

// pseudoWords are the vocabulary of non-readable content.
var pseudoWords = strings.Fields(`alpha bravo charlie delta echo foxtrot golf hotel
india juliett kilo lima mike november oscar papa quebec romeo sierra tango
uniform victor whiskey xray yankee zulu`)

// paragraph is the text cycled through in readable mode, a sentence at a
// time: every sentence ends with a full stop.
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

// sentences are the paragraph's sentences, each as its words.
var sentences = splitSentences(strings.Fields(paragraph))

func splitSentences(words []string) [][]string {
	var out [][]string
	start := 0
	for i, w := range words {
		if strings.HasSuffix(w, ".") || i == len(words)-1 {
			out = append(out, words[start:i+1])
			start = i + 1
		}
	}
	return out
}

// Content returns the deterministic content tokens (deltas) the mock produces
// for prompt with n tokens. Every token but the first starts with a space, so
// strings.Join(Content(...), "") is the full text. n <= 0 yields an empty
// slice.
//
// Readable content is whole sentences of a paragraph, from a sentence the
// prompt picks: a token is a word, but for the last sentence's, which share
// the tokens that remain, so that the answer ends at a full stop with
// exactly n tokens. Otherwise the tokens are pseudo-words.
func Content(prompt string, n int, readable bool) []string {
	if n <= 0 {
		return []string{}
	}
	seed := promptHash(prompt)
	if readable {
		return readableContent(seed, n)
	}
	out := make([]string, n)
	for i := range out {
		w := pseudoWords[mix(seed, uint64(i))%uint64(len(pseudoWords))]
		if i > 0 {
			w = " " + w
		}
		out[i] = w
	}
	return out
}

// readableContent is n tokens of whole sentences, the first picked by seed.
func readableContent(seed uint64, n int) []string {
	out := make([]string, 0, n)
	add := func(words []string) {
		tok := strings.Join(words, " ")
		if len(out) > 0 {
			tok = " " + tok
		}
		out = append(out, tok)
	}
	for s := seed % uint64(len(sentences)); len(out) < n; s = (s + 1) % uint64(len(sentences)) {
		words, left := sentences[s], n-len(out)
		if len(words) <= left {
			for i := range words {
				add(words[i : i+1])
			}
			continue
		}
		// The last sentence has more words than tokens remain: its words
		// share them, as evenly as they go.
		for i := range left {
			add(words[i*len(words)/left : (i+1)*len(words)/left])
		}
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
