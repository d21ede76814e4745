// Package journal stores every upstream event of every generation in NATS
// JetStream and reads it back.
//
// It owns two JetStream assets: a stream holding one subject per
// (stream id, generation), plus one per stream id for its attempt log
// (opaque records of the upstream requests made for it), and a KV bucket
// holding opaque record values. All expire after the configured TTL. With
// the cost guard on, a third (Spend): a KV bucket of each instance's spend
// per minute, kept a day and an hour.
//
// A generation is written as a chain of messages, each carrying the events
// that arrived while the one before was being stored (a frame), each
// published expecting the one before as its subject's last message. The
// first expects the subject to be empty: two writers can never both start a
// generation (the fence). The chain makes the stored order the append order
// with no holes whatever a failover loses or delays: a message can only
// follow its predecessor, so a stale copy is refused, and a message whose
// acknowledgement was lost is recognised by the writer's id on the subject's
// last message. A writer therefore tries again through reconnects and leader
// elections (Config.AppendTimeout) instead of failing its generation, and
// one round trip stores as many events as are waiting. Seal ends a
// generation whose writer is gone, fencing that writer too.
//
// journal knows nothing about HTTP, tenants, keys or decisions: callers hand
// it an opaque stream id (a hash chosen by package resume) and a generation.
// It must not interpret event data.
package journal
