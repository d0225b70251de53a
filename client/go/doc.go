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
// again, each with the request id its acquire drew (req=), so that a LOCK
// whose reply was lost with the connection gets the grant it was given;
// a lease it cannot confirm in time is lost.
//
// LockAll takes several locks at once, all or none (LOCK a b c ...):
// the server takes them in byte order of the names and answers when it
// has them all; each is an ordinary Lease, and UnlockAll releases them
// together.
//
// A lease taken with NotifyWaiters hears when others wait for its lock
// (* WAITING): Lease.Waiters says how many, and the OnContended function
// is called, for a holder that can let go early.
//
// An election is held on a lock: candidates Lock it with a Value (what
// their followers should know), the holder is the leader and its Token
// the term; Lease.Proclaim says a new value, Unlock resigns, and
// followers read Status.Value and Watch for Events (EventGranted,
// EventValue) carrying it.
//
// Partitions: Dial asks its server for the partition map (MAP). A
// service split into partitions makes the Client a router over one
// ordinary client per partition, dialed on first use: each call about a
// name goes to the client of the name's partition (LockAll: of its first
// name), a Lease to the client that granted it, calls without a name
// (Ping, a Watch of a prefix) go to the first connection's daemon, and a
// NO MOVED is followed (the map read again when it is newer), 3 times at
// most, then ErrMoved. Without partitions nothing changes.
//
// A lease survives a move of its slot to another partition (PARTITION
// MOVE carries the slot's locks), with the same token: a renewal,
// Refresh, Proclaim, Check or Unlock answered NO MOVED re-homes the
// lease on the client of the partition named, where it and every later
// request about it (the renewals too) go from then on. While the slot
// moves the renewals are answered ERR UNAVAILABLE and retried (AtRisk
// may turn true for a moment), and a call meeting it (or a MOVED of a
// daemon whose map is older than the client's) is sent again for up to
// ServerTimeout; a Lock that was waiting for a name whose slot moved
// is sent to the new partition with what is left of its wait, its place
// in the queue kept there. The lease is lost only as any lease is.
//
// Standard library only.
package dlockd
