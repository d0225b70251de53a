// lease.go: Lock, TryLock and the Lease they return (LockAll's too:
// multi.go) (Token, Done, Err,
// AtRisk, Check, Refresh, Unlock), and Status and Holders.

package dlockd

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Lease is one hold of a lock. While it is held the client renews it in
// the background every TTL/3 and keeps a local deadline, counted from the
// moment the request that granted or confirmed it was sent, so that it
// never believes in a lease longer than the server does. When the lease is
// lost -- the server ended it, refused a refresh, or it could not be
// confirmed before its local deadline less a guard -- Done is closed and
// Err says why, before the server could grant the lock to anyone else.
//
// Valid is the check to make before acting on the protected resource
// (and the fencing token passed along with the action): it reads the
// clock itself, so it turns false at the local deadline less the guard
// even if the client's goroutine has not run yet (a stalled process, a
// loaded machine), while Done and the background loss detection may come
// a little later.
type Lease struct {
	// the client whose manager owns the lease (under mu; nil while it
	// is re-homed, moveCh closed when that ends): the leg of a
	// partition, which changes when the lease's slot moves to another
	// partition (rehome)
	c      *Client
	moveCh chan struct{}
	moveMu sync.Mutex // one re-home at a time

	name  string
	token uint64
	mode  string
	limit int

	// owned by the manager goroutine
	ttl        float64 // ms: what renewals ask for
	deadlineM  float64
	renewAt    float64
	acquiredAt float64
	renew      bool
	refreshing bool
	unlocking  bool
	released   bool
	atRiskM    bool
	lostM      LostReason
	proof      string
	until      int64
	value      string // what it says (Value, Proclaim), as sent: a RECLAIM says it again
	ticket     *ticket
	rehoming   bool // a renewal was answered MOVED: being re-homed (leaseMoved)
	movedN     int  // renewals answered MOVED since one was confirmed

	lostAtM float64 // deadlineM less the guard: lost from then on

	mu       sync.Mutex
	err      *Error
	atRisk   bool
	deadline float64
	lostAt   float64 // deadline less the guard
	ended    bool    // Unlock was called
	done     chan struct{}

	waiters     int  // the last * WAITING's count (NotifyWaiters)
	newsPending bool // queued for OnContended, not told yet
}

func (l *Lease) live() bool { return l.lostM == NotLost && !l.released && !l.unlocking }

func (l *Lease) noteProof(r *reply) {
	p, u := r.kvs("proof"), r.kvs("until")
	if len(p) == 32 && u != "" {
		if n := atou(u); n > 0 {
			l.proof, l.until = p, int64(n)
		}
	}
}

// setDeadline sets the local deadline; the guard is the lease's TTL's
// (set l.ttl first).
func (l *Lease) setDeadline(d float64, atRisk bool) {
	l.deadlineM = d
	l.lostAtM = d - l.c.guardMs(l.ttl)
	l.mu.Lock()
	l.deadline, l.atRisk, l.lostAt = d, atRisk, l.lostAtM
	l.mu.Unlock()
}

func (l *Lease) setEnded() {
	l.mu.Lock()
	l.ended = true
	l.mu.Unlock()
}

// setLost records why the lease was lost (an unconfirmed loss Err saw
// first is kept: Err does not change its answer) and closes Done.
func (l *Lease) setLost(e *Error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = e
	}
	l.mu.Unlock()
	close(l.done)
}

func unconfirmedErr(name string, token uint64) *Error {
	return &Error{Kind: ErrLost, Reason: LostUnconfirmed,
		Msg: fmt.Sprintf("%s (token %d): it could not be confirmed before its local deadline", name, token)}
}

// lostLocked: the lease was lost, or it is past its local deadline less
// the guard (l.mu held); records that loss for Err.
func (l *Lease) lostLocked(now float64) bool {
	if l.err != nil {
		return true
	}
	if !l.ended && now >= l.lostAt {
		l.err = unconfirmedErr(l.name, l.token)
		return true
	}
	return false
}

// Name is the lock's name.
func (l *Lease) Name() string { return l.name }

// Token is the lease's fencing token: larger than every token granted
// before it, for any lock.
func (l *Lease) Token() uint64 { return l.token }

// Mode is "exclusive", "shared" or "semaphore".
func (l *Lease) Mode() string { return l.mode }

// Done is closed when the lease is lost before its local deadline (Err
// says why), or when the client is closed. It is not closed by Unlock.
func (l *Lease) Done() <-chan struct{} { return l.done }

// Err is nil while the lease is held, then why it was lost: an *Error of
// kind ErrLost whose Reason is LostExpired (BrokenBy names a BREAK's
// user), LostRejected, LostUnconfirmed or LostClosed. Once the local
// deadline less the guard has passed it is the LostUnconfirmed loss even
// if Done is not closed yet. nil after Unlock (a release is no loss).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lostLocked(nowMs()) {
		return nil
	}
	return l.err
}

// Valid is true while the lease is held: not lost, Unlock not called,
// and the clock before its local deadline less the guard (what
// dlock_lease_valid and the Python client's Lease.valid tell). Check it
// right before acting on the protected resource: it does not depend on
// the client's goroutine having run.
func (l *Lease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.ended && !l.lostLocked(nowMs())
}

// AtRisk is true while a renewal is overdue (not confirmed by half the
// TTL: the server or the network is slow or gone, or a renewal was
// refused as UNAVAILABLE) or the server warned that the lease is about
// to end; false again once a renewal is confirmed.
func (l *Lease) AtRisk() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.atRisk && !l.lostLocked(nowMs())
}

// Remaining is what the client counts of the lease: its local deadline
// less now (0 once lost, or past the deadline less the guard). The
// server's is never shorter.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostLocked(nowMs()) {
		return 0
	}
	d := l.deadline - nowMs()
	if d < 0 {
		return 0
	}
	return time.Duration(d * float64(time.Millisecond))
}

// Waiters is how many requests wait for the lock, as the server last
// said for a lease taken with NotifyWaiters (* WAITING); 0 before it
// said anything. The server tells
// when the queue grows (see OnContended), never when it shrinks: it
// is the count last told, not the queue now (Status says that).
func (l *Lease) Waiters() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiters
}

// Check asks the server whether the lease's token still holds the lock:
// nil if it does, an error of kind ErrLost (Code "STALE") if it does not.
func (l *Lease) Check(ctx context.Context) error {
	_, _, err := l.call(ctx, ctx, false, func(x *Client, now float64) (*req, error) {
		return &req{op: "CHECK", name: l.name, token: l.token}, nil
	})
	return err
}

// Refresh extends the lease now to ttl (0: its TTL); a shorter TTL
// shortens it, from the moment the request is sent. Later renewals use
// that TTL. An error of kind ErrLost if the lease is gone.
func (l *Lease) Refresh(ctx context.Context, ttl time.Duration) error {
	_, _, err := l.call(ctx, ctx, false, func(x *Client, now float64) (*req, error) {
		if l.lostM != NotLost {
			return nil, l.Err()
		}
		if l.released || l.unlocking {
			return nil, newErr(ErrNotHolder, "the lease of "+l.name+" is released")
		}
		q := &req{op: "REFRESH", name: l.name, token: l.token, ttl: l.ttl, lease: l}
		if ttl > 0 {
			q.ttl = float64(durMs(ttl))
		}
		return q, nil
	})
	return err
}

// Proclaim gives the lease a new value (Value): an elected leader says
// another address, say, and the followers that Watch the lock are told
// (an Event of kind EventValue, with the lease's token). It is a Refresh
// too (REFRESH ... value=, with the lease's TTL): the lease is extended,
// and later renewals and a RECLAIM keep the new value. The value is sent
// as Value sends it. An error of kind ErrLost if the lease is gone (the
// leader lost its leadership), ErrNotHolder once unlocked, ErrInvalid
// for an empty value (nothing is sent).
func (l *Lease) Proclaim(ctx context.Context, value string) error {
	if value == "" {
		return newErr(ErrInvalid, "Proclaim: an empty value")
	}
	enc := descEncode(value, valueMax)
	_, _, err := l.call(ctx, ctx, false, func(x *Client, now float64) (*req, error) {
		if l.lostM != NotLost {
			return nil, l.Err()
		}
		if l.released || l.unlocking {
			return nil, newErr(ErrNotHolder, "the lease of "+l.name+" is released")
		}
		return &req{op: "REFRESH", name: l.name, token: l.token, ttl: l.ttl, lease: l, value: enc}, nil
	})
	return err
}

// Unlock gives the hold back. Once sent, the UNLOCK is sent again after a
// reconnect until the server answers it, even if ctx ends first. An error
// of kind ErrNotHolder if the server no longer had the lease (it expired
// or was broken; a lost lease is released too, in case the server still
// has it). When the server did not answer within ServerTimeout the error
// is ErrUnconfirmed: the release was sent (or will be once connected)
// and goes on being sent after reconnects, but nothing confirmed it, so
// the lock may still be held until its TTL runs out. (The Python client
// returns success there; this client says so.) The lease is not valid
// from the call on, whatever the outcome.
//
// Of a partitioned service, Refresh, Proclaim, Check and Unlock follow
// the lease when its slot moved to another partition (NO MOVED): the
// lease is re-homed there, same token, and the request sent again (see
// the package documentation). An Unlock whose lease could not follow is
// ErrUnconfirmed: no longer renewed, it ends by its TTL at the server.
func (l *Lease) Unlock(ctx context.Context) error {
	again := false // the UNLOCK is sent again: to the partition the lease moved to
	_, x, err := l.call(context.Background(), ctx, true, func(x *Client, now float64) (*req, error) {
		if l.released || (l.unlocking && !again) {
			return nil, newErr(ErrNotHolder, "the lease of "+l.name+" is released already")
		}
		again = true
		l.unlocking = true
		l.setEnded()
		q := &req{op: "UNLOCK", name: l.name, token: l.token, lease: l, lastHold: true}
		q.hook = func() { x.released(l) }
		return q, nil
	})
	if err != nil && again && l.giveUp() {
		// not released where the lease is now: its slot moved and it
		// could not follow (or the call ended while it did); given up
		// here, not renewed: the server ends it by its TTL
		return &Error{Kind: ErrUnconfirmed, Msg: l.name + ": the release could not follow the lease to its partition: " + err.Error()}
	}
	var e *Error
	if errors.As(err, &e) && e.Code == "NOT_HOLDER" && x != nil {
		// the server did not have it: it was lost before
		x.execAlways(func() {
			if l.homeIs(x) && l.lostM == NotLost {
				x.lose(l, LostRejected, "")
			}
		})
	}
	if errors.Is(err, ErrTimeout) {
		// not answered in time: it is sent again until it is
		msg := "no reply within ServerTimeout"
		var te *Error
		if errors.As(err, &te) && te.Msg != "" {
			msg = te.Msg
		}
		return &Error{Kind: ErrUnconfirmed, Msg: l.name + ": " + msg}
	}
	return err
}

// Lock acquires name, waiting in the server's queue until it is granted,
// the Wait option's time runs out (ErrTimeout) or ctx ends (the wait is
// cancelled at the server). Options: TTL, Wait, Shared, Limit,
// NotifyWaiters, Value, NoRenew.
//
// Every write of the acquire's LOCK -- the first and any sent again after
// a reconnect or a fail-over, when the reply was lost with the
// connection -- carries the same request id (req=, 64 random bits drawn
// when the call starts; only to a server of 0.4.0 or later, as its HELLO
// says), so that a server that granted the lock before the drop answers
// the LOCK sent again with that grant rather than with a second hold.
//
// Errors: ErrBusy (Wait(0)), ErrTimeout, ErrDeadlock, ErrHeldByOwner,
// ErrLimitMismatch, ErrUpgradeDeadlock, ErrDenied, ErrUnavailable, ErrLimit.
func (c *Client) Lock(ctx context.Context, name string, opts ...LockOption) (*Lease, error) {
	var l *Lease
	a := newAcquisition()
	err := c.routed(ctx, name, func(x *Client) (err error) {
		l, err = x.acquire(ctx, name, false, opts, a)
		return err
	})
	return l, err
}

// TryLock acquires name if it can be now; ErrBusy (an *Error whose Holder
// names who holds it, when the server says) if not.
func (c *Client) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lease, error) {
	var l *Lease
	a := newAcquisition()
	err := c.routed(ctx, name, func(x *Client) (err error) {
		l, err = x.acquire(ctx, name, true, opts, a)
		return err
	})
	return l, err
}

// acquisition is what the tries of one acquire share, when a MOVED sends
// it to another partition (a LOCK's first answer, or the end of its wait
// there: * MOVED): when it began -- its wait counts from then, what is
// left of it is sent -- and its request id (req=), the same everywhere.
type acquisition struct {
	start float64
	reqID uint64
}

func newAcquisition() *acquisition { return &acquisition{start: nowMs(), reqID: requestID()} }

// movedOn: try q (nil: none made) of the acquisition ended with err; a
// MOVED's next try keeps the request id q had last (a new one when a
// grant was given back meanwhile).
func (a *acquisition) movedOn(q *req, err error) {
	if q != nil && movedOf(err) != nil {
		a.reqID = q.reqID
	}
}

func (c *Client) acquire(ctx context.Context, name string, try bool, opts []LockOption, a *acquisition) (*Lease, error) {
	lc := lockConfig{renew: true}
	for _, o := range opts {
		o(&lc)
	}
	if lc.err != nil {
		return nil, lc.err
	}
	if err := checkName(name, "lock name"); err != nil {
		return nil, err
	}
	if lc.shared && lc.limit > 1 {
		return nil, newErr(ErrInvalid, "Shared and Limit do not mix: a semaphore's holders are all alike")
	}
	start, reqID := a.start, a.reqID
	waitMs := -1.0
	switch {
	case try:
		waitMs = 0
	case lc.waitOK:
		waitMs = float64(lc.wait) / float64(time.Millisecond)
	}
	var t *ticket
	if err := c.exec(ctx, func() { t = c.takeTurn(name) }); err != nil {
		return nil, err
	}
	giveBack := func() { c.execAlways(func() { c.giveTurn(t) }) }
	select {
	case <-t.ready:
	default:
		if waitMs == 0 {
			giveBack()
			return nil, newErr(ErrBusy, name+" is held by this client")
		}
		var timeout <-chan time.Time
		if waitMs > 0 {
			left := math.Max(start+waitMs-nowMs(), 1)
			tm := time.NewTimer(time.Duration(left * float64(time.Millisecond)))
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case <-t.ready:
		case <-timeout:
			giveBack()
			return nil, newErr(ErrTimeout, name+" is held by this client")
		case <-ctx.Done():
			giveBack()
			return nil, ctx.Err()
		case <-c.quit:
			return nil, newErr(ErrClosed, "")
		}
	}
	var sent *req
	res, err := c.call(ctx, func(now float64) (*req, error) {
		q := &req{op: "LOCK", name: name, wait: waitMs, waitEnd: never, shared: lc.shared, limit: lc.limit, renew: lc.renew, ticket: t,
			reqID: reqID, notify: lc.notify, value: lc.value}
		c.waitAndTTL(q, lc, start, now)
		sent = q
		return q, nil
	})
	if err != nil {
		a.movedOn(sent, err)
		giveBack()
		return nil, err
	}
	return res.(*Lease), nil
}

var reqSeq uint64

// requestID is an acquire's request id: 64 random bits, never 0.
func requestID() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// no randomness from the system: the clock and a count, mixed
		x := uint64(time.Now().UnixNano())*0x9e3779b97f4a7c15 ^ uint64(os.Getpid())<<32 ^ atomic.AddUint64(&reqSeq, 1)
		binary.LittleEndian.PutUint64(b[:], x)
	}
	if x := binary.LittleEndian.Uint64(b[:]); x != 0 {
		return x
	}
	return 1
}

// Status describes the lock as the server sees it (its first holder).
func (c *Client) Status(ctx context.Context, name string) (Status, error) {
	var st Status
	err := c.routed(ctx, name, func(x *Client) (err error) {
		st, err = x.status(ctx, name)
		return err
	})
	return st, err
}

func (c *Client) status(ctx context.Context, name string) (Status, error) {
	if err := checkName(name, "lock name"); err != nil {
		return Status{}, err
	}
	res, err := c.call(ctx, func(now float64) (*req, error) { return &req{op: "STATUS", name: name}, nil })
	if err != nil {
		return Status{}, err
	}
	return res.(Status), nil
}

// Holders lists every holder and waiter of the lock.
func (c *Client) Holders(ctx context.Context, name string) (Holders, error) {
	var h Holders
	err := c.routed(ctx, name, func(x *Client) (err error) {
		h, err = x.holders(ctx, name)
		return err
	})
	return h, err
}

func (c *Client) holders(ctx context.Context, name string) (Holders, error) {
	if err := checkName(name, "lock name"); err != nil {
		return Holders{}, err
	}
	res, err := c.call(ctx, func(now float64) (*req, error) { return &req{op: "HOLDERS", name: name}, nil })
	if err != nil {
		return Holders{}, err
	}
	return res.(Holders), nil
}

// Check asks the server whether token holds the lock name now: nil if
// it does, an error of kind ErrLost (Code "STALE") if it does not. It is
// the fence check of a resource that was handed a token by a holder (the
// holder itself may call Lease.Check).
func (c *Client) Check(ctx context.Context, name string, token uint64) error {
	return c.routed(ctx, name, func(x *Client) error { return x.check(ctx, name, token) })
}

func (c *Client) check(ctx context.Context, name string, token uint64) error {
	if err := checkName(name, "lock name"); err != nil {
		return err
	}
	_, err := c.call(ctx, func(now float64) (*req, error) {
		return &req{op: "CHECK", name: name, token: token}, nil
	})
	return err
}

// Break ends the lease of name whose token is token, whoever holds it:
// an operator's tool for a holder that is gone or stuck (it needs the
// break right on the name when the server has a users file). reason is
// one word (a ticket, or why), logged by the server and told to the
// holder's connections as broken_by. The next waiter is granted the
// lock with a larger token. An error of kind ErrLost (Code "STALE") when
// token holds nothing (the lock moved on, or is free); ErrDenied without
// the right. A connection lost after the BREAK was written fails with
// ErrConnectionLost: the lease may or may not have been broken (Status
// tells).
func (c *Client) Break(ctx context.Context, name string, token uint64, reason string) error {
	if len(reason) > reasonMax || !printableWord(reason) {
		return newErr(ErrInvalid, fmt.Sprintf("bad reason %q: 1-%d printable ASCII characters, no space", reason, reasonMax))
	}
	return c.routed(ctx, name, func(x *Client) error { return x.breakLease(ctx, name, token, reason) })
}

func (c *Client) breakLease(ctx context.Context, name string, token uint64, reason string) error {
	if err := checkName(name, "lock name"); err != nil {
		return err
	}
	if len(reason) > reasonMax || !printableWord(reason) {
		return newErr(ErrInvalid, fmt.Sprintf("bad reason %q: 1-%d printable ASCII characters, no space", reason, reasonMax))
	}
	_, err := c.call(ctx, func(now float64) (*req, error) {
		return &req{op: "BREAK", name: name, token: token, reason: reason}, nil
	})
	return err
}

// Ping asks the server for a PONG (of a partitioned service: the
// first connection's daemon, one partition's).
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.call(ctx, func(now float64) (*req, error) { return &req{op: "PING"}, nil })
	return err
}

// waitAndTTL sets q's wait, what is left of waitMs (>= 1 ms) counted
// from start, and its TTL, lc's or the client's default: a LOCK's and a
// multi-lock's, each time the request is (re)sent at now.
func (c *Client) waitAndTTL(q *req, lc lockConfig, start, now float64) {
	if q.wait > 0 {
		q.wait = start + q.wait - now
		if q.wait < 1 {
			q.wait = 1
		}
	}
	q.ttl = c.defaultTTL
	if lc.hasTTL {
		q.ttl = float64(durMs(lc.ttl))
	}
}
