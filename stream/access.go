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

// access is what reprise notes about a request while serving it, one for
// each request (ServeHTTP): when it came in, and what its handler tells the
// access log (its key and what it was allowed to do: start, attach, replay,
// resume or reject), the latencies its client sees (timing.go) and what is
// left to serve once the handler returned (serveLater).
type access struct {
	at            time.Time
	key, decision string
	started       bool   // the request started its key's generation
	flushed       func() // runs once the first write to the client went out (thenFlushed)
	rest          func() // what the handler left to serve (serveLater)
}

type accessKey struct{}

// withAccess is r with a as its note.
func withAccess(r *http.Request, a *access) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), accessKey{}, a))
}

// noted returns r's access note, nil outside ServeHTTP.
func noted(r *http.Request) *access {
	a, _ := r.Context().Value(accessKey{}).(*access)
	return a
}

// noteKey tells the access log r's key.
func noteKey(r *http.Request, key string) {
	if a := noted(r); a != nil {
		a.key = key
	}
}

// serveLater has serve run once r's handler chain has returned and r's
// access line is written, in ServeHTTP (reprise's outermost frame), and
// reports whether it will; false outside ServeHTTP, where the caller
// serves at once. An HTTP/2 reader, which net/http cannot let go of, waits
// there for its stream's events, without the frames of the handler chain
// that decided the request (the record's read, its JSON): the runtime
// halves an idle goroutine's stack at a GC only while it uses under a
// quarter of it.
func serveLater(r *http.Request, serve func()) bool {
	a := noted(r)
	if a == nil || a.rest != nil {
		return false
	}
	a.rest = serve
	return true
}

// noteDecision tells the access log what r was allowed to do.
func noteDecision(r *http.Request, decision string) {
	if a := noted(r); a != nil {
		a.decision = decision
	}
}

// quiet are the paths probes and scrapers ask every few seconds: their
// access lines are at debug level.
var quiet = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// logAccess serves r through next and logs one line: method, path, status,
// duration, key and decision. A request with a key that failed before any
// decision was rejected. A reader whose connection was taken over (a
// detached event stream, a WebSocket) is logged when it was handed over,
// and so is one served later (serveLater), which logAccess returns.
func (s *Server) logAccess(w http.ResponseWriter, r *http.Request, next http.Handler) (rest func()) {
	note := &access{at: time.Now()}
	aw := &accessWriter{ResponseWriter: w}
	defer func() {
		status := aw.status
		if status == 0 && (aw.hijacked || note.rest != nil) {
			status = http.StatusOK
			if websocket.IsWebSocketUpgrade(r) {
				status = http.StatusSwitchingProtocols
			}
		}
		decision := note.decision
		if decision == "" && note.key != "" && status >= http.StatusBadRequest {
			decision = "reject"
		}
		level := slog.LevelInfo
		if quiet[r.URL.Path] {
			level = slog.LevelDebug
		}
		s.log.Log(context.Background(), level, "request", "method", r.Method, "path", r.URL.Path, "status", status,
			"duration_ms", ms(time.Since(note.at)), "key", note.key, "decision", decision)
	}()
	next.ServeHTTP(aw, withAccess(r, note))
	return note.rest
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
