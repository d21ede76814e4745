package stream

import (
	"bufio"
	"context"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gorilla/websocket"
)

// The access log: one line for each request, written as its handler
// chain returns (logAccess), from what the handler noted in the request's
// lifecycle (request.go).

// noteKey tells the access log r's key.
func noteKey(r *http.Request, key string) {
	if l := lifecycleOf(r); l != nil {
		l.key = key
	}
}

// noteCaller tells the access log the name of r's proxy key.
func noteCaller(r *http.Request, name string) {
	if l := lifecycleOf(r); l != nil {
		l.name = name
	}
}

// noteModel tells the access log the model r asks for.
func noteModel(r *http.Request, model string) {
	if l := lifecycleOf(r); l != nil {
		l.model = model
	}
}

// noteDecision tells the access log what r was allowed to do.
func noteDecision(r *http.Request, decision string) {
	if l := lifecycleOf(r); l != nil {
		l.decision = decision
	}
}

// quiet are the paths probes and scrapers ask every few seconds: their
// access lines are at debug level.
var quiet = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// logAccess serves r, of lifecycle l, through next and logs one line:
// method, path, status, duration, key and decision, and the name of the
// caller's proxy key and the model it asked for when known (a generation's
// usage and cost are the engine's "generation billed" line). A request with a key
// that failed before any decision was rejected. A reader whose connection
// was taken over (a detached event stream, a WebSocket) is logged when it
// was handed over, and so is one left to serve later (serveLater).
func (s *Server) logAccess(w http.ResponseWriter, r *http.Request, l *lifecycle, next http.Handler) {
	aw := &accessWriter{ResponseWriter: w}
	defer func() {
		status := aw.status
		if status == 0 && (aw.hijacked || l.rest != nil) {
			status = http.StatusOK
			if websocket.IsWebSocketUpgrade(r) {
				status = http.StatusSwitchingProtocols
			}
		}
		decision := l.decision
		if decision == "" && l.key != "" && status >= http.StatusBadRequest {
			decision = "reject"
		}
		level := slog.LevelInfo
		if quiet[r.URL.Path] {
			level = slog.LevelDebug
		}
		attrs := []any{"method", r.Method, "path", r.URL.Path, "status", status,
			"duration_ms", ms(time.Since(l.at)), "key", l.key, "decision", decision}
		if l.name != "" {
			attrs = append(attrs, "key_name", l.name)
			s.metrics.KeyRequest(s.auth.Label(l.name), status)
		}
		if l.model != "" {
			attrs = append(attrs, "model", l.model)
		}
		s.log.Log(context.Background(), level, "request", attrs...)
	}()
	next.ServeHTTP(aw, r)
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// accessWriter records the status of a response. It passes on flushes,
// hijacks and, through Unwrap, what http.ResponseController finds.
type accessWriter struct {
	http.ResponseWriter
	status   int
	hijacked bool
}

func (a *accessWriter) WriteHeader(code int) {
	if a.status == 0 && code >= 200 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *accessWriter) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.ResponseWriter.Write(b)
}

// Flush passes a flush on (go-sse and net/http's own code look for it).
func (a *accessWriter) Flush() {
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack passes a takeover on (gorilla/websocket asserts http.Hijacker).
func (a *accessWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(a.ResponseWriter).Hijack()
	a.hijacked = err == nil
	return conn, rw, err
}

// Unwrap is for http.ResponseController.
func (a *accessWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }
