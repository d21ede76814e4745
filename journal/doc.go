// Package journal stores every upstream event of every generation in NATS
// JetStream and reads it back.
//
// It owns two JetStream assets: a stream holding one subject per
// (stream id, generation) and a KV bucket holding opaque record values. Both
// expire after the configured TTL. Appends are pipelined (asynchronous
// publish, in-order acknowledgements) and fenced: the first event of a
// generation is published with an expected-last-subject-sequence of zero, so
// two writers can never both start the same generation subject. Only the
// owner of a generation's lease writes it, and only that subject, so
// generations never interleave. (No message-id deduplication: the client
// library re-sends an asynchronous publish only when it was not stored, and
// a dedupe window would hold every event id in server memory.)
//
// journal knows nothing about HTTP, tenants, keys or decisions: callers hand
// it an opaque stream id (a hash chosen by package resume) and a generation.
// It must not interpret event data.
package journal
