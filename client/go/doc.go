// doc.go: the package documentation.

// Package dlockd is the Go client of dlockd, a distributed lock server:
// leased, fenced, fair locks over a text line protocol
// (proto/PROTOCOL.md), with the semantics of libdlock and the Python
// client of this repository.
//
// Dial connects to the active daemon of a list; Lock, TryLock return a
// *Lease, renewed in the background every TTL/3 with a local deadline
// counted from the moment each request was sent, so that the client
// never believes in a lease longer than the server does. Lease.Done is
// closed when the lease is lost before that deadline. Over a dropped
// connection or a fail-over (ERR NOT_ACTIVE, * BYE not-active) the client
// reconnects with the same owner id and key, confirms its leases with
// REFRESH (RECLAIM when Redis forgot them) and sends its waiting LOCKs
// again; a lease it cannot confirm in time is lost.
//
// Standard library only.
package dlockd
