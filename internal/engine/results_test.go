package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/journal"
	"github.com/reprise-dev/reprise/resume"
)

// completedTail is the tail of a generation of n events of data bytes
// each, ended with its completed end marker.
func completedTail(n, data int) *Tail {
	t := newTail()
	for i := range n {
		t.store(journal.Event{Offset: uint64(i + 1), Seq: uint64(i + 1), Type: "message", Data: []byte(strings.Repeat("x", data))})
	}
	t.store(journal.Event{Offset: uint64(n + 1), Seq: uint64(n + 1), End: journal.EndCompleted})
	return t
}

func completedRecord(n int) resume.Record {
	return resume.Record{State: resume.Completed, Generation: 1, Events: uint64(n), CreatedAt: time.Now()}
}

// TestResultsKept: a whole completed generation is kept and read back by
// its stream id; what is not a whole completed result (another state,
// events missing, another generation, an unplaced reason, a result past
// an eighth of the cache) is not.
func TestResultsKept(t *testing.T) {
	r := newResults(1<<20, time.Hour)
	ref := journal.Ref{ID: "a", Gen: 1}
	tail := completedTail(10, 100)
	r.add(ref, completedRecord(10), tail)
	rec, got := r.get("a")
	if rec == nil || got != tail || rec.Events != 10 {
		t.Fatalf("get = %+v, %p; want the tail added, 10 events", rec, got)
	}
	size, _ := tail.size(10)
	if want := int64(10*(len("message")+100+journal.EventSize("", nil)) + journal.EventSize("", nil)); size != want || r.held() != want {
		t.Fatalf("size %d, held %d; want %d (each event's Size)", size, r.held(), want)
	}

	failed := completedRecord(10)
	failed.State = resume.Failed
	unplaced := completedTail(10, 1)
	unplaced.unplaced = 10
	for name, c := range map[string]struct {
		ref  journal.Ref
		rec  resume.Record
		tail *Tail
	}{
		"failed":          {journal.Ref{ID: "b", Gen: 1}, failed, completedTail(10, 1)},
		"events missing":  {journal.Ref{ID: "b", Gen: 1}, completedRecord(11), completedTail(10, 1)},
		"not ended":       {journal.Ref{ID: "b", Gen: 1}, completedRecord(10), func() *Tail { t := completedTail(9, 1); t.store(journal.Event{Offset: 11, Type: "message"}); return t }()},
		"other gen":       {journal.Ref{ID: "b", Gen: 2}, completedRecord(10), completedTail(10, 1)},
		"unplaced reason": {journal.Ref{ID: "b", Gen: 1}, completedRecord(10), unplaced},
		"too large":       {journal.Ref{ID: "b", Gen: 1}, completedRecord(10), completedTail(10, (1<<20)/8/10)},
	} {
		r.add(c.ref, c.rec, c.tail)
		if rec, _ := r.get("b"); rec != nil {
			t.Errorf("%s: kept", name)
		}
	}
	if r.held() != size {
		t.Fatalf("held %d after refusals; want %d", r.held(), size)
	}
	var none *results // ResultsCache negative
	none.add(ref, completedRecord(10), tail)
	if rec, _ := none.get("a"); rec != nil || none.held() != 0 || newResults(0, time.Hour) != nil {
		t.Fatal("a cache of no bytes keeps something")
	}
}

// TestResultsEvictLeastRecentlyRead: past its bytes, the cache lets the
// results read least recently go first, and counts only what it holds; a
// result added again replaces its entry.
func TestResultsEvictLeastRecentlyRead(t *testing.T) {
	one, _ := completedTail(4, 1000).size(4)
	r := newResults(8*one, time.Hour) // eight results, each at most an eighth
	for i := range 8 {
		r.add(journal.Ref{ID: fmt.Sprint(i), Gen: 1}, completedRecord(4), completedTail(4, 1000))
	}
	if r.held() != 8*one {
		t.Fatalf("held %d; want %d", r.held(), 8*one)
	}
	r.get("0") // read: the most recent now
	r.add(journal.Ref{ID: "8", Gen: 1}, completedRecord(4), completedTail(4, 1000))
	if rec, _ := r.get("1"); rec != nil {
		t.Fatal("the least recently read result was kept past the cache's bytes")
	}
	for _, id := range []string{"0", "2", "8"} {
		if rec, _ := r.get(id); rec == nil {
			t.Fatalf("result %s was let go", id)
		}
	}
	r.add(journal.Ref{ID: "8", Gen: 1}, completedRecord(4), completedTail(4, 1000))
	if r.held() != 8*one {
		t.Fatalf("held %d after adding a result again; want %d", r.held(), 8*one)
	}
}

// TestResultsServeWhileKeyFresh: a result serves only while its key is
// younger than the freshness (half the TTL: before it, no key is gone, so
// none moves on to a new generation); a key made earlier is not kept.
func TestResultsServeWhileKeyFresh(t *testing.T) {
	r := newResults(1<<20, time.Minute)
	now := time.Now()
	r.now = func() time.Time { return now }
	old := completedRecord(3)
	old.CreatedAt = now.Add(-time.Minute)
	r.add(journal.Ref{ID: "old", Gen: 1}, old, completedTail(3, 1))
	if rec, _ := r.get("old"); rec != nil || r.held() != 0 {
		t.Fatal("a result of a key older than the freshness was kept")
	}
	aging := completedRecord(3)
	aging.CreatedAt = now.Add(-time.Minute + time.Second)
	r.add(journal.Ref{ID: "aging", Gen: 1}, aging, completedTail(3, 1))
	if rec, _ := r.get("aging"); rec == nil {
		t.Fatal("a fresh result was not kept")
	}
	now = now.Add(time.Second)
	if rec, _ := r.get("aging"); rec != nil {
		t.Fatal("a result served once its key reached the freshness")
	}
	if r.held() != 0 {
		t.Fatalf("held %d once the result no longer serves; want 0", r.held())
	}
}
