package engine

import (
	"encoding/json"
	"slices"
	"testing"
)

func TestMergeAttempts(t *testing.T) {
	t.Parallel()
	in := [][]byte{
		[]byte(`{"generation":1,"attempt":1,"status":503}`),
		[]byte(`{"generation":1,"attempt":2,"status":200}`),
		[]byte(`not json`),
		[]byte(`{"generation":2,"attempt":1,"status":200}`),
		[]byte(`{"generation":1,"attempt":2,"status":200,"prompt_tokens":4}`), // the last attempt again, with its usage
	}
	var got []string
	for _, r := range MergeAttempts(in) {
		got = append(got, string(r))
	}
	want := []string{
		`{"generation":1,"attempt":1,"status":503}`,
		`{"generation":1,"attempt":2,"status":200,"prompt_tokens":4}`, // in the first one's place
		`{"generation":2,"attempt":1,"status":200}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("MergeAttempts = %q, want %q", got, want)
	}
}

func FuzzMergeAttempts(f *testing.F) {
	f.Add([]byte(`{"generation":1,"attempt":1}`), []byte(`{"generation":1,"attempt":1,"cost":1}`))
	f.Add([]byte(`[]`), []byte(`{"generation":"x"}`))
	f.Add([]byte(`null`), []byte(``))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		out := MergeAttempts([][]byte{a, b, a})
		if len(out) > 2 {
			t.Fatalf("%d records out of two distinct ones", len(out))
		}
		for _, r := range out {
			if !json.Valid(r) {
				t.Fatalf("invalid JSON kept: %q", r)
			}
		}
	})
}
