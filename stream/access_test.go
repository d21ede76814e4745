package stream

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestServeLaterRunsAfterTheAccessLine: what a handler leaves to serve
// later (an HTTP/2 reader's stream) runs once the handler chain returned
// and its access line was written, as a reader handed over is logged: at
// the hand-over, with the 200 its stream starts with.
func TestServeLaterRunsAfterTheAccessLine(t *testing.T) {
	var logged bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&logged, nil))}
	ran := false
	rest := s.logAccess(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/streams/k", nil), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noteKey(r, "k")
		noteDecision(r, "resume")
		if !serveLater(r, func() { ran = true }) {
			t.Error("serveLater refused inside logAccess")
		}
		if serveLater(r, func() {}) {
			t.Error("serveLater took a second stream for one request")
		}
	}))
	if rest == nil || ran {
		t.Fatalf("rest %v, ran %v: want it returned, not run", rest != nil, ran)
	}
	line := logged.String()
	for _, want := range []string{"status=200", "key=k", "decision=resume"} {
		if !strings.Contains(line, want) {
			t.Errorf("access line %q lacks %s", line, want)
		}
	}
	rest()
	if !ran {
		t.Fatal("rest did not serve")
	}
}

// TestServeLaterOutsideServeHTTP: without an access note (the handler
// called outside ServeHTTP) nothing can run later; the caller serves.
func TestServeLaterOutsideServeHTTP(t *testing.T) {
	if serveLater(httptest.NewRequest("GET", "/v1/streams/k", nil), func() {}) {
		t.Fatal("serveLater took a stream no one would serve")
	}
}
