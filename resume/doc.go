// Package resume decides, for every request that carries a key, who may start,
// attach to or replay a generation, and it parses and issues the resume
// positions clients send back as Last-Event-ID.
//
// It owns the key record {state, fingerprint, generation, owner, lease}. All
// decisions are atomic across reprise instances: a record is created with a
// create-if-absent and changed only by compare-and-set on its revision. The
// instance that starts a generation holds a lease and heartbeats it; an
// owner whose lease ran out by its own clock cannot tell a takeover from an
// outage until the store answers it, so it is told (Lease.Lapse) and holds
// its generation until the lease is renewed or found lost (Lease.Renewed;
// see Lease). A generation whose lease lapsed (contact.go) is failed, and
// the key may generate afresh
// — unless the Salvager finds it whole (the owner died after storing it),
// then it is completed, or an Adopter (Config.Adopter) can continue it, then it
// is taken over: the same generation, under this instance's lease. Whoever
// looks at the key decides so; a Sweeper (Manager.Sweep) looks, in the
// background, at every key whose lease ran out, so that one nobody reads
// is settled too. A finished generation whose journal the TTL has
// begun to remove (Config.Kept says so) is gone with its key: not found to
// readers, and a new generation to the next request. Every write that starts a generation carries a
// random attempt id, so a write whose answer was lost in a failover is
// recognised as applied rather than failed or taken for someone else's.
//
// resume does no HTTP and does not read or write events; it stores records
// through the small Store interface, and learns of them through Records
// (package journal implements both).
package resume
