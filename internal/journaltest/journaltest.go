// Package journaltest starts what tests of the packages above the journal
// need: an embedded nats-server with JetStream on a temporary directory and
// a journal opened on it, or a JetStream cluster of several ([StartCluster]),
// stopped when the test ends. It is for tests only; the helpers that know
// nothing of JetStream are in internal/testutil.
package journaltest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/reprise-dev/reprise/journal"
)

// OpenTimeout bounds opening the journal on a fresh server.
const OpenTimeout = 30 * time.Second

// Server starts an embedded JetStream server storing under dir (a fresh
// temporary directory when dir is ""), shut down when the test ends.
func Server(tb testing.TB, dir string) *journal.Embedded {
	tb.Helper()
	if dir == "" {
		dir = tb.TempDir()
	}
	e, err := journal.StartEmbedded(journal.EmbeddedConfig{Dir: dir})
	if err != nil {
		tb.Fatalf("StartEmbedded: %v", err)
	}
	tb.Cleanup(e.Shutdown)
	return e
}

// Connect opens an in-process client connection to e, closed when the test
// ends.
func Connect(tb testing.TB, e *journal.Embedded) *nats.Conn {
	tb.Helper()
	nc, err := e.Connect(tb.Name())
	if err != nil {
		tb.Fatalf("Connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Open opens a journal with cfg on nc.
func Open(tb testing.TB, nc *nats.Conn, cfg journal.Config) *journal.Journal {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), OpenTimeout)
	defer cancel()
	j, err := journal.Open(ctx, nc, cfg)
	if err != nil {
		tb.Fatalf("journal.Open: %v", err)
	}
	return j
}

// New starts a fresh server and opens a journal with cfg on it.
func New(tb testing.TB, cfg journal.Config) *journal.Journal {
	tb.Helper()
	return Open(tb, Connect(tb, Server(tb, "")), cfg)
}
