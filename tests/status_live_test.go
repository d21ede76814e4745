package tests

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/mockllm"
	"github.com/reprise-dev/reprise/internal/testutil"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestStatusLive: the status JSON of a generation in progress counts the
// events journaled so far, on the instance that runs it (its tail) and on
// another one (the journal's last message), and its updated_at moves with
// them — not only at the lease's heartbeats, which the 60 s lease here
// spaces 20 s apart: the record itself still says 0 events.
func TestStatusLive(t *testing.T) {
	t.Parallel()
	ns, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	urls := []string{ns.Server.ClientURL()}
	hs := httptest.NewServer(mockllm.New(mockllm.Config{}))
	t.Cleanup(hs.Close)
	opts := instanceOptions{lease: time.Minute, replicas: 1, grace: time.Second, lenient: true}
	a := startInstance(t, "A", urls, hs.URL, opts)
	b := startInstance(t, "B", urls, hs.URL, opts)

	// 3 events stored, then the upstream waits.
	first := do(t, "POST", a.URL+chatPath, chatBody(uniquePrompt(t, "[tokens=10] [hang_after=3]"), true), "Idempotency-Key", "k-live")
	defer first.Body.Close()
	evs := readEvents(t, first, 3)
	at, err := resume.ParsePosition(lastID(evs))
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range []struct {
		name, url string
	}{{"A (owner)", a.URL}, {"B", b.URL}} {
		// The client may see an event a moment before it is stored (the
		// owner's preview, docs/live-path.md): the status counts what is.
		var st keyStatus
		testutil.Eventually(t, 10*time.Second, inst.name+" counting the 3 events journaled", func() bool {
			var code int
			st, code = clusterStatus(t, inst.url, "k-live")
			if code != 200 || st.State != "in_progress" {
				t.Fatalf("%s: status HTTP %d %+v, want 200 in_progress", inst.name, code, st)
			}
			return uint64(st.Events) == at.Offset
		})
		if !st.UpdatedAt.After(st.CreatedAt) {
			t.Errorf("%s: updated_at %s is not after created_at %s: it does not follow the journal", inst.name, st.UpdatedAt, st.CreatedAt)
		}
		if d := time.Since(st.UpdatedAt); d < -time.Second || d > 10*time.Second {
			t.Errorf("%s: updated_at %s is %s from now, want the last event's time", inst.name, st.UpdatedAt, d)
		}
		// The attempt log, too, is the journal's: any instance serves it.
		testutil.Eventually(t, 10*time.Second, inst.name+" serving the generation's one attempt", func() bool {
			r := do(t, "GET", inst.url+"/v1/streams/k-live/attempts", "")
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			return r.StatusCode == 200 && strings.Count(string(b), `"attempt":1,`) == 1 && strings.Contains(string(b), `"status":200`)
		})
	}
}
