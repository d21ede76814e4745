package journal_test

import (
	"errors"
	"testing"

	"github.com/reprise-dev/reprise/journal"
)

// TestStartEmbeddedOwnsItsDir: a second server on a store directory that
// a running one holds is refused (ErrStoreInUse) — nats-server locks
// nothing itself, and two servers on one file store each miss what the
// other stores; once the first shut down the directory is free again.
func TestStartEmbeddedOwnsItsDir(t *testing.T) {
	dir := t.TempDir()
	first, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	second, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if !errors.Is(err, journal.ErrStoreInUse) {
		if err == nil {
			second.Shutdown()
		}
		first.Shutdown()
		t.Fatalf("a second server on the same directory: %v, want ErrStoreInUse", err)
	}
	if other, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: t.TempDir()}); err != nil {
		t.Errorf("a server on another directory: %v", err)
	} else {
		other.Shutdown()
	}
	first.Shutdown()
	first.Shutdown() // idempotent
	again, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if err != nil {
		t.Fatalf("after the first shut down: %v", err)
	}
	again.Shutdown()
}
