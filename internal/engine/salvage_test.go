package engine

import (
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/classify"
	"github.com/reprise-dev/reprise/internal/auth"
	"github.com/reprise-dev/reprise/internal/cost"
	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// TestSalvageBillsTheNotedUsage: a chat generation whose owner died after
// storing its terminal event is salvaged completed, priced by the usage
// stored with that event (its note), which no journaled event holds — or,
// journaled by an owner of an earlier version that kept the usage in the
// record instead, by the record's. A generation that never stored its
// terminal event is sealed failed, whatever its record holds.
func TestSalvageBillsTheNotedUsage(t *testing.T) {
	j := testJournal(t)
	ctx := testCtx(t)
	up, _ := url.Parse("http://127.0.0.1:1")
	policy, err := classify.New(classify.Config{}, DefaultClient(time.Second, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Secret: []byte("salvage-secret-0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{Journal: j, Upstream: Upstream{URL: up, Policy: policy, Decorator: a}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Shutdown(ctx) }()

	noted := cost.Usage{PromptTokens: 11, CompletionTokens: 8, TotalTokens: 19}
	kept := cost.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}
	chunk := []byte(`{"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi"}}]}`)
	for i, tc := range []struct {
		name     string
		note     bool // the terminal event is stored noted
		terminal bool // the terminal event is stored at all
		record   *cost.Usage
		want     *cost.Usage // nil: not salvaged
	}{
		{"noted", true, true, nil, &noted},
		{"noted over a kept usage", true, true, &kept, &noted},
		{"kept by an older owner", false, true, &kept, &kept},
		{"no usage anywhere", false, true, nil, nil},
		{"no terminal event", false, false, &kept, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := journal.Ref{ID: fmt.Sprintf("salvage-%d", i), Gen: 1}
			stored := make(chan uint64, 4)
			w := j.NewWriter(ref, func(ev journal.Event) { stored <- ev.Offset })
			if err := w.Append(ctx, "", chunk); err != nil {
				t.Fatal(err)
			}
			want := uint64(1)
			switch {
			case tc.note:
				err = w.AppendNoted(ctx, "", []byte("[DONE]"), usageNote(noted))
				want++
			case tc.terminal:
				err = w.Append(ctx, "", []byte("[DONE]"))
				want++
			}
			if err != nil {
				t.Fatal(err)
			}
			for off := uint64(0); off < want; { // the owner dies once its last event is stored
				select {
				case off = <-stored:
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
			w.Abort()
			rec := resume.Record{Generation: 1, Stream: true, Path: "/v1/chat/completions", Usage: tc.record}
			res, ok, err := e.Salvage(ctx, ref.ID, rec)
			switch {
			case err != nil:
				t.Fatal(err)
			case !tc.terminal:
				if ok {
					t.Fatalf("Salvage = %+v, want not salvaged (no terminal event)", res)
				}
				return
			case !ok || res.State != resume.Completed || res.Events != 2:
				t.Fatalf("Salvage = %+v, %v; want completed with 2 events", res, ok)
			case tc.want == nil && res.Usage != nil, tc.want != nil && (res.Usage == nil || *res.Usage != *tc.want):
				t.Fatalf("salvaged usage %+v, want %+v", res.Usage, tc.want)
			}
		})
	}
}
