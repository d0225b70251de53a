// errors.go: the errors of the dlockd client: sentinel kinds to match with
// errors.Is, and *Error, which carries the server's NO/ERR line.

package dlockd

import (
	"errors"
	"strings"
)

// Kinds of error; match them with errors.Is(err, dlockd.ErrBusy). Every
// error the client returns for a server's refusal is an *Error whose Kind
// is one of these.
var (
	ErrBusy            = errors.New("dlockd: the lock is busy")                      // NO BUSY (TryLock, Wait(0))
	ErrTimeout         = errors.New("dlockd: timed out")                             // the wait ran out, or no reply within ServerTimeout
	ErrNotHolder       = errors.New("dlockd: not the holder")                        // NO NOT_HOLDER
	ErrLost            = errors.New("dlockd: lease lost")                            // the lease is gone (see Lease.Err), or CHECK said STALE
	ErrUnavailable     = errors.New("dlockd: unavailable")                           // no server answers, ERR UNAVAILABLE, ERR NOT_ACTIVE
	ErrClusterMismatch = errors.New("dlockd: no server of the client's cluster")     // also matches ErrUnavailable
	ErrDenied          = errors.New("dlockd: denied")                                // NO DENIED, NO AUTH_FAILED, ERR NOAUTH
	ErrClosed          = errors.New("dlockd: client closed")                         // Close was called
	ErrConnectionLost  = errors.New("dlockd: connection lost, outcome unknown")      // a request that may not be sent twice
	ErrHeldByOwner     = errors.New("dlockd: held by this owner in another process") // holds= said the lease is another client's too; NO ALREADY_HELD (LockAll)
	ErrLimitMismatch   = errors.New("dlockd: the lock lives with another limit")     // NO LIMIT_MISMATCH
	ErrUpgradeDeadlock = errors.New("dlockd: exclusive asked by a shared holder")    // NO UPGRADE_DEADLOCK
	ErrDeadlock        = errors.New("dlockd: waiting would deadlock")                // NO DEADLOCK
	ErrLimit           = errors.New("dlockd: a server limit was reached")            // ERR LIMIT
	ErrProtocol        = errors.New("dlockd: protocol error")                        // the server said what no server may
	ErrServer          = errors.New("dlockd: server error")                          // any other NO or ERR
	ErrInvalid         = errors.New("dlockd: invalid argument")                      // a bad option, name or pattern, refused before anything is sent
	ErrMoved           = errors.New("dlockd: served by another partition")           // NO MOVED, still after the redirects a partitioned client follows

	// ErrUnconfirmed is Unlock's error when the server did not answer
	// within ServerTimeout: the release was sent (or will be, once
	// connected) and is sent again after a reconnect until answered, but
	// nothing confirmed it; the lock ends by its TTL at the latest.
	ErrUnconfirmed = errors.New("dlockd: the release was sent but not confirmed; the lock ends by its TTL at the latest")
)

// LostReason says why a lease was lost.
type LostReason int

const (
	NotLost         LostReason = iota
	LostExpired                // the server ended it (* EXPIRED: its TTL ran out, or a BREAK: BrokenBy)
	LostRejected               // a refresh was answered NO NOT_HOLDER
	LostUnconfirmed            // it could not be confirmed before its local deadline
	LostClosed                 // the client was closed while it was held
)

func (r LostReason) String() string {
	switch r {
	case LostExpired:
		return "expired"
	case LostRejected:
		return "rejected"
	case LostUnconfirmed:
		return "unconfirmed"
	case LostClosed:
		return "client closed"
	}
	return "not lost"
}

// Error is a failure with its kind (Unwrap), the server's line when
// there was one (Text: "NO BUSY orders/42 2710 ...") and its code word
// (Code: "BUSY"). Programs match the kind or the code; Text is for people.
type Error struct {
	Kind     error
	Code     string
	Text     string
	Msg      string
	Holder   *Holder    // ErrBusy: who holds the lock, when the server said
	Limit    int        // ErrLimitMismatch: the lock's limit
	Owners   int        // ErrDeadlock: how many owners the cycle has (this client's too)
	Reason   LostReason // ErrLost from Lease.Err
	BrokenBy string     // ErrLost, LostExpired by a BREAK: the user who broke it

	// ErrMoved (NO MOVED <partition> <addrs> <epoch>): the partition
	// that serves the name, its daemons' addresses ("" when none is
	// known) and the epoch of the map that says so
	Partition string
	Addrs     string
	MapEpoch  uint64
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Kind.Error())
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Text != "" && e.Text != e.Msg {
		b.WriteString(" (")
		b.WriteString(e.Text)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the kind.
func (e *Error) Unwrap() error { return e.Kind }

// Is makes a cluster mismatch an ErrUnavailable too.
func (e *Error) Is(target error) bool {
	return target == ErrUnavailable && e.Kind == ErrClusterMismatch
}

func newErr(kind error, msg string) *Error { return &Error{Kind: kind, Msg: msg} }

// errorOf is the error of a NO or ERR reply.
func errorOf(r *reply) *Error {
	kind := ErrServer
	if r.kind == "NO" {
		switch r.word {
		case "BUSY":
			kind = ErrBusy
		case "NOT_HOLDER":
			kind = ErrNotHolder
		case "STALE":
			kind = ErrLost
		case "AUTH_FAILED", "DENIED":
			kind = ErrDenied
		case "LIMIT_MISMATCH":
			kind = ErrLimitMismatch
		case "UPGRADE_DEADLOCK":
			kind = ErrUpgradeDeadlock
		case "DEADLOCK":
			kind = ErrDeadlock
		case "ALREADY_HELD":
			kind = ErrHeldByOwner // a multi-lock takes new leases only
		case "MOVED":
			kind = ErrMoved
		}
	} else {
		switch r.word {
		case "NOAUTH":
			kind = ErrDenied
		case "UNAVAILABLE", "NOT_ACTIVE":
			kind = ErrUnavailable
		case "LIMIT":
			kind = ErrLimit
		}
	}
	e := &Error{Kind: kind, Code: r.word, Text: r.text()}
	if kind == ErrLimitMismatch && len(r.args) >= 2 {
		e.Limit = atoi(r.args[1])
	}
	if kind == ErrDeadlock && len(r.args) >= 2 {
		e.Owners = atoi(r.args[1])
	}
	if kind == ErrBusy {
		e.Holder = busyHolderOf(r)
	}
	if kind == ErrMoved && len(r.args) >= 3 {
		e.Partition, e.Addrs, e.MapEpoch = r.args[0], r.args[1], atou(r.args[2])
		if e.Addrs == "-" {
			e.Addrs = ""
		}
	}
	return e
}
