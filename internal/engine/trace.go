package engine

import (
	"net/http"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/resume"
)

// Tracer follows the generations this instance runs, for traces and the
// OpenTelemetry GenAI metrics. telemetry.Telemetry implements it. It hears
// only generations: a replay, an attach or a resume starts none, so it
// never counts one twice.
type Tracer interface {
	// Begin is called as g starts running here; the Trace it returns hears
	// the rest of it, on the generation's goroutine.
	Begin(g Generation) Trace
}

// Trace follows one generation. Its methods must be quick.
type Trace interface {
	// Request is called with each upstream request to upstream before it
	// is sent: it may set the request's headers (a traceparent).
	Request(req *http.Request, upstream string)
	// Attempt is called with what each upstream request came to (also for
	// one that failed before it was built, without a Request).
	Attempt(a classify.Attempt)
	// FirstChunk is called as the first event of an upstream stream
	// arrives (never for an answer that is not streamed).
	FirstChunk()
	// ResponseModel is called, at most once, with the model the upstream's
	// answer names (ModelNamer) — before FirstChunk when its first event
	// names it.
	ResponseModel(model string)
	// End is called once, as the generation ends: its outcome (one of
	// Outcomes) and the result it recorded (usage, cost, error code).
	End(outcome string, res resume.Result)
}

type noTracer struct{}

func (noTracer) Begin(Generation) Trace { return noTrace{} }

type noTrace struct{}

func (noTrace) Request(*http.Request, string) {}
func (noTrace) Attempt(classify.Attempt)      {}
func (noTrace) End(string, resume.Result)     {}
func (noTrace) FirstChunk()                   {}
func (noTrace) ResponseModel(string)          {}
