package journal_test

import (
	"strconv"
	"testing"
	"time"
)

// TestAttemptLog: each id's attempt log holds its own records, in the order
// they were logged; an id without one has none.
func TestAttemptLog(t *testing.T) {
	t.Parallel()
	j := newJournal(t)
	ctx := waitCtx(t, waitTimeout)
	if got, err := j.Attempts(ctx, "none"); err != nil || len(got) != 0 {
		t.Fatalf("Attempts of an id without any = %q, %v; want none", got, err)
	}
	for i := 1; i <= 3; i++ {
		if err := j.LogAttempt("a", []byte(`{"attempt":`+strconv.Itoa(i)+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.LogAttempt("b", []byte(`{"attempt":1}`)); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for {
		var err error
		if got, err = j.Attempts(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if len(got) >= 3 || ctx.Err() != nil {
			break
		}
		time.Sleep(10 * time.Millisecond) // the log is published without waiting for its acknowledgement
	}
	if len(got) != 3 {
		t.Fatalf("attempt log of a = %q, want 3 records", got)
	}
	for i, rec := range got {
		if want := `{"attempt":` + strconv.Itoa(i+1) + `}`; string(rec) != want {
			t.Errorf("record %d = %s, want %s", i, rec, want)
		}
	}
}
