package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
)

// TestMain runs this test binary as the memory or the fair phase's client
// process when the phase starts it so (it starts os.Executable with
// --mem-child or --fair-child).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "--mem-child" || os.Args[1] == "--fair-child") {
		o, err := parseOptions(os.Args[1:])
		if err == nil && o.memChild {
			err = memChild(o)
		} else if err == nil {
			err = fairChild(o)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "reprise-bench (client process):", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestPhasesMeasure runs the memory (its HTTP/2 readers), throughput,
// time-to-first-token, resume, replay, fair and mix phases at a tiny size: each
// must measure (a phase whose
// expectations no longer match reprise, as when a chat stream lost its
// usage chunk, made the report say n/a and went unnoticed), and the
// summary line carries every figure.
func TestPhasesMeasure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the benchmark's whole stack")
	}
	o, err := parseOptions([]string{
		"-short", "-only", "memory,throughput,ttft,resume,replay,fair,mix", "-mem-clients", "20", "-mem-transports", "h2", "-mem-streams", "2", "-runs", "1", "-concurrency", "2", "-tp-streams", "2",
		"-tp-tokens", "20", "-ttft-samples", "5", "-resume-events", "100", "-resume-samples", "3", "-replay-events", "500",
		"-fair-bulk", "20", "-fair-keys", "2", "-fair-events", "200", "-fair-samples", "3",
		"-mix-streams", "3,5", "-mix-duration", "1s", "-timeout", "2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o.out = &out
	if err := run(o); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	for _, name := range []string{"throughput_ratio", "ttft_overhead_p50_ms", "resume_p99_ms", "replay_events_per_s", "replay_post_events_per_s",
		"mix_added_p50_ms", "mix_added_p99_ms", "mix_cpu_ratio", "fair_beside_p99_ms", "fair_unfair_p99_ratio"} {
		if !regexp.MustCompile(`\b` + name + `=-?[0-9]`).MatchString(last) {
			t.Errorf("the summary has no figure for %s: %s", name, last)
		}
	}
	// The h2 readers share one connection (the server takes 250 streams on each).
	if !regexp.MustCompile(`RSS per idle SSE over HTTP/2 \(TLS\) client, 20 clients[^|]*\| \| \| -?[0-9]`).MatchString(out.String()) {
		t.Errorf("the report has no figure for 20 HTTP/2 readers:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "20 SSE over HTTP/2 (TLS) clients: reached 20 on 1 connections") {
		t.Errorf("the 20 HTTP/2 readers did not all attach on one connection:\n%s", out.String())
	}
	// The fair phase: both read paths, with and without turns.
	if n := len(regexp.MustCompile(`(?m)^\| (memory|JetStream)[^|]*\| (in turns by tenant|without turns) \| -?[0-9]`).FindAllString(out.String(), -1)); n != 4 {
		t.Errorf("the fair table has %d rows with figures, want 4:\n%s", n, out.String())
	}
	for _, m := range []string{"mix: 3 streams", "mix: 5 streams"} {
		if !strings.Contains(out.String(), m) {
			t.Errorf("the report has no %q rows", m)
		}
	}
}

// TestOptionsTransportsAndMixes: the memory phase measures each transport
// asked for, the mix each stream count, and a name it does not know is an
// error, not a phase that silently measures less.
func TestOptionsTransportsAndMixes(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.memTransports, []string{"sse", "websocket", "h2"}) || !slices.Equal(o.mixStreams, []int{200, 1000, 2000}) {
		t.Errorf("defaults: transports %v, mixes %v; want [sse websocket h2], [200 1000 2000]", o.memTransports, o.mixStreams)
	}
	if o, err = parseOptions([]string{"-short"}); err != nil || !slices.Equal(o.mixStreams, []int{200}) {
		t.Errorf("-short: mixes %v, %v; want [200]", o.mixStreams, err)
	}
	if o, err = parseOptions([]string{"-mem-transports", "websocket"}); err != nil || !slices.Equal(o.memTransports, []string{"websocket"}) {
		t.Errorf("-mem-transports websocket: %v, %v", o.memTransports, err)
	}
	if _, err := parseOptions([]string{"-mem-transports", "sse,h3"}); err == nil || !strings.Contains(err.Error(), `"h3"`) {
		t.Errorf("-mem-transports sse,h3: %v; want an error naming h3", err)
	}
}

// TestOptionsNATS: --journal-replicas is 1 to 5, above 1 only on an
// external NATS (the embedded server is one node), --nats takes URLs, and
// --nats-tcp, an experiment on the embedded server, does not go with it.
func TestOptionsNATS(t *testing.T) {
	o, err := parseOptions(nil)
	if err != nil || o.natsURLs != "" || o.replicas != 1 || o.natsMode() != "embedded" {
		t.Errorf("defaults: --nats %q, replicas %d (%s), %v; want the embedded server, 1", o.natsURLs, o.replicas, o.natsMode(), err)
	}
	o, err = parseOptions([]string{"-nats", "nats://127.0.0.1:1, nats://u:secret@127.0.0.1:2", "-journal-replicas", "3"})
	if err != nil || o.replicas != 3 {
		t.Fatalf("--nats with 3 replicas: %v, replicas %d", err, o.replicas)
	}
	if m := o.natsMode(); strings.Contains(m, "secret") || !strings.Contains(m, "127.0.0.1:2") {
		t.Errorf("the report's NATS mode %q: want both URLs, the password hidden", m)
	}
	if s := o.natsSummary(); s != "nats=external journal_replicas=3" {
		t.Errorf("summary tail %q", s)
	}
	for _, tc := range []struct {
		args []string
		want string // in the error
	}{
		{[]string{"-journal-replicas", "3"}, "needs --nats"},
		{[]string{"-journal-replicas", "0", "-nats", "nats://127.0.0.1:1"}, "1 to 5"},
		{[]string{"-journal-replicas", "6", "-nats", "nats://127.0.0.1:1"}, "1 to 5"},
		{[]string{"-nats", "127.0.0.1"}, "not a URL"},
		{[]string{"-nats", "nats://127.0.0.1:1,"}, "not a URL"},
		{[]string{"-nats", "nats://127.0.0.1:1", "-nats-tcp"}, "--nats-tcp"},
	} {
		if _, err := parseOptions(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error with %q", tc.args, err, tc.want)
		}
	}
	if _, err := parseOptions([]string{"-journal-replicas", "1"}); err != nil {
		t.Errorf("one replica on the embedded server: %v", err)
	}
}

// TestPhasesOnCluster runs the time-to-first-token and resume phases at a
// tiny size with reprise journalling on a 3-node JetStream cluster (in
// this process, on loopback) with 3 replicas: they measure, the report says
// where reprise journalled, and the journal's stream has 3 replicas.
func TestPhasesOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node JetStream cluster and the benchmark's stack")
	}
	c := journaltest.StartCluster(t, 3)
	o, err := parseOptions([]string{
		"-short", "-only", "ttft,resume", "-runs", "1", "-ttft-samples", "5", "-resume-events", "100", "-resume-samples", "3",
		"-nats", strings.Join(c.URLs, ","), "-journal-replicas", "3", "-timeout", "2m",
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o.out = &out
	if err := run(o); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	for _, name := range []string{"ttft_overhead_p50_ms", "resume_p99_ms"} {
		if !regexp.MustCompile(`\b` + name + `=-?[0-9]`).MatchString(last) {
			t.Errorf("the summary has no figure for %s: %s", name, last)
		}
	}
	if !strings.HasSuffix(last, " nats=external journal_replicas=3") {
		t.Errorf("the summary does not say where reprise journalled: %s", last)
	}
	if !strings.Contains(out.String(), "external NATS at "+c.URLs[0]) || !strings.Contains(out.String(), "journal replicas R3") {
		t.Errorf("the header does not name the cluster and R3:\n%s", out.String())
	}

	nc, err := nats.Connect(strings.Join(c.URLs, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, journal.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.Replicas != 3 || info.State.Msgs == 0 {
		t.Errorf("the journal's stream: %d replicas, %d messages; want 3 replicas and the benchmark's events", info.Config.Replicas, info.State.Msgs)
	}
}
