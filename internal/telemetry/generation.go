package telemetry

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/internal/engine"
	"github.com/reprise-dev/reprise/resume"
)

// run follows one generation: its span, its attempts' spans, and the
// metrics it records as it ends.
type run struct {
	t              *Telemetry
	g              engine.Generation
	op, provider   string
	start          time.Time
	ctx            context.Context // the generation's span's
	span           trace.Span
	mu             sync.Mutex
	attempt        trace.Span // the upstream request in flight, if any
	n              int        // upstream requests made
	addr, upstream string     // the latest upstream request's host and upstream name
	port           int
	model          string // the model the upstream's answer named
}

// Begin starts the span of a generation (engine.Tracer): a child of the
// client's W3C trace context when its request carried one.
func (t *Telemetry) Begin(g engine.Generation) engine.Trace {
	r := &run{t: t, g: g, start: time.Now()}
	r.op, r.provider = operation(g.Protocol)
	name := r.op
	if g.Model != "" {
		name += " " + g.Model
	}
	parent := t.prop.Extract(context.Background(), propagation.HeaderCarrier(g.Header))
	attrs := append(r.genAI(), keyKeyID.String(g.Ref.ID), keyGeneration.Int64(int64(min(g.Ref.Gen, 1<<62))), //nolint:gosec // bounded
		keyFormat.String(g.Path), keyStream.Bool(g.Stream))
	r.ctx, r.span = t.tracer.Start(parent, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(r.start), trace.WithAttributes(attrs...))
	return r
}

// genAI are the GenAI attributes every signal of the generation has.
func (r *run) genAI() []attribute.KeyValue {
	attrs := []attribute.KeyValue{keyOperation.String(r.op)}
	if r.t.latest {
		attrs = append(attrs, keyProvider.String(r.provider))
	} else {
		attrs = append(attrs, keySystem.String(r.provider))
	}
	if r.g.Model != "" {
		attrs = append(attrs, keyRequestModel.String(r.g.Model))
	}
	if r.model != "" {
		attrs = append(attrs, keyResponseModel.String(r.model))
	}
	return attrs
}

// server are the upstream's address and port, once a request was made.
func (r *run) server() []attribute.KeyValue {
	if r.addr == "" {
		return nil
	}
	return []attribute.KeyValue{keyServerAddress.String(r.addr), keyServerPort.Int(r.port)}
}

// Request starts an upstream request's span and sends its trace context
// upstream in req's headers.
func (r *run) Request(req *http.Request, upstream string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempt != nil { // its Attempt never came
		r.attempt.End()
	}
	r.n++
	r.addr, r.port = hostPort(req)
	r.upstream = upstream
	attrs := append([]attribute.KeyValue{keyMethod.String(req.Method), keyURL.String(req.URL.Redacted()),
		keyUpstream.String(upstream), keyAttempt.Int(r.n)}, r.server()...)
	var ctx context.Context
	ctx, r.attempt = r.t.tracer.Start(r.ctx, req.Method, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	r.t.prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
}

// Attempt ends the span of the upstream request a reports on.
func (r *run) Attempt(a classify.Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	span := r.attempt
	r.attempt = nil
	if span == nil { // it failed before it was built
		r.n++
		_, span = r.t.tracer.Start(r.ctx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithTimestamp(time.Now().Add(-a.Duration)), trace.WithAttributes(keyAttempt.Int(r.n)))
	}
	kind := a.KindName()
	span.SetAttributes(keyAttemptKind.String(kind))
	if a.N > 1 {
		span.SetAttributes(keyResendCount.Int(a.N - 1))
	}
	if a.Status != 0 {
		span.SetAttributes(keyStatusCode.Int(a.Status))
	}
	if a.Code != "" {
		span.SetAttributes(keyAttemptCode.String(a.Code))
	}
	if kind != "ok" {
		errType := a.Code
		if a.Status != 0 && errType == "" {
			errType = strconv.Itoa(a.Status)
		}
		if errType == "" {
			errType = kind
		}
		span.SetAttributes(keyErrorType.String(errType))
		span.SetStatus(codes.Error, kind)
	}
	span.End()
}

// FirstChunk records the time to the stream's first event, from the
// generation's start (its retries included), under the latest names only:
// v1.36.0 had no such metric.
func (r *run) FirstChunk() {
	if !r.t.latest {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	d := time.Since(r.start).Seconds()
	r.t.inst.firstChunk.Record(r.ctx, d, metric.WithAttributes(append(r.genAI(), r.server()...)...))
	r.span.SetAttributes(keyFirstChunk.Float64(d))
}

// ResponseModel notes the model the upstream's answer named: an attribute
// of the generation's span and of the metrics recorded from now on.
func (r *run) ResponseModel(model string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.model = model
	r.span.SetAttributes(keyResponseModel.String(model))
}

// End records the generation's GenAI metrics and ends its span.
func (r *run) End(outcome string, res resume.Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attempt != nil {
		r.attempt.End()
		r.attempt = nil
	}
	end := time.Now()
	base := append(r.genAI(), r.server()...)
	withErr := base
	var errType string
	if outcome != engine.OutcomeCompleted {
		errType = res.Error
		if errType == "" {
			errType = "_OTHER"
		}
		withErr = append(withErr[:len(withErr):len(withErr)], keyErrorType.String(errType))
	}
	ctx, in := r.ctx, r.t.inst
	in.duration.Record(ctx, end.Sub(r.start).Seconds(), metric.WithAttributes(withErr...))
	var input, output int64
	if u := res.Usage; u != nil {
		input, output = max(u.PromptTokens, 0), max(u.CompletionTokens, 0)
	}
	if r.t.latest {
		// Recorded for every operation, failed ones too: 0 when no usage
		// came, and the modality is never reported apart.
		counted := metric.WithAttributes(append(base[:len(base):len(base)], keyTokenModality.String("unknown"))...)
		in.usageIn.Add(ctx, input, counted)
		in.usageOut.Add(ctx, output, counted)
		in.operationIn.Record(ctx, input, metric.WithAttributes(withErr...))
		in.operOut.Record(ctx, output, metric.WithAttributes(withErr...))
	} else if res.Usage != nil && res.Basis != cost.Estimated { // v1.36.0: only when the upstream reported it
		in.tokens.Record(ctx, input, metric.WithAttributes(append(base[:len(base):len(base)], keyTokenType.String("input"))...))
		in.tokens.Record(ctx, output, metric.WithAttributes(append(base[:len(base):len(base)], keyTokenType.String("output"))...))
	}

	r.span.SetAttributes(r.server()...)
	r.span.SetAttributes(keyOutcome.String(outcome), keyEvents.Int64(int64(min(res.Events, 1<<62)))) //nolint:gosec // bounded
	if r.upstream != "" {
		r.span.SetAttributes(keyUpstream.String(r.upstream))
	}
	if res.Usage != nil {
		r.span.SetAttributes(keyInputTokens.Int64(input), keyOutputTokens.Int64(output))
	}
	if res.Cost != nil {
		r.span.SetAttributes(keyCost.Float64(*res.Cost))
	}
	if errType != "" {
		r.span.SetAttributes(keyErrorType.String(errType))
		r.span.SetStatus(codes.Error, errType)
	}
	r.span.End(trace.WithTimestamp(end))
}

// hostPort is where req goes: its host and port (the scheme's default when
// the URL names none).
func hostPort(req *http.Request) (host string, port int) {
	host = req.URL.Hostname()
	port, err := strconv.Atoi(req.URL.Port())
	if err != nil {
		port = 80
		if req.URL.Scheme == "https" {
			port = 443
		}
	}
	return host, port
}
