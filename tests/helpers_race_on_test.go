//go:build race

package tests

// raceEnabled: the race detector allows 8,128 live goroutines in a process.
const raceEnabled = true
