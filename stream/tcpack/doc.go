// Package tcpack tells whether the TCP peer of a connection acknowledged
// every byte written into it up to a point: whether an answer reached the
// other end's kernel, rather than only this end's socket buffer. A write
// succeeds once its bytes are in the local send buffer; a link that then
// drops the last segments, a client that leaves before they arrive, leave
// them unacknowledged, and only the kernel knows.
//
// It reads Linux's TCP_INFO (tcpi_bytes_acked, the connection's state) and
// SIOCOUTQ; elsewhere, and on a connection that is not TCP, Take answers
// ErrUnsupported and the caller keeps its own judgement. What is
// acknowledged is what the peer's TCP took: a middlebox that terminates
// TCP (an L7 proxy, a load balancer) acknowledges what it read, whatever
// it then does with it.
//
// It owns the descriptor a Mark holds and nothing else: it never reads or
// writes the connection, and knows nothing of HTTP.
package tcpack
