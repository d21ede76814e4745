package journal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// ownerPair opens two journals, as two instances, on one embedded server.
func ownerPair(t *testing.T) (a, b *Journal, aConn *nats.Conn) {
	t.Helper()
	e, err := StartEmbedded(EmbeddedConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	open := func(name string) (*Journal, *nats.Conn) {
		nc, err := e.Connect(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		j, err := Open(ctx, nc, Config{Memory: true})
		if err != nil {
			t.Fatal(err)
		}
		return j, nc
	}
	a, aConn = open("a")
	b, _ = open("b")
	return a, b, aConn
}

// TestOwnerGoneOnceItsConnectionCloses: an owner that answers lives; once
// its connection closed (its process died) it is gone; a name nothing
// ever answered for is gone too. A dotted name (a host's) is one subject.
func TestOwnerGoneOnceItsConnectionCloses(t *testing.T) {
	a, b, aConn := ownerPair(t)
	ctx := context.Background()
	const owner = "host.example.com-42-beef"
	stop, err := a.AnswerOwner(owner)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if gone, err := b.OwnerGone(ctx, owner); gone || err != nil {
		t.Fatalf("an owner that answers: gone %v, err %v", gone, err)
	}
	if gone, err := b.OwnerGone(ctx, "host"); !gone || err != nil {
		t.Fatalf("a name nothing answers for (a prefix of the owner's): gone %v, err %v", gone, err)
	}
	aConn.Close()
	// The server notices the closed connection a moment later: an ask
	// meanwhile is delivered to it and goes unanswered, which is not gone.
	deadline := time.Now().Add(10 * time.Second)
	for {
		gone, err := b.OwnerGone(ctx, owner)
		if gone && err == nil {
			break
		}
		if gone || time.Now().After(deadline) {
			t.Fatalf("an owner whose connection closed: gone %v, err %v", gone, err)
		}
	}
}

// TestPausedOwnerIsNotGone: an owner whose connection is open but that
// does not answer (a paused process: its socket open, the server holds its
// subscription) is not found gone; the ask says so with an error.
func TestPausedOwnerIsNotGone(t *testing.T) {
	_, b, aConn := ownerPair(t)
	const owner = "paused"
	sub, err := aConn.Subscribe(ownerSubject(owner), func(*nats.Msg) {}) // hears, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := aConn.Flush(); err != nil {
		t.Fatal(err)
	}
	if gone, err := b.OwnerGone(context.Background(), owner); gone || err == nil {
		t.Fatalf("a silent owner: gone %v, err %v; want not gone, with the ask's error", gone, err)
	}
}

// TestOwnerGoneWaitsOutAReconnect: an instance whose own connection came
// back lately finds nobody gone — the others may still be reconnecting.
func TestOwnerGoneWaitsOutAReconnect(t *testing.T) {
	_, b, _ := ownerPair(t)
	b.conn.mu.Lock()
	b.conn.reconnects++ // as if the connection had reconnected since it was last looked at
	b.conn.mu.Unlock()
	if gone, err := b.OwnerGone(context.Background(), "nobody"); gone || !errors.Is(err, errUnsettled) {
		t.Fatalf("just reconnected: gone %v, err %v; want errUnsettled", gone, err)
	}
	b.conn.mu.Lock()
	b.conn.seen = time.Now().Add(-time.Hour)
	b.conn.mu.Unlock()
	if gone, err := b.OwnerGone(context.Background(), "nobody"); !gone || err != nil {
		t.Fatalf("reconnected long ago: gone %v, err %v", gone, err)
	}
}
