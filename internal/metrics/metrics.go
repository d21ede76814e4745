// Package metrics holds reprise's Prometheus series: what requests were
// allowed to do, duplicates suppressed, resumes, generations and their
// outcomes, events journaled and how long appends took, upstream attempts,
// retries and their outcomes, readers, the breaker and the retry budget,
// and the latencies clients see.
//
// It is the one package that defines series. It only counts what the HTTP
// surface, the engine, the call policy (through classify.Observer) and the
// journal (through its OnAppend hook and Stats) report to it; it decides
// nothing and must not be read back by the proxy's logic. Every family is
// registered, and every label value known in advance exported at zero, by
// New, so a scrape right after start-up lists them all.
package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/journal"
)

// Label values of the HTTP surface's reports.
const (
	// Duplicate suppressed (Duplicate), and how a request was served
	// without a generation (Saved: the kinds of cost.SavedKinds): it
	// attached to the generation running, replayed the completed one,
	// resumed one after a drop (Saved only), or was a retry without a key
	// recognised as its first request's.
	HowAttach = cost.SavedAttach
	HowReplay = cost.SavedReplay
	HowResume = cost.SavedResume
	HowRetry  = cost.SavedRetry
	// Resume transports (Resume): an event stream (the Location, a
	// Responses stream resumed by sequence number), a WebSocket, a byte
	// range of a stored result.
	TransportSSE       = "sse"
	TransportWebSocket = "websocket"
	TransportRange     = "range"
)

// decisions are the values of reprise_requests_total{decision}.
var decisions = []string{"start", "attach", "replay", "mismatch", "retry", "cancel", "unavailable"}

// Metrics are the proxy's series, registered once per proxy.
type Metrics struct {
	reg prometheus.Registerer

	decisions   *prometheus.CounterVec // by decision: start, attach, replay, mismatch, retry, cancel
	duplicates  *prometheus.CounterVec // by how: attach, replay, retry
	resumes     *prometheus.CounterVec // by transport: sse, websocket, range
	generations *prometheus.CounterVec // finished generations by outcome
	events      prometheus.Counter     // events journaled
	running     prometheus.Gauge       // generations running on this instance
	readers     *prometheus.GaugeVec   // connected readers by source: tail, journal
	requests    prometheus.Counter     // upstream requests made

	attempts  *prometheus.CounterVec   // upstream attempts by upstream, status, kind
	retries   *prometheus.CounterVec   // retries by reason
	retried   *prometheus.CounterVec   // retried calls by result: success, failure
	firstByte *prometheus.HistogramVec // upstream time to first byte by upstream

	firstToken  prometheus.Histogram // client time to first event of a generation it started
	resumeFirst prometheus.Histogram // resume to first event
	appendTime  prometheus.Histogram // journal append latency
	shed        prometheus.Counter   // new generations refused while behind
	lag         atomic.Pointer[func() time.Duration]
	results     atomic.Pointer[func() int64]

	costs   *costMetrics    // tokens, cost and cost saved, the cost guard: cost.go
	keys    *keyMetrics     // by proxy key: keys.go
	keyless *keylessMetrics // keyless retry recognition: keyless.go
	lost    *lostMetrics    // lost owners' generations settled here: lost.go

	mu        sync.Mutex
	upstreams map[string]*Upstream
	watched   map[string]bool // upstreams whose policy is exported
}

// New registers the series on reg. stats is read at each scrape.
func New(reg prometheus.Registerer, stats func() journal.Stats) *Metrics {
	m := &Metrics{
		reg:       reg,
		upstreams: map[string]*Upstream{},
		watched:   map[string]bool{},
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_requests_total", Help: "Requests with a key, by what they were allowed to do.",
		}, []string{"decision"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_duplicates_suppressed_total", Help: "Duplicate requests answered without an upstream call, as they came, by how: attach, replay, retry.",
		}, []string{"how"}),
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_resumes_total", Help: "Readers that came back for a key's stream or result, by transport: sse, websocket, range.",
		}, []string{"transport"}),
		generations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_generations_total", Help: "Upstream generations finished on this instance, by outcome: completed, failed, interrupted, cancelled.",
		}, []string{"outcome"}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_events_journaled_total", Help: "Upstream events acknowledged by JetStream.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "reprise_generations_running", Help: "Generations this instance is running now.",
		}),
		readers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reprise_stream_readers", Help: "Connected stream readers, by where they read from: tail (a generation running here), journal, result (a completed result kept here).",
		}, []string{"source"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_upstream_requests_total", Help: "Requests sent to the upstream, retries included.",
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_upstream_attempts_total", Help: "Upstream requests, by upstream, answer status (0: none) and outcome kind.",
		}, []string{"upstream", "status", "kind"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_upstream_retries_total", Help: "Retries toward the upstream, by the reason of the failure retried.",
		}, []string{"reason"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reprise_retry_outcomes_total", Help: "Upstream calls that retried, by how they ended: success, failure.",
		}, []string{"result"}),
		firstByte: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "reprise_upstream_first_byte_seconds", Help: "Time from sending an upstream request to its answer's head, by upstream.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"upstream"}),
		firstToken: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "reprise_client_first_token_seconds", Help: "Time from a request that started a generation to its first event written to that client.",
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		resumeFirst: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "reprise_resume_first_event_seconds", Help: "Time from a resume request to the first event written to it.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		appendTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "reprise_journal_append_seconds", Help: "Time to store one journal message in JetStream, its retries included.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "reprise_generations_shed_total", Help: "New generations refused (429 overloaded) because the journal was behind by more than the shed lag.",
		}),
	}
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "reprise_journal_lag_seconds", Help: "Age of the oldest event appended on this instance that JetStream has not acknowledged yet (0: none waits).",
	}, func() float64 {
		if f := m.lag.Load(); f != nil {
			return (*f)().Seconds()
		}
		return 0
	})
	results := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "reprise_results_cache_bytes", Help: "Bytes of events of completed streamed results kept in memory on this instance for their resumes and replays here.",
	}, func() float64 {
		if f := m.results.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	reg.MustRegister(m.decisions, m.duplicates, m.resumes, m.generations, m.events, m.running, m.readers, m.requests,
		m.attempts, m.retries, m.retried, m.firstByte, m.firstToken, m.resumeFirst, m.appendTime, m.shed, lag, results)
	initLabels(m.decisions, decisions...)
	initLabels(m.duplicates, HowAttach, HowReplay, HowRetry)
	initLabels(m.resumes, TransportSSE, TransportWebSocket, TransportRange)
	initLabels(m.generations, engine.Outcomes()...)
	initLabels(m.retries, classify.RetryReasons()...)
	initLabels(m.retried, "success", "failure")
	m.readers.WithLabelValues("tail")
	m.readers.WithLabelValues("journal")
	m.readers.WithLabelValues("result")
	m.costs = newCost(reg)
	m.keys = newKeys(reg)
	m.keyless = newKeyless(reg)
	m.lost = newLost(reg)
	registerJournalReads(reg, stats)
	for op, n := range map[string]func(journal.Stats) uint64{
		"append": func(s journal.Stats) uint64 { return s.AppendRetries },
		"read":   func(s journal.Stats) uint64 { return s.ReadRetries },
		"record": func(s journal.Stats) uint64 { return s.RecordRetries },
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "reprise_journal_retries_total",
			Help:        "JetStream operations tried again after no answer (NATS failovers, leader elections), by operation.",
			ConstLabels: prometheus.Labels{"op": op},
		}, func() float64 { return float64(n(stats())) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name:        "reprise_journal_errors_total",
		Help:        "JetStream operations that failed for good (the generation failed), by operation.",
		ConstLabels: prometheus.Labels{"op": "append"},
	}, func() float64 { return float64(stats().AppendErrors) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "reprise_journal_stalls_total",
		Help: "Generations whose journal stalled: a message got no answer from JetStream for --journal-timeout; the generation failed (journal_failure), and what it held is stored once JetStream answers.",
	}, func() float64 { return float64(stats().AppendStalls) }))
	return m
}

// initLabels exports v's series of each value at zero.
func initLabels(v *prometheus.CounterVec, values ...string) {
	for _, l := range values {
		v.WithLabelValues(l)
	}
}

// Decision counts a request with a key by what it was allowed to do.
func (m *Metrics) Decision(decision string) { m.decisions.WithLabelValues(decision).Inc() }

// Duplicate counts a duplicate request answered without an upstream call,
// by how (HowAttach, HowReplay, HowRetry), when it comes: whatever its
// generation then does (Saved counts what it saved).
func (m *Metrics) Duplicate(how string) { m.duplicates.WithLabelValues(how).Inc() }

// Resume counts a reader that came back for a key, by transport
// (TransportSSE, TransportWebSocket, TransportRange).
func (m *Metrics) Resume(transport string) { m.resumes.WithLabelValues(transport).Inc() }

// Reader counts a connected reader of source (tail or journal) until done
// is called.
func (m *Metrics) Reader(source string) (done func()) {
	g := m.readers.WithLabelValues(source)
	g.Inc()
	return g.Dec
}

// FirstToken observes the time from a request that started a generation
// to the first event written to its client.
func (m *Metrics) FirstToken(d time.Duration) { m.firstToken.Observe(d.Seconds()) }

// ResumeFirstEvent observes the time from a resume request to the first
// event written to it.
func (m *Metrics) ResumeFirstEvent(d time.Duration) { m.resumeFirst.Observe(d.Seconds()) }

// JournalAppend observes how long a journal message took to store: the
// journal's Config.OnAppend.
func (m *Metrics) JournalAppend(d time.Duration) { m.appendTime.Observe(d.Seconds()) }

// WatchLag exports lag (journal.Journal.Lag), read at each scrape, as
// reprise_journal_lag_seconds; 0 until it is called.
func (m *Metrics) WatchLag(lag func() time.Duration) { m.lag.Store(&lag) }

// WatchResults exports held (engine.Engine.ResultsHeld), read at each
// scrape, as reprise_results_cache_bytes; 0 until it is called.
func (m *Metrics) WatchResults(held func() int64) { m.results.Store(&held) }

// Shed counts a new generation refused because the journal was behind.
func (m *Metrics) Shed() { m.shed.Inc() }

// GenerationStarted counts a generation this instance runs now.
func (m *Metrics) GenerationStarted() { m.running.Inc() }

// GenerationEnded counts a generation that finished with outcome (one of
// engine.Outcomes).
func (m *Metrics) GenerationEnded(outcome string) {
	m.running.Dec()
	m.generations.WithLabelValues(outcome).Inc()
}

// EventJournaled counts an upstream event JetStream acknowledged.
func (m *Metrics) EventJournaled() { m.events.Inc() }

// UpstreamRequests counts requests sent to the upstream.
func (m *Metrics) UpstreamRequests(n int) { m.requests.Add(float64(n)) }
