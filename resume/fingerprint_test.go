package resume_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/reprise-dev/reprise/resume"
)

// TestFingerprintCanonical: the same request serialised differently has
// one fingerprint; another request, even one float64 cannot tell apart,
// has another.
func TestFingerprintCanonical(t *testing.T) {
	const path = "/v1/chat/completions"
	base := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi <b>"}],"seed":9007199254740993,"temperature":0.5}`
	for _, tc := range []struct {
		name, body string
		same       bool
	}{
		{"keys in another order", `{"temperature":0.5,"seed":9007199254740993,"messages":[{"content":"hi <b>","role":"user"}],"stream":true,"model":"m"}`, true},
		{"whitespace", "{\n  \"model\": \"m\",\t\"stream\" : true, \"messages\": [ {\"role\":\"user\", \"content\":\"hi <b>\"} ],\r\n \"seed\": 9007199254740993, \"temperature\": 0.5 }\n", true},
		{"escapes", `{"model":"\u006d","stream":true,"messages":[{"role":"user","content":"hi \u003cb\u003e"}],"seed":9007199254740993,"temperature":0.5}`, true},
		{"a float written otherwise", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi <b>"}],"seed":9007199254740993,"temperature":5e-1}`, true},
		{"another integer float64 rounds to the same", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi <b>"}],"seed":9007199254740992,"temperature":0.5}`, false},
		{"another value", `{"model":"m","stream":false,"messages":[{"role":"user","content":"hi <b>"}],"seed":9007199254740993,"temperature":0.5}`, false},
		{"arrays keep their order", `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi <b>"}],"seed":9007199254740993,"temperature":0.5,"stop":["a","b"]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resume.Fingerprint(path, []byte(tc.body)) == resume.Fingerprint(path, []byte(base)); got != tc.same {
				t.Errorf("same fingerprint: %t, want %t (canonical %s)", got, tc.same, resume.Canonical([]byte(tc.body)))
			}
		})
	}
	if resume.Fingerprint(path, []byte(`{"a":[1,2]}`)) == resume.Fingerprint(path, []byte(`{"a":[2,1]}`)) {
		t.Error("arrays in another order have the same fingerprint")
	}
	if resume.Fingerprint(path, []byte(base)) == resume.BytesFingerprint(path, []byte(base)) {
		t.Error("the canonical and the bytes fingerprint are the same hash")
	}
	for _, raw := range []string{"not json", `{"a":1,"a":2}`, "{\"a\":\"\xff\"}", "a=1&b=2", ""} {
		if got := resume.Canonical([]byte(raw)); string(got) != raw {
			t.Errorf("Canonical(%q) = %q, want its bytes", raw, got)
		}
	}
	if resume.Fingerprint(path, []byte(`{"a":1,"a":2}`)) == resume.Fingerprint(path, []byte(`{"a":2,"a":1}`)) {
		t.Error("bodies with a duplicate name, which JSON parsers read differently, have one fingerprint")
	}
	body := []byte(` {"b":1, "a":2} `)
	resume.Canonical(body)
	if string(body) != ` {"b":1, "a":2} ` {
		t.Errorf("Canonical changed its argument: %q", body)
	}
}

// TestFingerprintOlderRecord: a record an older version wrote, with only
// the bytes' fingerprint, still recognises a duplicate with the same
// bytes and refuses another body; once it regenerates it has the
// canonical one, and a reordered duplicate attaches.
func TestFingerprintOlderRecord(t *testing.T) {
	store := newStore(t)
	m := newManager(t, store, "owner", 0, nil)
	const path, body = "/v1/chat/completions", `{"model":"m","stream":true}`
	req := func(key, body string) resume.Request {
		r := request(key, body)
		r.BytesFingerprint = resume.BytesFingerprint(path, []byte(body))
		return r
	}
	old := func(key string, state resume.State) {
		t.Helper()
		rec, _ := json.Marshal(map[string]any{
			"key": key, "state": state, "fingerprint": resume.BytesFingerprint(path, []byte(body)), "generation": 1,
			"path": path, "stream": true, "events": 3, "content_type": "text/event-stream",
		})
		if _, created, err := store.Create(waitCtx(t), resume.StreamID("tenant", key), rec); err != nil || !created {
			t.Fatalf("writing the older record: %v, %t", err, created)
		}
	}
	old("done", resume.Completed)
	if out, err := begin(t, m, req("done", body)); err != nil || out.Decision != resume.Replay {
		t.Errorf("the same bytes: %v, %v; want a replay", out.Decision, err)
	}
	if _, err := begin(t, m, req("done", `{"stream":true,"model":"m"}`)); !errors.Is(err, resume.ErrMismatch) {
		t.Errorf("other bytes against an older record: %v, want ErrMismatch (it holds no canonical fingerprint)", err)
	}
	old("failed", resume.Failed)
	out, err := begin(t, m, req("failed", body))
	if err != nil || out.Decision != resume.Start || out.Record.Fingerprint != req("failed", body).Fingerprint {
		t.Fatalf("regenerating an older failed record: %v, %+v, %v", out.Decision, out.Record, err)
	}
	if out, err := begin(t, m, req("failed", ` { "stream": true, "model": "m" }`)); err != nil || out.Decision != resume.Attach {
		t.Errorf("a reordered duplicate once regenerated: %v, %v; want an attach", out.Decision, err)
	}
	// What a newer version writes, an older one reads: "fingerprint" is
	// still the bytes'.
	got, _, _, err := store.Get(waitCtx(t), resume.StreamID("tenant", "failed"))
	var v struct{ Fingerprint string }
	if err != nil || json.Unmarshal(got, &v) != nil || v.Fingerprint != resume.BytesFingerprint(path, []byte(body)) {
		t.Errorf("the record's \"fingerprint\" %q (%v), want the bytes' fingerprint", v.Fingerprint, err)
	}
}

// FuzzCanonical: Canonical is idempotent, keeps a JSON value's meaning,
// and gives a value with its members in another order, other whitespace
// and other string escapes the same form.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,null,{"d":"x","c":1.50}]}`, ` { "a" : "\u00e9\n" } `, `[1e2, -0, 0.1, 123456789012345678901234567890]`,
		`{"a":1,"a":2}`, `"\ud800"`, "not json", `{"":{"":""}}`, `1E400`, `{"model":"gpt","stream":true,"messages":[]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c := resume.Canonical(in)
		if again := resume.Canonical(c); !bytes.Equal(again, c) {
			t.Fatalf("Canonical(%q) = %q, and again %q", in, c, again)
		}
		if !jsontext.Value(in).IsValid() {
			return // I-JSON only: no duplicate names, valid UTF-8
		}
		var a, b any
		if json.Unmarshal(in, &a) != nil {
			return // a number beyond float64 (JCS saturates it)
		}
		if json.Unmarshal(c, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("Canonical(%q) = %q: another value", in, c)
		}
		d := json.NewDecoder(bytes.NewReader(in))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("decoding %q: %v", in, err)
		}
		if p := permuted(v); !bytes.Equal(resume.Canonical(p), c) {
			t.Fatalf("%q and %q, one value, canonicalise to %q and %q", in, p, c, resume.Canonical(p))
		}
	})
}

// permuted writes v with object members in reverse order, spaces around
// every token and encoding/json's string escapes (HTML ones included).
func permuted(v any) []byte {
	var b strings.Builder
	var write func(any)
	write = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range v {
					if !yield(k) {
						return
					}
				}
			})
			slices.Reverse(keys)
			b.WriteString(" { ")
			for i, k := range keys {
				if i > 0 {
					b.WriteString(" , ")
				}
				kb, _ := json.Marshal(k)
				b.Write(kb)
				b.WriteString(" : ")
				write(v[k])
			}
			b.WriteString(" } ")
		case []any:
			b.WriteString(" [ ")
			for i, e := range v {
				if i > 0 {
					b.WriteString(" , ")
				}
				write(e)
			}
			b.WriteString(" ] ")
		case json.Number:
			b.WriteString(v.String())
		default:
			vb, _ := json.Marshal(v)
			b.Write(vb)
		}
	}
	write(v)
	return []byte(b.String())
}

// BenchmarkFingerprint: what the canonical form costs a request, against
// the bytes' fingerprint, for a short chat request and a long one (a
// conversation of 200 messages, ~60 KB).
//
//	go test ./resume -run '^$' -bench Fingerprint -benchmem
func BenchmarkFingerprint(b *testing.B) {
	msg := func(i int) map[string]any {
		return map[string]any{"role": []string{"user", "assistant"}[i%2], "content": strings.Repeat("lorem ipsum dolor sit amet ", 10)}
	}
	for _, n := range []int{1, 200} {
		msgs := make([]map[string]any, n)
		for i := range msgs {
			msgs[i] = msg(i)
		}
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "stream": true, "temperature": 0.7, "messages": msgs})
		b.Run("canonical/"+strconv.Itoa(len(body))+"B", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				resume.Fingerprint("/v1/chat/completions", body)
			}
		})
		b.Run("bytes/"+strconv.Itoa(len(body))+"B", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				resume.BytesFingerprint("/v1/chat/completions", body)
			}
		})
	}
}
