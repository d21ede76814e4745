package engine

import (
	"context"
	"testing"
	"time"

	"github.com/reprise-dev/reprise/internal/journaltest"
	"github.com/reprise-dev/reprise/journal"
)

func testJournal(tb testing.TB) *journal.Journal {
	tb.Helper()
	return journaltest.New(tb, journal.Config{})
}

func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	return ctx
}
