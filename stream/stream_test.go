package stream

import (
	"net/http"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
)

func TestWantsJSON(t *testing.T) {
	tests := []struct {
		accept string
		want   bool
	}{
		{"", false},
		{"*/*", false},
		{"text/event-stream", false},
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"text/event-stream, application/json", false},
		{"application/json, text/event-stream", true},
		{"text/html, application/json;q=0.9", true},
		{";;;, application/json", true},
	}
	for _, tc := range tests {
		if got := wantsJSON(tc.accept); got != tc.want {
			t.Errorf("wantsJSON(%q) = %v, want %v", tc.accept, got, tc.want)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	tests := []struct {
		name, typ, data string
		want            bool
	}{
		{"chat done", "", "[DONE]", true},
		{"chat chunk", "", `{"choices":[]}`, false},
		{"speech done", "", `{"type":"speech.audio.done","usage":{}}`, true},
		{"speech done as event type", "speech.audio.done", `{}`, true},
		{"speech delta", "", `{"type":"speech.audio.delta","audio":"AAA="}`, false},
		{"mention is not the type", "", `{"type":"x","note":"speech.audio.done"}`, false},
		{"DONE with spaces", "", " [DONE]", false},
	}
	for _, tc := range tests {
		if got := isTerminal(tc.typ, []byte(tc.data)); got != tc.want {
			t.Errorf("%s: isTerminal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUpstreamError(t *testing.T) {
	e := upstreamError(&classify.Error{Status: http.StatusTooManyRequests, Body: []byte(`{"error":{"message":"slow down","type":"rate_limit_error","code":"rate_limited"}}`)})
	if e.Status != 429 || e.Message != "slow down" || e.Code != "rate_limited" || e.Type != "rate_limit_error" {
		t.Errorf("kept error %+v", e)
	}
	e = upstreamError(&classify.Error{Status: http.StatusBadGateway, Body: []byte(`<html>bad gateway</html>`)})
	if e.Status != 502 || e.Code != "upstream_error" || e.Type != "server_error" || e.Message == "" {
		t.Errorf("wrapped error %+v", e)
	}
	e = upstreamError(&classify.Error{Status: http.StatusBadRequest, Body: []byte(`{"error":{"message":"m"}}`)})
	if e.Code != "upstream_error" || e.Type != "invalid_request_error" {
		t.Errorf("filled error %+v", e)
	}
}

func TestUpstreamErrorProxyCodes(t *testing.T) {
	e := upstreamError(&classify.Error{Status: 503, Code: "upstream_unavailable", RetryAfter: 1500 * time.Millisecond})
	if e.Code != "upstream_unavailable" || e.Message == "" || e.RetryAfter != 2 || e.Type != "server_error" {
		t.Errorf("proxy error %+v", e)
	}
	for code := range proxyMessages {
		if upstreamError(&classify.Error{Status: 502, Code: code}).Message == "" {
			t.Errorf("no message for %s", code)
		}
	}
}
