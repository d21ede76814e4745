package tests

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/internal/proxy"
	"github.com/reprise-dev/reprise/journal"
)

// End-to-end tests of the limits on what an upstream makes reprise store
// (internal/engine readUpstream, journal.Event.Size): a hostile upstream
// puts its bytes wherever a limit does not look.

// TestLimitsCountEveryStoredByte: MaxStreamBytes counts each event's type
// as well as its data (and a fixed overhead), so an upstream that fills
// event: fields is cut like one that fills data: fields; MaxEventSize bounds
// the whole event as sent, its event: and id: lines included.
func TestLimitsCountEveryStoredByte(t *testing.T) {
	t.Parallel()
	const (
		maxEvent   = 4096
		maxBytes   = 20_000
		typeLength = 3000 // under maxEvent, so only the stream's bytes can stop it
		events     = 40   // 40 × 3 KB of types: six times maxBytes, 80 bytes of data
	)
	up := newSecUpstream(func(w http.ResponseWriter, _ *http.Request, body []byte) bool {
		var payload string
		switch {
		case bytes.Contains(body, []byte("LONGTYPES")):
			for range events {
				payload += "event: " + strings.Repeat("t", typeLength) + "\ndata: {}\n\n"
			}
		case bytes.Contains(body, []byte("HUGETYPE")):
			payload = "data: {}\n\nevent: " + strings.Repeat("t", 2*maxEvent) + "\ndata: {}\n\n"
		case bytes.Contains(body, []byte("HUGEID")):
			payload = "data: {}\n\nid: " + strings.Repeat("9", 2*maxEvent) + "\ndata: {}\n\n"
		default:
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, payload+"data: [DONE]\n\n")
		return true
	})
	e := newEnv(t, withUpstream(up), withConfig(func(c *proxy.Config) {
		c.Limits.MaxEventSize, c.Limits.MaxStreamBytes = maxEvent, maxBytes
	}))
	stored := journal.EventSize(strings.Repeat("t", typeLength), []byte("{}"))
	cases := []struct {
		mode   string
		before int // events journaled before the failure
	}{
		{"LONGTYPES", maxBytes / stored},
		{"HUGETYPE", 1},
		{"HUGEID", 1},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			key := "limits-" + strings.ToLower(tc.mode)
			evs := readEvents(t, do(t, "POST", e.URL+chatPath, chatBody(tc.mode+" "+uniquePrompt(t, ""), true), "Idempotency-Key", key), -1)
			secLastError(t, evs, "stream_too_large")
			if len(evs) != tc.before+1 {
				t.Errorf("%d events, want the %d that fit and the error", len(evs), tc.before)
			}
			if st := waitState(t, e, key, "failed"); st.Error != "stream_too_large" || st.Events != tc.before+1 {
				t.Errorf("status %+v, want failed stream_too_large with %d events", st, tc.before+1)
			}
		})
	}
}
