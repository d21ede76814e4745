package stream

import (
	"testing"
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
