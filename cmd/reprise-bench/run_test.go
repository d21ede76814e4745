package main

import "testing"

// TestPhasesMeasure runs the throughput, time-to-first-token, resume and
// replay phases at a tiny size: each must measure (a phase whose
// expectations no longer match reprise, as when a chat stream lost its
// usage chunk, made the report say n/a and went unnoticed).
func TestPhasesMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the benchmark's whole stack")
	}
	o, err := parseOptions([]string{
		"-short", "-only", "throughput,ttft,resume,replay", "-runs", "1", "-concurrency", "2", "-tp-streams", "2",
		"-tp-tokens", "20", "-ttft-samples", "5", "-resume-events", "100", "-resume-samples", "3", "-replay-events", "500",
		"-timeout", "2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := run(o); err != nil {
		t.Fatal(err)
	}
}
