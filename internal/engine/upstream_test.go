package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/cost"
)

// TestReadUpstreamReservedNames: an upstream event named as one of
// reprise's own (error, reset, reprise.*) is never emitted: an error event
// that carries an error is the upstream's failure, anything else under such
// a name is no answer — [DONE] under event: error included.
func TestReadUpstreamReservedNames(t *testing.T) {
	const chunk = "data: {\"choices\":[]}\n\n"
	for _, tc := range []struct {
		name     string
		proto    Protocol
		body     string
		reserved string // the name of the refused event
		failure  string // the failure's code
	}{
		{name: "chat reset", proto: Chat{}, body: chunk + "event: reset\ndata: {\"generation\":2}\n\ndata: [DONE]\n\n", reserved: "reset"},
		{name: "chat error [DONE]", proto: Chat{}, body: chunk + "event: error\ndata: [DONE]\n\n", reserved: "error"},
		{name: "chat error chunk", proto: Chat{}, body: "event: error\ndata: {\"choices\":[]}\n\ndata: [DONE]\n\n", reserved: "error"},
		{name: "chat reprise.body", proto: Chat{}, body: "event: reprise.body\ndata: {}\n\ndata: [DONE]\n\n", reserved: "reprise.body"},
		{name: "chat error event", proto: Chat{}, body: chunk + "event: error\ndata: {\"error\":{\"message\":\"boom\",\"code\":\"overloaded\"}}\n\n", failure: "upstream:overloaded"}, // reprise's own code, kept apart
		{name: "chat error event owner_lost", proto: Chat{}, body: chunk + "event: error\ndata: {\"error\":{\"message\":\"x\",\"code\":\"owner_lost\"}}\n\n", failure: "upstream:owner_lost"},
		{name: "chat error event own code", proto: Chat{}, body: chunk + "event: error\ndata: {\"error\":{\"message\":\"x\",\"code\":\"rate_limit_exceeded\"}}\n\n", failure: "rate_limit_exceeded"},
		{name: "generic error event", proto: Generic{}, body: "event: error\ndata: {\"type\":\"error\",\"message\":\"boom\"}\n\n", failure: "upstream_error"},
		{name: "generic error [DONE]", proto: Generic{}, body: "event: error\ndata: [DONE]\n\n", reserved: "error"},
		{name: "responses reset", proto: Responses{}, body: "event: reset\ndata: {\"type\":\"reset\"}\n\n", reserved: "reset"},
		{name: "responses error", proto: Responses{}, body: "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"m\"}\n\n", failure: "server_error"},
		{name: "messages reset", proto: Messages{}, body: "event: reset\ndata: {}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", reserved: "reset"},
		{name: "messages error", proto: Messages{}, body: "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", failure: "overloaded_error"},
		{name: "speech reset", proto: Speech{}, body: "event: reset\ndata: {\"type\":\"speech.audio.done\"}\n\n", reserved: "reset"},
		{name: "speech error done", proto: Speech{}, body: "event: error\ndata: {\"type\":\"speech.audio.done\"}\n\n", reserved: "error"},
		{name: "long reserved name", proto: Chat{}, body: "event: reprise." + strings.Repeat("x", 200) + "\ndata: {}\n\n", reserved: "reprise." + strings.Repeat("x", 56)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readUpstream(strings.NewReader(tc.body), tc.proto, upstreamLimits{maxEvent: 4096, maxEvents: 10, maxBytes: 4096},
				func(typ string, _ []byte, _ Inspection, _ *cost.Usage) error {
					if reserved(typ) {
						t.Fatalf("emitted an event named %q", typ)
					}
					return nil
				})
			var named *reservedEvent
			var failed *failure
			switch {
			case tc.reserved != "":
				if !errors.As(err, &named) || named.typ != tc.reserved {
					t.Fatalf("err = %v, want the reserved name %q refused", err, tc.reserved)
				}
			case !errors.As(err, &failed) || failed.e.Code != tc.failure:
				t.Fatalf("err = %v, want the upstream's failure %s", err, tc.failure)
			}
		})
	}
}
