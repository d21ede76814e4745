// Package fair shares what an instance has among its tenants in turns,
// so that one tenant's bulk work does not set another's latency.
//
// A Scheduler has a number of turns. A Stream (one replay, one journal
// reader) takes a turn before each piece of work (Stream.Wait) and gives
// it back after (Stream.Done): at most that many pieces run at once, the
// other streams wait parked, and the turns go round the tenants that
// wait, one piece each, then round each tenant's streams in the order
// they asked. A tenant whose single stream asks beside another tenant's
// thousands waits for one turn, not for theirs.
//
// The instance uses two kinds of turns:
//   - the CPU's (stream): a replay writes a stored generation to its
//     client as fast as the client takes it, and two thousand of them at
//     once kept two thousand goroutines runnable: the Go scheduler runs
//     them in turn, so every step of another request waited behind all of
//     them, and a 50-event replay that takes milliseconds alone took
//     seconds beside them. A replay takes a turn per batch of events; the
//     turns are one fewer than the Go scheduler's processors, and one held
//     longer than Config.Quantum (its writer blocked on a slow client,
//     not using the CPU) stops counting: the next waiter goes;
//   - the journal's batched gets (journal): an instance has a bounded
//     number in flight, and a small replay's first get waited behind the
//     thousands of the bulk's.
//
// It schedules and nothing else: it knows nothing of journals, events or
// connections, and does no I/O.
package fair
