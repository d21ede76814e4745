package tests

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/internal/telemetry"
)

// otlpReceiver is an OTLP/HTTP collector on loopback: it decodes what the
// SDK exports (protobuf bodies) and keeps the latest value of every metric
// point (the SDK exports cumulative sums) and every span.
type otlpReceiver struct {
	srv *httptest.Server

	mu       sync.Mutex
	points   map[string]point // by metric name and attributes
	spans    []*tracepb.Span
	services map[string]bool // service.name of what was exported
}

// point is a metric point's value: a sum's, or a histogram's count and sum.
type point struct {
	name  string
	attrs map[string]string
	value float64 // a sum's value, a histogram's sum
	count uint64  // a histogram's count
}

func newOTLPReceiver(tb testing.TB) *otlpReceiver {
	tb.Helper()
	r := &otlpReceiver{points: map[string]point{}, services: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, req *http.Request) {
		var m colmetrics.ExportMetricsServiceRequest
		if !decodeOTLP(w, req, &m) {
			return
		}
		r.addMetrics(&m)
		reply(w, &colmetrics.ExportMetricsServiceResponse{})
	})
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, req *http.Request) {
		var m coltrace.ExportTraceServiceRequest
		if !decodeOTLP(w, req, &m) {
			return
		}
		r.mu.Lock()
		for _, rs := range m.GetResourceSpans() {
			r.services[attrString(rs.GetResource().GetAttributes())["service.name"]] = true
			for _, ss := range rs.GetScopeSpans() {
				r.spans = append(r.spans, ss.GetSpans()...)
			}
		}
		r.mu.Unlock()
		reply(w, &coltrace.ExportTraceServiceResponse{})
	})
	r.srv = httptest.NewServer(mux)
	tb.Cleanup(r.srv.Close)
	return r
}

func decodeOTLP(w http.ResponseWriter, req *http.Request, m proto.Message) bool {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return false
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err == nil && req.Header.Get("Content-Type") != "application/x-protobuf" {
		err = fmt.Errorf("content type %q", req.Header.Get("Content-Type"))
	}
	if err == nil {
		err = proto.Unmarshal(b, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

func (r *otlpReceiver) addMetrics(m *colmetrics.ExportMetricsServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rm := range m.GetResourceMetrics() {
		r.services[attrString(rm.GetResource().GetAttributes())["service.name"]] = true
		for _, sm := range rm.GetScopeMetrics() {
			for _, mt := range sm.GetMetrics() {
				add := func(attrs []*commonpb.KeyValue, p point) {
					p.name, p.attrs = mt.GetName(), attrString(attrs)
					r.points[p.name+" "+fmt.Sprint(p.attrs)] = p // fmt prints maps sorted
				}
				switch d := mt.GetData().(type) {
				case *metricspb.Metric_Sum:
					for _, dp := range d.Sum.GetDataPoints() {
						add(dp.GetAttributes(), point{value: float64(dp.GetAsInt()) + dp.GetAsDouble()})
					}
				case *metricspb.Metric_Histogram:
					for _, dp := range d.Histogram.GetDataPoints() {
						add(dp.GetAttributes(), point{value: dp.GetSum(), count: dp.GetCount()})
					}
				}
			}
		}
	}
}

// attrString is attrs as strings (ints and bools formatted).
func attrString(attrs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range attrs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			out[kv.GetKey()] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			out[kv.GetKey()] = strconv.FormatBool(v.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			out[kv.GetKey()] = strconv.FormatFloat(v.DoubleValue, 'g', -1, 64)
		}
	}
	return out
}

// metric returns the points of the metric name whose attributes include
// match.
func (r *otlpReceiver) metric(name string, match map[string]string) []point {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []point
	for _, p := range r.points {
		if p.name != name {
			continue
		}
		ok := true
		for k, v := range match {
			if got, has := p.attrs[k]; v == "" && has || v != "" && got != v {
				ok = false
			}
		}
		if ok {
			out = append(out, p)
		}
	}
	return out
}

// total is the sum of the values (and counts) of points.
func total(points []point) (value float64, count uint64) {
	for _, p := range points {
		value += p.value
		count += p.count
	}
	return value, count
}

// TestOTelGenAI: reprise with OTEL_EXPORTER_OTLP_ENDPOINT set exports the
// GenAI metrics and traces of its generations to an OTLP/HTTP receiver:
// a completed generation (503, then 200: two attempts), its replay and
// its resume (which export nothing more), and a failed generation (400).
// The token figures equal the fake model's ledger exactly, in v1.36.0's
// names and, under OTEL_SEMCONV_STABILITY_OPT_IN, the latest ones; each
// generation is a span (a child of the client's traceparent) with a child
// per upstream attempt, whose trace context the upstream received. The
// upstream answers with a dated snapshot of the model asked for: the
// completed generation's span and metrics name it as gen_ai.response.model.
func TestOTelGenAI(t *testing.T) {
	for _, latest := range []bool{false, true} {
		t.Run("latest="+strconv.FormatBool(latest), func(t *testing.T) { testOTelGenAI(t, latest) })
	}
}

//nolint:thelper // a subtest's body: its failures name their own lines
func testOTelGenAI(t *testing.T, latest bool) {
	recv := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.srv.URL)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
	t.Setenv("OTEL_SERVICE_NAME", "reprise-otel-test")
	optIn := ""
	if latest {
		optIn = "http," + telemetry.OptInLatest
	}
	t.Setenv("OTEL_SEMCONV_STABILITY_OPT_IN", optIn)
	tel, err := telemetry.New(context.Background())
	if err != nil || tel == nil {
		t.Fatalf("telemetry.New: %v, %v", tel, err)
	}

	// The upstream: the fake model, noting the trace context of each request.
	var llm atomic.Pointer[mockllm.Server]
	var tpMu sync.Mutex
	var upstreamTP []string
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tpMu.Lock()
		upstreamTP = append(upstreamTP, r.Header.Get("Traceparent"))
		tpMu.Unlock()
		llm.Load().ServeHTTP(w, r)
	})
	var prices envOptions
	withPrices(t)(&prices)
	e := newEnv(t, withUpstream(upstream), withConfig(func(c *proxy.Config) {
		prices.configure(c)
		c.Tracer = tel
		c.Policy.BaseDelay, c.Policy.MaxDelay = time.Millisecond, time.Millisecond
	}))
	llm.Store(e.LLM)
	llmURL, _ := url.Parse(e.llmSrv.URL)

	const key, failedKey = "k-otel", "k-otel-failed"
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const respModel = "mock-1-2026-12-01"
	prompt := uniquePrompt(t, "[status=503] [tokens=7] [model="+respModel+"]")
	body := chatBody(prompt, true)
	evs := readEvents(t, do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key,
		"Traceparent", "00-"+clientTrace+"-"+clientSpan+"-01"), -1)
	checkComplete(t, evs, prompt, 7)
	waitState(t, e, key, "completed")
	if r := do(t, "POST", e.URL+chatPath, body, "Idempotency-Key", key); r.Header.Get("Idempotent-Replayed") != "true" {
		t.Error("the duplicate was not replayed")
	} else {
		readEvents(t, r, -1)
	}
	readEvents(t, do(t, "GET", e.URL+"/v1/streams/"+key, "", "Last-Event-ID", evs[2].ID), -1)
	failedPrompt := uniquePrompt(t, "[status=400]")
	if r := do(t, "POST", e.URL+chatPath, chatBody(failedPrompt, true), "Idempotency-Key", failedKey); r.StatusCode != http.StatusBadRequest {
		t.Errorf("the failed generation: HTTP %d, want the upstream's 400", r.StatusCode)
	} else {
		readBody(t, r)
	}
	waitState(t, e, failedKey, "failed")
	e.stopProxy() // every generation has ended
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		t.Fatalf("telemetry shutdown (the flush): %v", err)
	}

	gens := e.LLM.Ledger().Generations(prompt)
	if len(gens) != 1 || gens[0].Tokens != 7 || gens[0].PromptTokens == 0 || len(e.LLM.Ledger().Generations(failedPrompt)) != 0 {
		t.Fatalf("ledger %+v; want one generation of 7 tokens, none for the failed prompt", gens)
	}
	in, out := float64(gens[0].PromptTokens), float64(gens[0].Tokens)

	// Metrics.
	system, duration := "gen_ai.system", telemetry.MetricOperationDuration
	if latest {
		system, duration = "gen_ai.provider.name", telemetry.MetricInferenceDuration
	}
	common := map[string]string{"gen_ai.operation.name": "chat", system: "openai", "gen_ai.request.model": "mock-1",
		"server.address": llmURL.Hostname(), "server.port": llmURL.Port()}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range common {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	if _, n := total(recv.metric(duration, with("error.type", ""))); n != 1 {
		t.Errorf("%s without error.type: %d observations, want 1 (the completed generation)", duration, n)
	}
	if _, n := total(recv.metric(duration, with())); n != 2 {
		t.Errorf("%s: %d observations, want 2 (replay and resume add none)", duration, n)
	}
	// The answer named its model; the refused generation had no answer.
	if _, n := total(recv.metric(duration, with("gen_ai.response.model", respModel, "error.type", ""))); n != 1 {
		t.Errorf("%s with gen_ai.response.model %s: %d observations, want 1 (the completed generation): %v", duration, respModel, n, recv.metric(duration, nil))
	}
	if _, n := total(recv.metric(duration, with("gen_ai.response.model", ""))); n != 1 {
		t.Errorf("%s without gen_ai.response.model: %d observations, want 1 (the failed generation)", duration, n)
	}
	var errType string // the failed generation's: the upstream's error code
	for _, p := range recv.metric(duration, with()) {
		if p.attrs["error.type"] != "" && p.count == 1 {
			errType = p.attrs["error.type"]
		}
	}
	if errType == "" {
		t.Errorf("%s: no observation with an error.type (the failed generation): %v", duration, recv.metric(duration, nil))
	}
	if latest {
		for _, c := range []struct {
			name string
			want float64
		}{{telemetry.MetricUsageInputTokens, in}, {telemetry.MetricUsageOutputTokens, out}} {
			if got, _ := total(recv.metric(c.name, with("gen_ai.token.modality", "unknown", "gen_ai.response.model", respModel))); got != c.want {
				t.Errorf("%s = %v, want %v (the ledger)", c.name, got, c.want)
			}
		}
		for _, c := range []struct {
			name string
			want float64
		}{{telemetry.MetricOperationInputTokens, in}, {telemetry.MetricOperationOutputTokens, out}} {
			// Both generations are recorded, the failed one with 0.
			if got, n := total(recv.metric(c.name, with())); got != c.want || n != 2 {
				t.Errorf("%s = %v over %d operations, want %v over 2", c.name, got, n, c.want)
			}
		}
		// Streamed and answered: the completed generation only.
		if _, n := total(recv.metric(telemetry.MetricTimeToFirstChunk, with("gen_ai.response.model", respModel))); n != 1 {
			t.Errorf("%s: %d observations, want 1 (the completed stream; the refused one had no chunk)", telemetry.MetricTimeToFirstChunk, n)
		}
		if p := recv.metric(telemetry.MetricTokenUsage, nil); len(p) != 0 {
			t.Errorf("v1.36.0's %s exported under the opt-in: %v", telemetry.MetricTokenUsage, p)
		}
	} else {
		for typ, want := range map[string]float64{"input": in, "output": out} {
			if got, n := total(recv.metric(telemetry.MetricTokenUsage, with("gen_ai.token.type", typ, "gen_ai.response.model", respModel))); got != want || n != 1 {
				t.Errorf("%s{%s} = %v over %d, want %v (the ledger) over 1", telemetry.MetricTokenUsage, typ, got, n, want)
			}
		}
		if p := append(recv.metric(telemetry.MetricInferenceDuration, nil), recv.metric(telemetry.MetricTimeToFirstChunk, nil)...); len(p) != 0 {
			t.Errorf("the latest names exported without the opt-in: %v", p)
		}
	}

	// Traces.
	recv.mu.Lock()
	spans := slices.Clone(recv.spans)
	services := recv.services
	recv.mu.Unlock()
	if !services["reprise-otel-test"] || len(services) != 1 {
		t.Errorf("service names %v, want OTEL_SERVICE_NAME's only", services)
	}
	var genSpans []*tracepb.Span
	children := map[string][]*tracepb.Span{}
	for _, s := range spans {
		a := attrString(s.GetAttributes())
		for k, v := range a {
			if strings.Contains(v, key) && k != "url.full" {
				t.Errorf("span %q attribute %s shows the raw key: %q", s.GetName(), k, v)
			}
		}
		if a["reprise.key_id"] != "" {
			genSpans = append(genSpans, s)
		} else {
			children[hex.EncodeToString(s.GetParentSpanId())] = append(children[hex.EncodeToString(s.GetParentSpanId())], s)
		}
	}
	if len(genSpans) != 2 {
		t.Fatalf("%d generation spans, want 2 (replay and resume make none): %v", len(genSpans), spans)
	}
	slices.SortFunc(genSpans, func(a, b *tracepb.Span) int { return int(a.GetStartTimeUnixNano() - b.GetStartTimeUnixNano()) })
	done, fail := genSpans[0], genSpans[1]
	da, fa := attrString(done.GetAttributes()), attrString(fail.GetAttributes())
	if done.GetName() != "chat mock-1" || done.GetKind() != tracepb.Span_SPAN_KIND_CLIENT ||
		hex.EncodeToString(done.GetTraceId()) != clientTrace || hex.EncodeToString(done.GetParentSpanId()) != clientSpan {
		t.Errorf("generation span %q kind %v trace %x parent %x; want \"chat mock-1\", client, a child of the client's traceparent",
			done.GetName(), done.GetKind(), done.GetTraceId(), done.GetParentSpanId())
	}
	wantDone := map[string]string{"reprise.outcome": "completed", "reprise.format": chatPath, "gen_ai.request.model": "mock-1", "gen_ai.response.model": respModel,
		system: "openai", "gen_ai.usage.input_tokens": strconv.Itoa(int(in)), "gen_ai.usage.output_tokens": strconv.Itoa(int(out)),
		"reprise.cost": strconv.FormatFloat(in*costPrompt+out*costCompletion, 'g', -1, 64)}
	for k, v := range wantDone {
		if da[k] != v {
			t.Errorf("completed generation span %s = %q, want %q", k, da[k], v)
		}
	}
	if fa["reprise.outcome"] != "failed" || fa["gen_ai.response.model"] != "" || fa["error.type"] != errType || fail.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("failed generation span: %v status %v; want outcome failed, error.type %q, status error", fa, errType, fail.GetStatus())
	}
	if len(fail.GetParentSpanId()) != 0 {
		t.Errorf("the failed generation (no traceparent) has parent %x, want a root span", fail.GetParentSpanId())
	}
	attempts := children[hex.EncodeToString(done.GetSpanId())]
	slices.SortFunc(attempts, func(a, b *tracepb.Span) int { return int(a.GetStartTimeUnixNano() - b.GetStartTimeUnixNano()) })
	if len(attempts) != 2 {
		t.Fatalf("completed generation: %d attempt spans, want 2 (503, 200)", len(attempts))
	}
	for i, want := range []map[string]string{
		{"http.response.status_code": "503", "reprise.attempt.kind": "retryable", "reprise.attempt": "1", "error.type": "503"},
		{"http.response.status_code": "200", "reprise.attempt.kind": "ok", "reprise.attempt": "2", "http.request.resend_count": "1"},
	} {
		s := attempts[i]
		a := attrString(s.GetAttributes())
		for k, v := range want {
			if a[k] != v {
				t.Errorf("attempt span %d: %s = %q, want %q", i+1, k, a[k], v)
			}
		}
		if s.GetKind() != tracepb.Span_SPAN_KIND_CLIENT || s.GetName() != "POST" || !bytes.Equal(s.GetTraceId(), done.GetTraceId()) {
			t.Errorf("attempt span %d: %q kind %v trace %x; want POST, client, the generation's trace", i+1, s.GetName(), s.GetKind(), s.GetTraceId())
		}
	}
	if n := len(children[hex.EncodeToString(fail.GetSpanId())]); n != 1 {
		t.Errorf("failed generation: %d attempt spans, want 1", n)
	}
	// The upstream got each attempt's own span as its parent.
	tpMu.Lock()
	defer tpMu.Unlock()
	if len(upstreamTP) != 3 {
		t.Fatalf("the upstream saw %d requests, want 3", len(upstreamTP))
	}
	for i, s := range attempts {
		if want := "00-" + clientTrace + "-" + hex.EncodeToString(s.GetSpanId()) + "-01"; upstreamTP[i] != want {
			t.Errorf("upstream request %d: traceparent %q, want %q (its attempt's span)", i+1, upstreamTP[i], want)
		}
	}
}

// TestTraceparentWithoutTelemetry: with no OTLP endpoint (no Tracer), the
// client's W3C trace context still reaches the upstream as it came.
func TestTraceparentWithoutTelemetry(t *testing.T) {
	t.Parallel()
	const tp, ts = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=x"
	var llm atomic.Pointer[mockllm.Server]
	var got atomic.Value
	e := newEnv(t, withUpstream(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store([2]string{r.Header.Get("Traceparent"), r.Header.Get("Tracestate")})
		llm.Load().ServeHTTP(w, r)
	})))
	llm.Store(e.LLM)
	prompt := uniquePrompt(t, "[tokens=2]")
	checkComplete(t, readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(prompt, true), "Idempotency-Key", "k-tp",
		"Traceparent", tp, "Tracestate", ts), -1), prompt, 2)
	if h, _ := got.Load().([2]string); h != [2]string{tp, ts} {
		t.Errorf("the upstream got traceparent/tracestate %q, want the client's %q", h, [2]string{tp, ts})
	}
}
