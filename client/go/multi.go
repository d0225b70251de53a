// multi.go: several locks at once (LOCK a b c ..., dlockd 0.4.0): LockAll,
// TryLockAll and UnlockAll, and the replies and events of a multi-lock
// (OK LOCKED and * LOCKED with their granted lines, * FAILED).

package dlockd

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

const (
	multiMax       = 64   // names of one multi-lock (DL_MULTI_MAX)
	requestLineMax = 1024 // a request line, its end of line included
	// what a multi-lock's line says besides its names, at most: the
	// verb, ttl=, wait=, req=, id= and the end of line
	multiLineReserve = 96
)

// LockAll acquires every lock of names at once, all or none: one request
// (LOCK a b c ...) that the server grants when it holds them all. It
// takes them in byte order of the names, one after the other, each in
// its own FIFO queue, holding those it has while it waits for the next
// (so two multi-locks never wait for each other in a cycle); a failure,
// a timeout or a cancel gives back those it took. The leases are
// returned in the order of names (leases[i].Name() == names[i]); each is
// an ordinary exclusive Lease, renewed in the background and lost like
// one taken by Lock, and released one by one with Unlock or all together
// with UnlockAll.
//
// Options: TTL (each lease's), Wait (the whole wait), NoRenew. Shared,
// Limit, NotifyWaiters and Value fail with ErrInvalid: every lock is
// taken exclusive. names are 2 to 64 distinct lock names whose request
// fits in a line of 1024 bytes (ErrInvalid otherwise, nothing sent); one
// name is Lock.
//
// Every write of the request carries the same request id (req=, drawn
// when the call starts; only to a server of 0.4.0 or later), as Lock's:
// a request sent again after a drop or a fail-over gets back the leases
// it was granted. When ctx ends while it waits, the wait is cancelled at
// the server (CANCEL of its first name in byte order) and whatever
// crossed the cancel is given back.
//
// A multi-lock takes new leases only: when this client holds one of the
// names, or is acquiring it, LockAll fails at once with ErrHeldByOwner
// (nothing sent), and so it does when the server says that the owner
// holds one (NO ALREADY_HELD: another client of the same owner). One
// multi-lock waits at a time per connection: a LockAll waits for the
// end of another of the same Client (counted in its Wait).
//
// Errors: ErrBusy (Wait(0), TryLockAll), ErrTimeout, ErrDeadlock (a wait
// would close a cycle: Owners), ErrHeldByOwner, ErrLimit, ErrDenied,
// ErrUnavailable (also when persistence went down before the grant was
// recorded), ErrServer (Code says: EXPIRED when a lock it had taken was
// broken while it waited for the next).
func (c *Client) LockAll(ctx context.Context, names []string, opts ...LockOption) ([]*Lease, error) {
	return c.routedAll(ctx, names, false, opts)
}

// TryLockAll acquires every lock of names if all can be had now (TRYLOCK
// a b c ...), none otherwise: ErrBusy (an *Error whose Holder names who
// holds the lock in the way, when the server says). As LockAll otherwise;
// it fails with ErrLimit, at once, while a LockAll of the same Client
// waits.
func (c *Client) TryLockAll(ctx context.Context, names []string, opts ...LockOption) ([]*Lease, error) {
	return c.routedAll(ctx, names, true, opts)
}

// routedAll: a multi-lock goes to the partition of its first name (of a
// partitioned service: the names must share it, ErrServer with Code
// BAD_ARG otherwise: put them under one {tag}).
func (c *Client) routedAll(ctx context.Context, names []string, try bool, opts []LockOption) ([]*Lease, error) {
	a := newAcquisition()
	if len(names) == 0 {
		return c.acquireAll(ctx, names, try, opts, a) // refused
	}
	var ls []*Lease
	err := c.routed(ctx, names[0], func(x *Client) (err error) {
		ls, err = x.acquireAll(ctx, names, try, opts, a)
		return err
	})
	return ls, err
}

// UnlockAll releases every lease of leases (nil ones skipped), the
// UNLOCKs sent together, and returns once each was answered: nil, or the
// first error in the order of leases (as Unlock's: ErrNotHolder for a
// lease the server no longer had, ErrUnconfirmed). Every lease is given
// back whatever the others' outcome.
func UnlockAll(ctx context.Context, leases []*Lease) error {
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		if l == nil {
			continue
		}
		wg.Add(1)
		go func(i int, l *Lease) {
			defer wg.Done()
			errs[i] = l.Unlock(ctx)
		}(i, l)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// multiNames checks the names of a multi-lock and returns them in byte
// order (the server's order: Go compares strings bytewise).
func multiNames(names []string) ([]string, error) {
	if len(names) < 2 || len(names) > multiMax {
		return nil, newErr(ErrInvalid, fmt.Sprintf("a multi-lock names 2 to %d locks, not %d", multiMax, len(names)))
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	size := multiLineReserve
	for i, n := range sorted {
		if err := checkName(n, "lock name"); err != nil {
			return nil, err
		}
		if i > 0 && sorted[i-1] == n {
			return nil, newErr(ErrInvalid, fmt.Sprintf("lock name %q given twice", n))
		}
		size += 1 + len(n)
	}
	if size > requestLineMax {
		return nil, newErr(ErrInvalid, fmt.Sprintf("the names of a multi-lock are %d bytes: its request would be longer than %d", size-multiLineReserve, requestLineMax))
	}
	return sorted, nil
}

func (c *Client) acquireAll(ctx context.Context, names []string, try bool, opts []LockOption, a *acquisition) ([]*Lease, error) {
	if len(names) == 1 {
		l, err := c.acquire(ctx, names[0], try, opts, a)
		if err != nil {
			return nil, err
		}
		return []*Lease{l}, nil
	}
	lc := lockConfig{renew: true}
	for _, o := range opts {
		o(&lc)
	}
	if lc.err != nil {
		return nil, lc.err
	}
	sorted, err := multiNames(names)
	if err != nil {
		return nil, err
	}
	if lc.shared || lc.limit > 1 || lc.notify || lc.value != "" {
		return nil, newErr(ErrInvalid, "a multi-lock takes TTL, Wait and NoRenew only: every lock is taken exclusive")
	}
	start, reqID := a.start, a.reqID
	waitMs := -1.0
	switch {
	case try:
		waitMs = 0
	case lc.waitOK:
		waitMs = float64(lc.wait) / float64(time.Millisecond)
	}
	// one multi-lock at a time per connection (the server refuses a
	// second with ERR LIMIT): the client's own turn first
	select {
	case c.multiTurn <- struct{}{}:
	default:
		if waitMs == 0 {
			return nil, newErr(ErrLimit, "another multi-lock of this client waits: one at a time per connection")
		}
		var timeout <-chan time.Time
		if waitMs > 0 {
			left := math.Max(start+waitMs-nowMs(), 1)
			tm := time.NewTimer(time.Duration(left * float64(time.Millisecond)))
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case c.multiTurn <- struct{}{}:
		case <-timeout:
			return nil, newErr(ErrTimeout, "another multi-lock of this client waited all along")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.quit:
			return nil, newErr(ErrClosed, "")
		}
	}
	defer func() { <-c.multiTurn }()
	// new leases only: the holds of a name this client has (or is
	// taking) are its own, which the server would refuse (ALREADY_HELD)
	var ts []*ticket
	mine := ""
	if err := c.exec(ctx, func() {
		for _, n := range sorted {
			if len(c.turns[n]) > 0 {
				mine = n
				return
			}
		}
		for _, n := range sorted {
			ts = append(ts, c.takeTurn(n))
		}
	}); err != nil {
		return nil, err
	}
	if mine != "" {
		return nil, newErr(ErrHeldByOwner, mine+" is held (or being acquired) by this client: a multi-lock takes new leases only")
	}
	var sent *req
	res, err := c.call(ctx, func(now float64) (*req, error) {
		q := &req{op: "MLOCK", name: sorted[0], names: sorted, wait: waitMs, waitEnd: never, renew: lc.renew,
			tickets: ts, reqID: reqID}
		c.waitAndTTL(q, lc, start, now)
		sent = q
		return q, nil
	})
	if err != nil {
		a.movedOn(sent, err)
		c.execAlways(func() {
			for _, t := range ts {
				c.giveTurn(t)
			}
		})
		return nil, err
	}
	byName := map[string]*Lease{}
	for _, l := range res.([]*Lease) {
		byName[l.name] = l
	}
	out := make([]*Lease, len(names))
	for i, n := range names {
		out[i] = byName[n]
	}
	return out, nil
}

// ---- on the manager goroutine -------------------------------------------------

// formatMulti is a multi-lock's request line.
func (c *Client) formatMulti(q *req, now float64) string {
	verb := "LOCK"
	if q.wait == 0 {
		verb = "TRYLOCK"
	}
	l := newLine(verb, q.names...).kv("ttl", itoa(int64(q.ttl)))
	c.waitKV(l, q, now)
	if q.reqID != 0 && c.takesReq {
		l.kv("req", fmt.Sprint(q.reqID))
	}
	return l.String(q.tag)
}

// rLockAll handles the reply to a multi-lock.
func (c *Client) rLockAll(q *req, r *reply, now float64) bool {
	switch {
	case r.kind == "OK" && r.word == "LOCKED":
		n, ok := r.uarg(1)
		if !ok || len(r.args) < 2 || r.args[0] != q.name || n != uint64(len(q.names)) {
			c.insane = true
			c.finish(q, newErr(ErrProtocol, "no server may grant this: "+r.text()), nil)
			return true
		}
		c.readMulti(q, r, int(n))
	case r.kind == "OK" && r.word == "QUEUED", r.kind == "NO" && r.word == "ALREADY_WAITING":
		return c.rLock(q, r, now)
	case r.kind == "ERR" && r.word == "LIMIT" && !q.abandoned && q.retries < alreadyWaitingRetries && c.crossing > 0:
		// a multi-lock of ours that was given up still waits: the
		// CANCEL of its clean-up went out after this request
		q.retries++
		c.write(q, now)
	default:
		return false
	}
	return true
}

// readMulti: the n granted lines of an OK LOCKED or * LOCKED follow.
func (c *Client) readMulti(q *req, r *reply, n int) {
	q.header = r
	q.body = nil
	q.bodyBytes = 0
	c.bodyReq = q
	c.bodyLeft = n
	q.where = sent
}

// multiGrant is one granted line of a multi-lock's grant.
type multiGrant struct {
	name  string
	token uint64
	ms    float64
	r     *reply
}

func parseGranted(s string) (multiGrant, bool) {
	words := strings.Fields(s)
	if len(words) < 4 || words[0] != "granted" {
		return multiGrant{}, false
	}
	r := &reply{kind: "OK", word: "GRANTED", args: words[1:]}
	token, ok1 := r.uarg(1)
	ms, ok2 := r.uarg(2)
	if !ok1 || !ok2 || token == 0 || holdsOf(r) != 1 {
		return multiGrant{}, false
	}
	return multiGrant{name: words[1], token: token, ms: float64(ms), r: r}, true
}

// multiBodyDone: the granted lines of a multi-lock are read. A grant
// told by an event is confirmed by sending the request again (the same
// req= id): the server answers with the same leases, each lasting its
// TTL from then, which the client counts from that write.
func (c *Client) multiBodyDone(q *req) {
	now := nowMs()
	var gs []multiGrant
	bad := ""
	for i, s := range q.body {
		g, ok := parseGranted(s)
		switch {
		case !ok:
			bad = s
		case q.names != nil && g.name != q.names[i]:
			bad = s
		case q.names == nil && i > 0 && g.name <= gs[i-1].name:
			bad = s
		}
		if bad != "" {
			break
		}
		gs = append(gs, g)
	}
	giveBack := func() {
		for _, g := range gs {
			c.cleanupGrant(g.name, g.token)
		}
	}
	if bad != "" {
		c.insane = true
		giveBack()
		c.finish(q, newErr(ErrProtocol, "no server may grant this: "+trunc(bad)), nil)
		return
	}
	if q.abandoned || q.finished {
		giveBack()
		c.finish(q, newErr(ErrTimeout, "given up"), nil)
		return
	}
	if q.header.kind == "*" {
		q.grants = gs
		c.setReqDeadline(q, now+c.serverTimeoutMs())
		c.write(q, now)
		return
	}
	for _, g := range gs {
		if g.ms > q.ttl {
			c.insane = true
			giveBack()
			c.finish(q, newErr(ErrProtocol, "no server may grant this: granted "+g.name+" for "+itoa(int64(g.ms))+" ms"), nil)
			return
		}
	}
	leases := make([]*Lease, len(gs))
	late := false
	for i, g := range gs {
		l := &Lease{c: c, name: g.name, token: g.token, limit: 1, mode: "exclusive", done: make(chan struct{})}
		l.noteProof(g.r)
		l.ttl = q.ttl
		l.renew = q.renew
		l.acquiredAt = q.sentAt
		c.confirmLease(l, q, q.sentAt, g.ms)
		if now >= l.deadlineM-c.guardMs(l.ttl) {
			late = true
		}
		leases[i] = l
	}
	if late {
		// the reply came so late that a lease is inside its lost guard:
		// give them all back; ask again (a new request) while the wait lasts
		giveBack()
		if q.wait < 0 || (q.wait > 0 && q.waitEnd > now) {
			q.reqID = requestID()
			c.setReqDeadline(q, now+c.serverTimeoutMs())
			c.write(q, now)
		} else {
			c.finish(q, newErr(ErrTimeout, "granted too late to be used"), nil)
		}
		return
	}
	for i, l := range leases {
		l.ticket = q.tickets[i]
		c.leases = append(c.leases, l)
	}
	c.finish(q, nil, leases)
}

// eventLocked: * LOCKED <first> <n>: the multi-lock that waited has every
// lock; its n granted lines follow. One nobody waits for crossed the
// CANCEL of a wait given up: its leases are given back.
func (c *Client) eventLocked(r *reply) {
	n, ok := r.uarg(1)
	if !ok || n < 2 || n > multiMax {
		c.insane = true
		return
	}
	q := c.waiting[r.tag]
	if r.tag == "" || q == nil || q.op != "MLOCK" {
		if c.crossing == 0 {
			c.insane = true
			return
		}
		c.crossing--
		q = &req{op: "MLOCK", name: r.args[0], internal: true, abandoned: true, deadline: never}
	} else {
		delete(c.waiting, r.tag)
		if r.args[0] != q.name || int(n) != len(q.names) {
			c.insane = true
			c.finish(q, newErr(ErrProtocol, "no server may grant this: "+r.text()), nil)
			return
		}
	}
	c.readMulti(q, r, int(n))
}

// eventFailed: * FAILED <first> <WORD> <rest>: the multi-lock ended
// without its locks, for what a LOCK of the failing name would have been
// answered (<WORD> <rest>, the NO or ERR taken off).
func (c *Client) eventFailed(r *reply) {
	q := c.waiting[r.tag]
	if r.tag == "" || q == nil || q.op != "MLOCK" {
		return
	}
	delete(c.waiting, r.tag)
	if len(r.args) < 2 || r.args[0] != q.name {
		c.insane = true
		c.finish(q, newErr(ErrProtocol, "no server may end this wait so: "+r.text()), nil)
		return
	}
	kind := "NO"
	switch r.args[1] {
	case "UNAVAILABLE", "NOT_ACTIVE", "LIMIT", "NOAUTH":
		kind = "ERR"
	}
	e := errorOf(&reply{kind: kind, word: r.args[1], args: r.args[2:]})
	e.Text = r.text()
	if e.Code == "EXPIRED" {
		e.Msg = "a lock it had taken ended while it waited for the next"
	}
	c.finish(q, e, nil)
}
