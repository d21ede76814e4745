package engine

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/reprise-dev/reprise/journal"
)

func TestResponsesBackground(t *testing.T) {
	var r Responses
	body, ok := r.Background([]byte(`{"model":"m","stream":true,"background":false,"input":"hi"}`))
	var v map[string]any
	if !ok || json.Unmarshal(body, &v) != nil || v["background"] != true || v["input"] != "hi" || v["stream"] != true {
		t.Fatalf("Background = %s, %v; want the request with background true", body, ok)
	}
	if got, ok := r.Background([]byte(`[1]`)); ok || string(got) != `[1]` {
		t.Fatalf("Background of a non-object = %s, %v; want it unchanged", got, ok)
	}
	path, query := r.Resume("resp_1", 41)
	if path != "/v1/responses/resp_1" || query != "stream=true&starting_after=41" {
		t.Fatalf("Resume = %s?%s", path, query)
	}
}

func TestResponsesResumable(t *testing.T) {
	tests := []struct {
		name, typ, data string
		id              string
	}{
		{"background", "response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","background":true}}`, "resp_1"},
		{"unnamed event", "", `{"type":"response.created","response":{"id":"resp_2","background":true}}`, "resp_2"},
		{"not background", "response.created", `{"type":"response.created","response":{"id":"resp_3"}}`, ""},
		{"another event", "response.in_progress", `{"response":{"id":"resp_4","background":true}}`, ""},
		{"an id that is no segment", "response.created", `{"response":{"id":"../admin","background":true}}`, ""},
		{"no id", "response.created", `{"response":{"background":true}}`, ""},
		{"not JSON", "response.created", `{`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, ok := Responses{}.Resumable(tc.typ, []byte(tc.data))
			if id != tc.id || ok != (tc.id != "") {
				t.Fatalf("Resumable = %q, %v; want %q", id, ok, tc.id)
			}
		})
	}
}

func TestResumeAfter(t *testing.T) {
	tests := []struct {
		name    string
		last    journal.Event
		found   bool
		want    uint64
		wantErr error
	}{
		{"an event", journal.Event{Type: "response.output_text.delta", Data: []byte(`{"type":"response.output_text.delta","sequence_number":9}`)}, true, 9, nil},
		{"nothing stored", journal.Event{}, false, 0, errNotContinuable},
		{"the end", journal.Event{End: journal.EndFailed}, true, 0, errNotContinuable},
		{"the terminal event", journal.Event{Type: "response.completed", Data: []byte(`{"type":"response.completed","sequence_number":30}`)}, true, 0, errNotContinuable},
		{"an error", journal.Event{Type: TypeError, Data: []byte(`{"error":{}}`)}, true, 0, errNotContinuable},
		{"no sequence number", journal.Event{Type: "response.output_text.delta", Data: []byte(`{}`)}, true, 0, errNotContinuable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resumeAfter(Responses{}, Responses{}, tc.last, tc.found)
			if got != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("resumeAfter = %d, %v; want %d, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// FuzzResumable: the background readers of Responses events never panic,
// and an id they find is one path segment.
func FuzzResumable(f *testing.F) {
	for _, s := range []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","background":true}}`,
		`{"sequence_number":-1}`, `{"sequence_number":1e3}`, `{"response":null}`, `{"response":{"id":"a/b","background":true}}`,
	} {
		f.Add("response.created", s)
	}
	f.Fuzz(func(t *testing.T, typ, data string) {
		var r Responses
		if id, ok := r.Resumable(typ, []byte(data)); ok && (id == "" || strings.ContainsAny(id, "/?#%.")) {
			t.Fatalf("Resumable(%q, %q) = %q", typ, data, id)
		}
		_, _ = r.Sequence([]byte(data))
		_, _ = resumeAfter(r, r, journal.Event{Type: typ, Data: []byte(data)}, true)
	})
}
