package journal

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// livePrefix is where a generation's writer publishes each message it
// stored while a reader follows the generation from the journal (a watch
// holds it, watch.go), and a seal its message: subjectPrefix's subjects,
// on core NATS, with the message's stream sequence and the sequence of its
// subject's previous message in their headers (the headers JetStream's
// RePublish would add; the stream republishes nothing: it would load and
// copy the subject's previous message for every message stored, watched
// or not).
const livePrefix = "reprise.live."

// lastSequenceHeader is a live message's previous sequence on its subject.
const lastSequenceHeader = "Nats-Last-Sequence"

// publishLive publishes msg, just stored at seq after prev on its subject,
// to the subject's live readers. msg is the stored message's, which the
// caller gives back afterwards (the body is copied out here). A message
// lost on the way costs its readers a read of the stream (topic.after).
func (j *Journal) publishLive(msg *nats.Msg, seq, prev uint64) {
	live := &nats.Msg{Subject: livePrefix + strings.TrimPrefix(msg.Subject, subjectPrefix), Header: msg.Header, Data: msg.Data}
	live.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(seq, 10))
	live.Header.Set(lastSequenceHeader, strconv.FormatUint(prev, 10))
	_ = j.nc.PublishMsg(live)
}

// announce tells subject's live readers that seq is stored, without its
// events: a message whose previous sequence is its own links no reader's
// position to it (topic.after), so a reader before it reads the stream.
func (j *Journal) announce(subject string, seq uint64) {
	s := strconv.FormatUint(seq, 10)
	m := nats.NewMsg(livePrefix + strings.TrimPrefix(subject, subjectPrefix))
	m.Header.Set(jetstream.SequenceHeader, s)
	m.Header.Set(lastSequenceHeader, s)
	_ = j.nc.PublishMsg(m)
}

// Live delivery. An instance's readers of one generation share one core
// NATS subscription on its live subject, however many they are: a
// reader costs no JetStream consumer (a stream takes a bounded number), and
// a thousand idle readers cost one subscription. Core NATS may drop a
// message (a reconnect, a leader change, a slow subscriber): each carries
// its subject's previous sequence, so a reader that does not find the
// message after its own reads the stream instead; and a topic that heard
// nothing for probeEvery asks the stream for its subject's last message,
// so a dropped last message is found too. A topic also tells the
// generation's writer, wherever it runs, that it is followed (watch.go), so
// the writer stores what it shows without the long linger it keeps while
// only its own instance's readers follow it.
const (
	// probeEvery is how often a quiet topic checks the stream for a
	// message it did not hear.
	probeEvery = time.Second
	// topicKeep bounds the messages a topic keeps for its readers; one
	// further behind reads the stream.
	topicKeep = 32
)

// pushed is one live message.
type pushed struct {
	seq, prev uint64 // its stream sequence; its subject's previous one (0: none)
	events    []Event
}

// hub holds an instance's topics, one per generation its readers follow.
type hub struct {
	j      *Journal
	mu     sync.Mutex
	topics map[string]*topic
}

// topic is the shared live view of one subject.
type topic struct {
	h       *hub
	subject string
	sub     *nats.Subscription
	readers int // the hub's mu
	stop    chan struct{}

	mu      sync.Mutex
	recent  []pushed // newest last, at most topicKeep
	newest  uint64   // the highest sequence known stored on the subject
	heard   bool     // a message came since the last probe
	changed chan struct{}
}

// join returns subject's topic, made (and subscribed) for its first reader.
// Every join is matched by a leave.
func (h *hub) join(subject string) (*topic, error) {
	h.mu.Lock()
	if t := h.topics[subject]; t != nil {
		t.readers++
		h.mu.Unlock()
		return t, nil
	}
	t := &topic{h: h, subject: subject, readers: 1, stop: make(chan struct{}), changed: make(chan struct{})}
	sub, err := h.j.nc.Subscribe(livePrefix+strings.TrimPrefix(subject, subjectPrefix), t.receive)
	if err != nil {
		h.mu.Unlock()
		return nil, err
	}
	t.sub = sub
	h.topics[subject] = t
	h.mu.Unlock()
	go t.probe()
	// The server knows of the subscription once it answered a flush: a
	// message stored after that is heard, and the reader's one more look
	// after joining covers what came before (a probe, what a failed flush
	// leaves).
	h.j.watch(subject) // its writer lingers less from now on (watch.go)
	_ = h.j.nc.FlushTimeout(probeEvery)
	return t, nil
}

// leave drops a reader; the last one's leaving unsubscribes.
func (h *hub) leave(t *topic) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t.readers--; t.readers > 0 {
		return
	}
	delete(h.topics, t.subject)
	close(t.stop)
	_ = t.sub.Unsubscribe()
}

// receive takes one live message (in the subscription's goroutine, in the
// order its writer stored them).
func (t *topic) receive(m *nats.Msg) {
	seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return
	}
	prev, _ := strconv.ParseUint(m.Header.Get(lastSequenceHeader), 10, 64)
	f, _ := decode(m.Header, m.Data, seq) // a message that is no frame still links the chain
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recent) == topicKeep {
		t.recent = append(t.recent[:0], t.recent[1:]...)
	}
	t.recent = append(t.recent, pushed{seq: seq, prev: prev, events: f.events})
	t.heard = true
	t.advance(seq)
}

// advance records that seq is stored, and wakes the readers (t.mu held).
func (t *topic) advance(seq uint64) {
	t.newest = max(t.newest, seq)
	close(t.changed)
	t.changed = make(chan struct{})
}

// after returns the message that follows seq on the subject, if the topic
// has it; behind when the subject has messages past seq that the topic
// lacks (the reader must read the stream); else changed, closed when the
// topic learns more.
func (t *topic) after(seq uint64) (p pushed, ok, behind bool, changed <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.recent {
		if p.prev == seq && p.seq > seq {
			return p, true, false, nil
		}
	}
	return pushed{}, false, t.newest > seq, t.changed
}

// probe asks the stream, whenever the topic heard nothing for probeEvery,
// for the subject's last sequence: one dropped by core NATS is found, and
// the readers read it from the stream.
func (t *topic) probe() {
	tick := time.NewTicker(probeEvery)
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-tick.C:
		}
		t.h.j.watch(t.subject)
		t.mu.Lock()
		heard := t.heard
		t.heard = false
		t.mu.Unlock()
		if heard {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeEvery)
		m, err := t.h.j.stream.GetLastMsgForSubject(ctx, t.subject)
		cancel()
		if err != nil {
			continue
		}
		t.mu.Lock()
		if m.Sequence > t.newest {
			t.advance(m.Sequence)
		}
		t.mu.Unlock()
	}
}
