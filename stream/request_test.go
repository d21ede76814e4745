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
// later (an HTTP/2 reader's stream) runs in ServeHTTP once the handler
// chain returned and its access line was written, as a reader handed over
// is logged: at the hand-over, with the 200 its stream starts with.
func TestServeLaterRunsAfterTheAccessLine(t *testing.T) {
	var logged bytes.Buffer
	ran, returned := false, false
	s := &Server{log: slog.New(slog.NewTextHandler(&logged, nil))}
	s.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noteKey(r, "k")
		noteDecision(r, "resume")
		if !serveLater(r, func() {
			ran = true
			if !returned {
				t.Error("served later before the handler returned")
			}
			line := logged.String()
			for _, want := range []string{"status=200", "key=k", "decision=resume"} {
				if !strings.Contains(line, want) {
					t.Errorf("access line %q, written before the rest is served, lacks %s", line, want)
				}
			}
		}) {
			t.Error("serveLater refused inside ServeHTTP")
		}
		if serveLater(r, func() {}) {
			t.Error("serveLater took a second stream for one request")
		}
		returned = true
	})
	s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/streams/k", nil))
	if !ran {
		t.Fatal("what the handler left was not served")
	}
}

// TestServeLaterOutsideServeHTTP: without a lifecycle (the handler
// called outside ServeHTTP) nothing can run later; the caller serves.
func TestServeLaterOutsideServeHTTP(t *testing.T) {
	if serveLater(httptest.NewRequest("GET", "/v1/streams/k", nil), func() {}) {
		t.Fatal("serveLater took a stream no one would serve")
	}
}
