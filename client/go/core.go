// core.go: the protocol state machine run by the manager goroutine, after
// the Python client's _core.py: connections and fail-over, requests and
// their replies, events, lease renewal and loss, turns.

package dlockd

import (
	"container/heap"
	"fmt"
	"math"
	"strconv"
	"strings"
)

func slackMs(ttl float64) float64 { return 2 + ttl/1000 }

func (c *Client) guardMs(ttl float64) float64 {
	if c.cfg.lostGuard > 0 {
		return float64(c.cfg.lostGuard) / 1e6
	}
	return math.Max(ttl/10, guardMinMs)
}

// ---- connections ---------------------------------------------------------

func (c *Client) connectFailed(now float64, why string, fatal bool) {
	c.state = stDown
	if why != "" {
		c.lastError = c.here() + ": " + why
	}
	if fatal && !c.ready && c.naddrs == 1 {
		c.fatal = newErr(ErrUnavailable, c.lastError)
		c.signalReady()
	}
	c.failedI = c.addrI
	c.addrI = (c.addrI + 1) % c.naddrs
	c.reconnectAt = now + c.backoff
	c.backoff = math.Min(c.backoff*2, backoffMaxMs)
}

// connected: the transport is up. Say who we are, and nothing else until
// HELLO is answered OK by a server of the client's cluster.
func (c *Client) connected(now float64) {
	c.state = stUp
	c.sessionOK = false
	c.takesReq = false
	c.dropWanted = false
	c.stalled = false
	t := c.connectTimeoutMs()
	if !c.ready && c.naddrs > 1 {
		t /= float64(c.naddrs)
	}
	c.helloBy = now + t
	c.out = c.out[:0]
	c.crossing = 0
	if c.cfg.password != "" {
		c.internal("AUTH", "", 0, false)
	}
	c.internal("HELLO", "", 0, false)
}

// session: HELLO was answered OK by a server of the client's cluster:
// describe the client, confirm the leases still within their deadline,
// send what was kept and asked meanwhile, watch again.
func (c *Client) session(now float64) {
	if c.cfg.describe && !c.descRefused {
		c.internal("DESCRIBE", "", 0, false)
	}
	for _, l := range c.leases {
		if l.live() && l.deadlineM > now && !l.rehoming {
			c.renewLease(l, now)
		}
	}
	kept := c.unsent
	c.unsent = nil
	for _, q := range kept {
		q.where = nowhere
		if (q.op == "LOCK" || q.op == "MLOCK") && q.wait > 0 && q.waitEnd <= now {
			c.finish(q, newErr(ErrTimeout, "the wait ran out while reconnecting"), nil)
		} else {
			c.write(q, now)
		}
	}
	c.rewatch()
}

func (c *Client) connectionLost(now float64) {
	if c.state == stDead {
		return
	}
	c.out = c.out[:0]
	var pending []*req
	if c.bodyReq != nil {
		pending = append(pending, c.bodyReq)
		c.bodyReq = nil
	}
	pending = append(pending, c.fifo...)
	var ws []*req
	for _, q := range c.waiting {
		ws = append(ws, q)
	}
	sortBySeq(ws)
	pending = append(pending, ws...)
	c.fifo = nil
	c.waiting = map[string]*req{}
	var kept []*req
	for _, q := range pending {
		if c.keepOverDrop(q) {
			q.where = unsent
			kept = append(kept, q)
		}
	}
	c.unsent = append(kept, c.unsent...)
	if c.clusterRefused >= c.naddrs {
		for _, q := range c.unsent {
			c.finish(q, newErr(ErrClusterMismatch, c.clusterWhy), nil)
		}
		c.unsent = nil
	}
	if c.closing || (!c.ready && c.fatal != nil) {
		c.die(newErr(ErrConnectionLost, "the connection closed"))
		return
	}
	c.state = stDown
	c.reconnectAt = now
	if c.sessionOK {
		if now-c.sessionAt >= sessionSteadyMs {
			c.backoff = backoffMinMs
		} else {
			// a session that ended at once (a server that closes or
			// says nonsense right after HELLO): a pause, as after a
			// failed connect (found from outside: 26,500 connections
			// in 10 s)
			c.reconnectAt = now + c.backoff
			c.backoff = math.Min(c.backoff*2, backoffMaxMs)
		}
	}
	switch {
	case !c.standby && !c.sessionOK:
		// closed before it said who we are: as a failed connect
		c.connectFailed(now, "", false)
	case c.standby:
		if c.hint >= 0 && c.hint != c.addrI && c.hint != c.failedI {
			c.addrI = c.hint
		} else if c.hint >= 0 && c.hint == c.failedI {
			// the active it names did not answer: it is down, and this
			// standby may take over soon; ask again
			c.failedI = -1
			c.reconnectAt = now + redirectMs
		} else {
			c.addrI = (c.addrI + 1) % c.naddrs
			c.reconnectAt = now + redirectMs
		}
	case c.hint >= 0:
		c.addrI = c.hint // * BYE not-active said where
	case c.stalled:
		// it stopped answering: the next server first (a standby that
		// took over, or one that names the active: not this one again
		// at once)
		c.failedI = c.addrI
		c.addrI = (c.addrI + 1) % c.naddrs
	}
	c.stalled = false
	c.sessionOK = false
	c.standby = false
	c.hint = -1
}

// keepOverDrop: true to write q again on the next connection.
func (c *Client) keepOverDrop(q *req) bool {
	if q.internal {
		if (q.op == "RENEW" || q.op == "RECLAIM") && q.lease != nil {
			q.lease.refreshing = false
		}
		return q.op == "UNLOCK" && q.lastHold
	}
	if q.abandoned || q.finished {
		if q.op == "UNLOCK" && q.lastHold {
			q.internal = true // still release it
			return true
		}
		if q.op == "CONFIRM" && q.token != 0 {
			// a grant that crossed the give-up, its confirmation lost
			// with the connection: the hold is this client's at the
			// server; give it back once connected (found from outside:
			// it stayed held for its TTL)
			c.finish(q, newErr(ErrTimeout, "given up"), nil)
			keep := false
			for _, l := range c.leases {
				if l.name == q.name && l.token == q.token && l.live() {
					keep = true
				}
			}
			c.unsent = append(c.unsent, &req{op: "UNLOCK", name: q.name, token: q.token,
				internal: true, lastHold: !keep, deadline: never, where: unsent})
			return false
		}
		c.finish(q, newErr(ErrConnectionLost, "the connection closed"), nil)
		return false
	}
	if q.op == "BREAK" && !c.standby {
		// written, not answered: it may have broken the lease, and a
		// BREAK written again would say STALE of its own work
		c.finish(q, newErr(ErrConnectionLost, "the connection closed; the outcome is unknown"), nil)
		return false
	}
	if q.op == "UNLOCK" && !q.lastHold && !c.standby {
		c.finish(q, newErr(ErrConnectionLost, "the connection closed; the outcome is unknown"), nil)
		return false
	}
	q.body = nil
	q.resent = true
	return true
}

func (c *Client) die(err error) {
	c.state = stDead
	for _, q := range c.unsent {
		c.finish(q, err, nil)
	}
	c.unsent = nil
}

// ---- input ---------------------------------------------------------------

// lineIn handles one line; false when the connection must be dropped.
func (c *Client) lineIn(s string, now float64) bool {
	if q := c.bodyReq; q != nil {
		// a body's lines are bounded in number (bodyLinesMax) and in
		// bytes: a HOLDERS of thousands of 64 KB lines is no server's
		q.bodyBytes += len(s)
		if q.bodyBytes > bodyBytesMax {
			c.lastError = c.here() + ": a reply body over " + strconv.Itoa(bodyBytesMax) + " bytes"
			return false
		}
		q.body = append(q.body, s)
		c.bodyLeft--
		if c.bodyLeft == 0 {
			c.bodyReq = nil
			c.bodyDone(q)
		}
		return true
	}
	r := parseReply(s)
	if r == nil {
		c.lastError = c.here() + ": not the dlockd protocol: " + trunc(s)
		return false
	}
	if r.kind == "*" {
		c.event(r, now)
		if c.insane {
			c.insane = false
			return false
		}
		return true
	}
	if r.kind == "NO" && r.word == "MOVED" && r.tag != "" && c.waiting[r.tag] != nil {
		// a LOCK that waited, answered where its name went (the
		// event's form, * MOVED, is the server's; this one is taken too)
		c.waitMoved(c.waiting[r.tag], r)
		return !c.insane
	}
	if len(c.fifo) == 0 {
		return false // a reply to nothing
	}
	q := c.fifo[0]
	if r.tag != "" && r.tag != q.tag {
		return false
	}
	if c.standbyReply(q, r) || c.clusterReply(q, r) {
		return false // drop, reconnect to the active or the next server
	}
	c.fifo = c.fifo[1:]
	q.where = nowhere
	c.reply(q, r, now)
	if c.insane {
		c.insane = false
		return false
	}
	return true
}

func trunc(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

func (c *Client) standbyReply(q *req, r *reply) bool {
	var active string
	switch {
	case r.kind == "ERR" && r.word == "NOT_ACTIVE":
		if len(r.args) > 0 && len(r.args[0]) > 7 && r.args[0][:7] == "active=" {
			active = r.args[0][7:]
		}
	case q.op == "HELLO" && r.kind == "OK" && r.kvs("role") == "standby":
		active = r.kvs("active")
	default:
		return false
	}
	c.standby = true
	c.lastError = fmt.Sprintf("%s: a standby (the active: %s)", c.here(), active)
	c.setHint(active)
	return true
}

func (c *Client) setHint(active string) {
	c.hint = -1
	for i, a := range c.addrs {
		if a.name != "" && a.name == active {
			c.hint = i
			return
		}
	}
}

// clusterReply: HELLO names the server's cluster; the first id met is the
// client's, and a server that names another is refused like a standby,
// before anything else is sent to it.
func (c *Client) clusterReply(q *req, r *reply) bool {
	if q.op != "HELLO" || r.kind != "OK" {
		return false
	}
	cid := r.kvs("cluster")
	if cid == "" || cid == "-" {
		return false
	}
	here := c.here()
	if c.cluster == "" && len(cid) == 32 {
		c.setCluster(cid, here)
	} else if c.cfg.cluster == "" && len(cid) == 32 && here == c.clusterFrom {
		// the server the id came from restarted as another lock table:
		// nothing to fail over to; leases it does not know are refused
		c.setCluster(cid, here)
	}
	if cid == c.cluster {
		c.clusterRefused = 0
		return false
	}
	c.clusterRefused++
	c.standby = true
	c.hint = -1
	if c.clusterFrom != "" {
		c.clusterWhy = fmt.Sprintf("servers %s and %s are two clusters (ids %s, %s): check their redis URL, db and prefix", c.clusterFrom, here, c.cluster, cid)
	} else {
		c.clusterWhy = fmt.Sprintf("server %s is of cluster %s, not %s (the cluster asked for): check its redis URL, db and prefix", here, cid, c.cluster)
	}
	c.lastError = c.clusterWhy
	if c.clusterRefused >= c.naddrs && !c.ready {
		c.fatal = newErr(ErrClusterMismatch, c.clusterWhy)
		c.signalReady()
	}
	return true
}

func holdsOf(r *reply) int { return atoi(r.kvs("holds")) }

// notOf: a grant, confirmation or wait's end for q's lock must name it,
// and a holds= it gives must count at least this hold; else the server
// is dropped.
func (c *Client) notOf(q *req, r *reply) bool {
	if len(r.args) > 0 && r.args[0] == q.name {
		if _, ok := r.kv("holds"); !ok || holdsOf(r) > 0 {
			return false
		}
	}
	c.insane = true
	return true
}

func (c *Client) event(r *reply, now float64) {
	if r.word == "BYE" {
		if a := r.kvs("active"); a != "" {
			c.setHint(a)
		}
		c.lastError = c.here() + ": " + r.text()
		return
	}
	if r.word == "WATCH-OVERFLOW" {
		n := 0
		if len(r.args) > 0 {
			n = atoi(r.args[0])
		}
		for _, w := range c.watches {
			w.deliver(Event{Kind: EventOverflow, Missed: n})
		}
		return
	}
	if len(r.args) == 0 {
		return // something newer than us
	}
	name := r.args[0]
	switch r.word {
	case "GRANTED":
		token, ok := r.uarg(1)
		if !ok || token == 0 {
			c.insane = true
			return
		}
		holds := holdsOf(r)
		q := c.waiting[r.tag]
		if r.tag == "" || q == nil {
			// nobody waits: a grant that crossed the CANCEL of a wait given up
			if c.crossing == 0 {
				c.insane = true
				return
			}
			c.crossing--
			if holds > c.ownHolds(name, token)+1 {
				c.internal("UNLOCK", name, token, false)
			} else {
				c.cleanupGrant(name, token)
			}
			return
		}
		delete(c.waiting, r.tag)
		if c.notOf(q, r) {
			c.finish(q, newErr(ErrProtocol, "no server may grant this: "+r.text()), nil)
			return
		}
		if c.heldElsewhere(q, token, holds) {
			return
		}
		// The TTL began when the server granted it, before this line
		// reached us: confirm it, and count from the confirmation.
		q.token = token
		q.op = "CONFIRM"
		c.setReqDeadline(q, now+c.serverTimeoutMs())
		c.write(q, now)
	case "LOCKED":
		c.eventLocked(r) // a multi-lock's grant
	case "FAILED":
		c.eventFailed(r) // a multi-lock's end without its locks
	case "MOVED":
		// * MOVED <name> <partition> <addrs>|- <epoch>: the LOCK that
		// waited here for name ends: the name's slot went to another
		// partition, where its place in the queue waits for it
		q := c.waiting[r.tag]
		if r.tag == "" || q == nil {
			return
		}
		c.waitMoved(q, r)
	case "TIMEOUT":
		q := c.waiting[r.tag]
		if r.tag == "" || q == nil {
			return
		}
		delete(c.waiting, r.tag)
		if c.notOf(q, r) {
			c.finish(q, newErr(ErrProtocol, "no server may end this wait so: "+r.text()), nil)
			return
		}
		c.finish(q, newErr(ErrTimeout, "waited in vain for "+name), nil)
	case "EXPIRED":
		token, _ := r.uarg(1)
		for _, l := range c.leases {
			if l.name == name && l.token == token && l.live() {
				c.lose(l, LostExpired, r.kvs("broken_by"))
			}
		}
	case "EXPIRING":
		token, _ := r.uarg(1)
		for _, l := range c.leases {
			if l.name == name && l.token == token {
				c.risk(l)
			}
		}
	case "WAITING":
		// others wait (LOCK notify=waiters): * WAITING <name> <n>
		// token=<t>; one for a lease we do not hold (given back
		// meanwhile) is nothing
		n, ok := r.uarg(1)
		token := atou(r.kvs("token"))
		if !ok || n == 0 || token == 0 {
			return
		}
		if n > math.MaxInt32 {
			n = math.MaxInt32
		}
		found := false
		for _, l := range c.leases {
			if l.name == name && l.token == token && l.live() {
				c.contended(l, int(n))
				found = true
			}
		}
		if found {
			return
		}
		// a waiter's grant, told right after its * GRANTED: the lease
		// is made when its CONFIRM is answered
		for _, q := range c.fifo {
			if q.op == "CONFIRM" && q.name == name && q.token == token {
				q.waiters = int(n)
			}
		}
	case "WATCH":
		if len(r.args) < 4 {
			return
		}
		kind := EventKind(r.args[1])
		if !serverKinds[kind] {
			return // a <what> of a later version: ignored
		}
		ev := Event{
			Kind:     kind,
			Name:     name,
			Owner:    r.args[2],
			Token:    atou(r.args[3]),
			Holders:  atoi(r.kvs("holders")),
			User:     r.kvs("user"),
			BrokenBy: r.kvs("broken_by"),
			Value:    descDecode(r.kvs("value")),
		}
		for _, w := range c.watches {
			if w.matches(name) {
				w.deliver(ev)
			}
		}
	}
}

// waitMoved: the request q that waited (a LOCK's, or a multi-lock's)
// was told that its name went to another partition (* MOVED <name>
// <partition> <addrs> <epoch>, or NO MOVED <partition> <addrs> <epoch>):
// it ends with that MOVED, which the router follows (the wait left, the
// same request id).
func (c *Client) waitMoved(q *req, r *reply) {
	delete(c.waiting, q.tag)
	args := r.args
	if r.kind == "*" {
		if len(args) == 0 || args[0] != q.name {
			c.insane = true
			c.finish(q, newErr(ErrProtocol, "no server may end this wait so: "+r.text()), nil)
			return
		}
		args = args[1:]
	}
	e := errorOf(&reply{kind: "NO", word: "MOVED", args: args})
	e.Text = r.text()
	c.finish(q, e, nil)
}

// ---- replies ---------------------------------------------------------------

func (c *Client) reply(q *req, r *reply, now float64) {
	handled := false
	switch q.op {
	case "LOCK":
		handled = c.rLock(q, r, now)
	case "MLOCK":
		handled = c.rLockAll(q, r, now)
	case "CONFIRM":
		handled = c.rConfirm(q, r, now)
	case "UNLOCK":
		handled = c.rUnlock(q, r, now)
	case "REFRESH", "RENEW", "RECLAIM":
		handled = c.rRefresh(q, r, now)
	case "BREAK":
		if r.kind == "OK" && r.word == "BROKEN" {
			c.finish(q, nil, nil)
			handled = true
		} else if r.kind == "NO" && r.word == "STALE" {
			c.finish(q, &Error{Kind: ErrLost, Code: r.word, Text: r.text(), Msg: "the token holds nothing of " + q.name}, nil)
			handled = true
		}
	case "CHECK":
		if r.kind == "OK" && r.word == "VALID" {
			n, _ := r.uarg(2)
			c.finish(q, nil, n)
			handled = true
		} else if r.kind == "NO" && r.word == "STALE" {
			c.finish(q, &Error{Kind: ErrLost, Code: r.word, Text: r.text(), Msg: "the token does not hold " + q.name}, nil)
			handled = true
		}
	case "HELLO":
		handled = c.rHello(q, r, now)
	case "DESCRIBE":
		if r.kind != "OK" {
			c.descRefused = true // a server of 0.3: nothing more is said
		}
		c.finish(q, nil, nil)
		handled = true
	case "AUTH":
		if r.kind != "OK" {
			err := errorOf(r)
			if !c.ready {
				c.fatal = err
				c.signalReady()
			}
			c.lastError = c.here() + ": " + r.text()
			c.dropWanted = true
			c.finish(q, err, nil)
		} else {
			c.finish(q, nil, nil)
		}
		handled = true
	case "STATUS":
		if r.kind == "OK" && r.word == "STATUS" {
			c.finish(q, nil, statusOf(q.name, r))
			handled = true
		}
	case "HOLDERS":
		handled = c.rBody(q, r)
	case "MAP":
		handled = c.rMap(q, r)
	case "WATCH", "REWATCH":
		handled = c.rWatch(q, r)
	case "PING", "CANCEL", "UNWATCH":
		if r.kind == "OK" {
			c.finish(q, nil, nil)
			handled = true
		}
	}
	if handled {
		return
	}
	if r.kind == "OK" {
		c.finish(q, newErr(ErrProtocol, "unexpected reply: "+r.text()), nil)
	} else {
		c.finish(q, errorOf(r), nil)
	}
}

// ownHolds: the holds of lease (name, token) this client had at the
// server when it executed the request whose reply is being read.
func (c *Client) ownHolds(name string, token uint64) int {
	n := 0
	for _, l := range c.leases {
		if l.name == name && l.token == token && !l.released && !l.unlocking {
			n++
		}
	}
	for _, q := range c.fifo {
		if (q.op == "UNLOCK" || q.op == "CONFIRM") && q.name == name && q.token == token {
			n++
		}
	}
	return n
}

// heldElsewhere: a grant of a lease with more holds than this client's
// and this one is another client's of the owner too (a process sharing
// the id and key): give back exactly this hold and fail the acquire.
func (c *Client) heldElsewhere(q *req, token uint64, holds int) bool {
	mine := c.ownHolds(q.name, token)
	if holds <= mine+1 {
		return false
	}
	c.internal("UNLOCK", q.name, token, false)
	if q.abandoned {
		c.finish(q, newErr(ErrTimeout, "given up"), nil)
		return true
	}
	c.finish(q, &Error{Kind: ErrHeldByOwner, Code: "HELD_BY_OWNER", Msg: fmt.Sprintf(
		"%s is held by owner %s in another process: its lease %d has %d holds, %d of them this client's; the new one was given back",
		q.name, c.owner, token, holds, mine+1)}, nil)
	return true
}

// mostTTL: the longest a grant of q may say: q's TTL, or the TTL of a
// lease of this client it re-enters (a reentry keeps the longer).
func (c *Client) mostTTL(q *req, token uint64) float64 {
	most := q.ttl
	for _, l := range c.leases {
		if l.name == q.name && l.token == token && l.lostM == NotLost && l.ttl > most {
			most = l.ttl
		}
	}
	return most
}

func (c *Client) rLock(q *req, r *reply, now float64) bool {
	switch {
	case r.kind == "OK" && r.word == "GRANTED":
		token, ok1 := r.uarg(1)
		ms, ok2 := r.uarg(2)
		if c.notOf(q, r) || !ok1 || token == 0 {
			c.insane = true
			c.finish(q, newErr(ErrProtocol, "no server may grant this: "+r.text()), nil)
			return true
		}
		// Another client of the owner holds the lease (a reentry of it,
		// whose TTL may well be longer than asked): give this hold back,
		// keep the connection.
		if c.heldElsewhere(q, token, holdsOf(r)) {
			return true
		}
		// Any reentry (holds 2 or more) keeps the longer deadline: its
		// other hold may be one this client gave up and is giving back
		// (found from outside: a wait cancelled, then a LOCK with a
		// shorter TTL, was taken for a broken server). Counted with the
		// TTL asked, the lease never counts on more than that.
		if most := c.mostTTL(q, token); ok2 && holdsOf(r) >= 2 && float64(ms) > most {
			ms = uint64(most)
		}
		if !ok2 || float64(ms) > c.mostTTL(q, token) {
			c.insane = true
			c.cleanupGrant(q.name, token)
			c.finish(q, newErr(ErrProtocol, "no server may grant this: "+r.text()), nil)
			return true
		}
		c.granted(q, token, float64(ms), q.sentAt, r)
	case r.kind == "OK" && r.word == "QUEUED" && q.wait == 0:
		// a TRYLOCK is never queued (found from outside: a server that
		// queued it left TryLock waiting until Close)
		c.insane = true
		c.finish(q, newErr(ErrProtocol, "a try queued: "+r.text()), nil)
	case r.kind == "OK" && r.word == "QUEUED":
		if q.abandoned || q.finished {
			c.crossing++ // its grant may cross the CANCEL
			c.internal("CANCEL", q.name, 0, false)
			return true
		}
		q.where = waiting
		c.waiting[q.tag] = q
		if q.wait >= 0 {
			c.setReqDeadline(q, q.waitEnd+c.serverTimeoutMs())
		} else {
			c.setReqDeadline(q, never)
		}
	case r.kind == "NO" && r.word == "ALREADY_WAITING" && !q.abandoned && q.retries < alreadyWaitingRetries:
		// a LOCK of ours that was given up still waits: the CANCEL of
		// its clean-up went out before this reply came in
		q.retries++
		c.write(q, now)
	default:
		return false
	}
	return true
}

func (c *Client) rConfirm(q *req, r *reply, now float64) bool {
	switch {
	case r.kind == "OK" && r.word == "REFRESHED":
		ms, ok := r.uarg(1)
		if c.notOf(q, r) || !ok || float64(ms) > q.ttl {
			c.insane = true
			c.cleanupGrant(q.name, q.token)
			c.finish(q, newErr(ErrProtocol, "no server may confirm this: "+r.text()), nil)
			return true
		}
		c.granted(q, q.token, float64(ms), q.sentAt, r)
	case r.kind == "NO" && r.word == "NOT_HOLDER":
		if !q.abandoned && !q.finished && (q.wait < 0 || q.waitEnd > now) {
			q.op = "LOCK" // expired before we could confirm it: again
			q.waiters = 0
			q.reqID = requestID() // a new request (see below)
			c.write(q, now)
		} else {
			c.finish(q, newErr(ErrTimeout, "the grant expired before it was confirmed"), nil)
		}
	case r.kind == "NO" && r.word == "MOVED":
		// the grant went with its slot to another partition: the
		// router sends the LOCK there again, with the same request id,
		// which the lease it carried answers
		c.finish(q, errorOf(r), nil)
	default:
		c.cleanupGrant(q.name, q.token)
		c.finish(q, errorOf(r), nil)
	}
	return true
}

func (c *Client) granted(q *req, token uint64, ms, sentAt float64, r *reply) {
	if q.abandoned || q.finished {
		c.cleanupGrant(q.name, token)
		c.finish(q, newErr(ErrTimeout, "given up"), nil)
		return
	}
	l := &Lease{c: c, name: q.name, token: token, limit: q.limit, done: make(chan struct{})}
	switch {
	case q.shared:
		l.mode = "shared"
	case q.limit > 1:
		l.mode = "semaphore"
	default:
		l.mode = "exclusive"
	}
	if l.limit < 1 {
		l.limit = 1
	}
	l.noteProof(r)
	l.ttl = q.ttl
	l.value = q.value
	l.renew = q.renew
	l.acquiredAt = sentAt
	c.confirmLease(l, q, sentAt, ms)
	now := nowMs()
	if now >= l.deadlineM-c.guardMs(l.ttl) {
		// The reply came so late (the server held it through a take-over
		// or a stall of Redis) that the lease is already inside its lost
		// guard: give it back; ask again while the wait lasts.
		c.cleanupGrant(q.name, token)
		if q.wait < 0 || (q.wait > 0 && q.waitEnd > now) {
			q.op = "LOCK"
			q.waiters = 0
			// a new request, with an id of its own: the grant given
			// back must not be found as its own
			q.reqID = requestID()
			c.setReqDeadline(q, now+c.serverTimeoutMs())
			c.write(q, now)
		} else {
			c.finish(q, newErr(ErrTimeout, "granted too late to be used"), nil)
		}
		return
	}
	l.ticket = q.ticket
	c.leases = append(c.leases, l)
	if q.waiters > 0 {
		c.contended(l, q.waiters) // told while its grant was confirmed
	}
	c.finish(q, nil, l)
}

func (c *Client) rUnlock(q *req, r *reply, now float64) bool {
	l := q.lease
	quiet := true
	if dq := c.turns[q.name]; len(dq) > 0 && (l == nil || l.ticket != dq[0]) {
		quiet = false
	}
	switch {
	case r.kind == "OK" && r.word == "HELD" && q.lastHold && quiet && q.retries < reentryMax:
		// holds we lost track of (a LOCK sent again after a reconnect was
		// granted twice): give them back, each UNLOCK one fewer; a
		// server whose count does not go down is no server (found from
		// outside: 220k UNLOCKs in 8 s)
		n, ok := r.uarg(1)
		if !ok || (q.retries > 0 && int(n) >= q.heldLeft) {
			c.insane = true
			c.finish(q, newErr(ErrProtocol, "unexpected reply: "+r.text()), nil)
			return true
		}
		q.heldLeft = int(n)
		q.retries++
		c.write(q, now)
	case r.kind == "OK" && (r.word == "RELEASED" || r.word == "HELD"):
		c.finish(q, nil, nil)
	case l != nil && !q.finished && (r.kind == "NO" && r.word == "MOVED" || moveUnderWay(errorOf(r))):
		// the lease's slot moved, or is moving: not released, and the
		// lease not given up (its hook): Unlock re-homes it and sends
		// the UNLOCK again
		q.hook = nil
		c.finish(q, errorOf(r), nil)
	case r.kind == "NO" && r.word == "NOT_HOLDER":
		if q.lastHold && (q.resent || q.retries > 0) {
			// released before the drop; or, giving back holds we
			// lost track of, by another client of our owner giving
			// back its own (a race, not an error): gone, as asked
			c.finish(q, nil, nil)
		} else {
			c.finish(q, errorOf(r), nil)
		}
	default:
		return false
	}
	return true
}

func (c *Client) rRefresh(q *req, r *reply, now float64) bool {
	l := q.lease
	if l == nil {
		// cut from its lease, which went to another partition's client
		// (detach): finished already
		c.finish(q, errorOf(r), nil)
		return true
	}
	if q.op == "RENEW" || q.op == "RECLAIM" {
		l.refreshing = false
	}
	if r.kind == "OK" && (r.word == "REFRESHED" || r.word == "RECLAIMED") {
		i := 1
		if r.word == "RECLAIMED" {
			i = 2
		}
		ms, ok := r.uarg(i)
		if !ok || float64(ms) > q.ttl {
			c.insane = true
			c.finish(q, newErr(ErrProtocol, "no server may refresh so: "+r.text()), nil)
			return true
		}
		if l.live() {
			if q.op == "REFRESH" {
				l.ttl = q.ttl
			}
			if q.op == "REFRESH" && q.value != "" {
				l.value = q.value // Proclaim: the server has it
			}
			l.noteProof(r)
			c.confirmLease(l, q, q.sentAt, float64(ms))
		}
		c.finish(q, nil, ms)
		return true
	}
	if r.kind == "NO" && r.word == "NOT_HOLDER" && q.op == "RENEW" && l.proof != "" && l.live() && l.deadlineM > now {
		// the server does not know the lease: if Redis forgot it (grants
		// closed after a loss), ask for it again with its proof
		q.op = "RECLAIM"
		l.refreshing = true
		c.write(q, now)
		return true
	}
	if r.kind == "NO" && r.word == "NOT_HOLDER" {
		if l.live() {
			c.lose(l, LostRejected, "")
		}
		c.finish(q, &Error{Kind: ErrLost, Code: r.word, Text: r.text(), Reason: LostRejected}, nil)
		return true
	}
	if r.kind == "NO" && r.word == "MOVED" && (q.op == "RENEW" || q.op == "RECLAIM") && l.live() {
		// the lease's slot went to another partition, and the lease
		// with it: no loss; it follows (and is renewed there at once)
		c.leaseMoved(l, errorOf(r), now)
		return false
	}
	if (q.op == "RENEW" || q.op == "RECLAIM") && l.live() {
		// UNAVAILABLE (a slot moving, too) and the like: try again
		// soon; the guard says when it is too late
		l.renewAt = now + math.Max(l.ttl/10, renewRetryMinMs)
		c.risk(l)
	}
	return false
}

func (c *Client) rHello(q *req, r *reply, now float64) bool {
	if r.kind != "OK" {
		// refused (NO DENIED <id> need=key): on a reconnect, acting as
		// another owner would be worse than not at all
		err := errorOf(r)
		c.lastError = c.here() + ": " + r.text()
		if !c.ready {
			c.fatal = err
			c.signalReady()
		}
		c.finish(q, err, nil)
		c.dropWanted = true
		return true
	}
	if v, err := strconv.Atoi(r.kvs("default_ttl_ms")); err == nil && v > 0 {
		c.defaultTTL = float64(v)
	}
	if k := r.kvs("key"); k != "" {
		c.setKey(k)
	}
	c.takesReq = takesReq(r.kvs("version"))
	if _, ok := r.kv("owner"); !ok && r.kvs("auth") == "required" {
		err := newErr(ErrDenied, "the server requires AUTH: give a password, or a user and its secret")
		if !c.ready {
			c.fatal = err
			c.signalReady()
		}
		c.lastError = err.Error()
		c.finish(q, err, nil)
		c.dropWanted = true
		return true
	}
	c.sessionAt = now // the backoff is reset once the session has lasted
	c.failedI = -1
	c.sessionOK = true
	c.ready = true
	c.signalReady()
	c.finish(q, nil, nil)
	c.session(now)
	return true
}

// takesReq: a HELLO's version= is 0.4.0 or later, so the server takes
// request ids (LOCK req=); a server of 0.3 would refuse every LOCK that
// carried one. Decided for each connection, by its HELLO.
func takesReq(version string) bool {
	major, rest, ok := strings.Cut(version, ".")
	if !ok {
		return false
	}
	minor, _, _ := strings.Cut(rest, ".")
	x, err1 := strconv.ParseUint(major, 10, 32)
	y, err2 := strconv.ParseUint(minor, 10, 32)
	return err1 == nil && err2 == nil && (x > 0 || y >= 4)
}

func (c *Client) rBody(q *req, r *reply) bool {
	if r.kind != "OK" || r.word != q.op {
		return false
	}
	n, ok := r.uarg(1)
	q.header = r
	q.body = nil
	if !ok || n > bodyLinesMax {
		c.insane = true
		c.finish(q, newErr(ErrProtocol, "unexpected reply: "+r.text()), nil)
		return true
	}
	if n == 0 {
		c.bodyDone(q)
	} else {
		c.bodyReq = q
		c.bodyLeft = int(n)
		q.where = sent
	}
	return true
}

func (c *Client) bodyDone(q *req) {
	switch q.op {
	case "MLOCK":
		c.multiBodyDone(q)
		return
	case "MAP":
		m, err := parseMap(q.header, q.body)
		if err != nil {
			c.finish(q, err, nil)
		} else {
			c.finish(q, nil, m)
		}
		return
	}
	h := Holders{Status: statusOf(q.name, q.header), More: atoi(q.header.kvs("more"))}
	h.Status.Held = h.Status.Holders > 0
	for _, s := range q.body {
		x, ok := holderOf(s)
		if !ok {
			c.finish(q, newErr(ErrProtocol, "unexpected line: "+trunc(s)), nil)
			return
		}
		if x.Waiter {
			h.Waiters = append(h.Waiters, x)
		} else {
			h.Holders = append(h.Holders, x)
		}
	}
	if len(h.Holders) > 0 {
		f := h.Holders[0]
		h.Status.Token, h.Status.TTL, h.Status.Count, h.Status.Owner, h.Status.User = f.Token, f.TTL, f.Count, f.Owner, f.User
		h.Status.HeldFor, h.Status.Host, h.Status.PID, h.Status.Cmd = f.HeldFor, f.Host, f.PID, f.Cmd
		h.Status.Value = f.Value
	}
	c.finish(q, nil, h)
}

// ---- output ----------------------------------------------------------------

func (c *Client) format(q *req, now float64) string {
	c.seq++
	q.seq = c.seq
	q.tag = "g" + strconv.Itoa(c.seq)
	switch q.op {
	case "AUTH":
		if c.cfg.user != "" {
			return newLine("AUTH", c.cfg.user, c.cfg.password).String(q.tag)
		}
		return newLine("AUTH", c.cfg.password).String(q.tag)
	case "HELLO":
		return newLine("HELLO").kv("owner", c.owner).kv("key", c.key).String(q.tag)
	case "DESCRIBE":
		return c.describeLine().String(q.tag)
	case "LOCK":
		verb := "LOCK"
		if q.wait == 0 {
			verb = "TRYLOCK"
		}
		l := newLine(verb, q.name).kv("ttl", itoa(int64(q.ttl)))
		c.waitKV(l, q, now)
		if q.shared {
			l.kv("mode", "shared")
		}
		if q.limit > 1 {
			l.kv("limit", strconv.Itoa(q.limit))
		}
		if q.reqID != 0 && c.takesReq {
			l.kv("req", strconv.FormatUint(q.reqID, 10))
		}
		if q.notify {
			l.kv("notify", "waiters")
		}
		return l.kv("value", q.value).String(q.tag)
	case "MLOCK":
		return c.formatMulti(q, now)
	case "CONFIRM", "RENEW", "REFRESH":
		// a CONFIRM says the acquire's value again (as libdlock's), a
		// REFRESH of Proclaim the new one; a RENEW none (the lease keeps it)
		return newLine("REFRESH", q.name, strconv.FormatUint(q.token, 10)).kv("ttl", itoa(int64(q.ttl))).
			kv("value", q.value).String(q.tag)
	case "RECLAIM":
		l := q.lease
		ln := newLine("RECLAIM", q.name, strconv.FormatUint(q.token, 10)).
			kv("proof", l.proof).kv("until", itoa(l.until)).kv("ttl", itoa(int64(q.ttl)))
		if l.mode == "shared" {
			ln.kv("mode", "shared")
		}
		if l.limit > 1 {
			ln.kv("limit", strconv.Itoa(l.limit))
		}
		return ln.kv("value", l.value).String(q.tag)
	case "UNLOCK", "CHECK":
		return newLine(q.op, q.name, strconv.FormatUint(q.token, 10)).String(q.tag)
	case "BREAK":
		return newLine("BREAK", q.name, strconv.FormatUint(q.token, 10)).kv("reason", q.reason).String(q.tag)
	case "CANCEL", "STATUS", "HOLDERS", "WATCH", "UNWATCH":
		return newLine(q.op, q.name).String(q.tag)
	case "REWATCH":
		return newLine("WATCH", q.name).String(q.tag)
	}
	return newLine(q.op).String(q.tag) // PING, MAP
}

// waitKV says a LOCK's wait= (none for a try): what is left of it, from
// its first write on.
func (c *Client) waitKV(l *line, q *req, now float64) {
	if q.wait < 0 {
		l.kv("wait", "inf")
	} else if q.wait > 0 {
		if q.waitEnd == never || q.waitEnd == 0 {
			q.waitEnd = now + q.wait
		}
		l.kv("wait", itoa(int64(math.Max(q.waitEnd-now, 1))))
	}
}

// confirmLease: the server confirmed ms of lease for a request written at
// sentAt. A REFRESH of the lease written after q may have shortened it
// already: until its reply the lease counts on the shorter end.
func (c *Client) confirmLease(l *Lease, q *req, sentAt, ms float64) {
	d := sentAt + ms - slackMs(ms)
	for _, o := range c.fifo {
		if o == q || o.lease != l || o.ttl <= 0 || (o.op != "REFRESH" && o.op != "RENEW" && o.op != "RECLAIM") {
			continue
		}
		if e := o.sentAt + o.ttl - slackMs(o.ttl); e < d {
			d = e
		}
	}
	l.renewAt = sentAt + l.ttl/3
	l.movedN = 0
	l.atRiskM = false
	l.setDeadline(d, false)
}

func (c *Client) write(q *req, now float64) {
	c.out = append(c.out, c.format(q, now)...)
	q.sentAt = now
	q.where = sent
	// A REFRESH that shortens the lease may take effect even if its reply
	// never comes: the lease counts on the shorter deadline from now.
	if l := q.lease; (q.op == "REFRESH" || q.op == "RENEW") && l != nil && q.ttl > 0 {
		l.ttl = math.Min(l.ttl, q.ttl)
		d := l.deadlineM
		if e := now + q.ttl - slackMs(q.ttl); e < d {
			d = e
		}
		l.setDeadline(d, l.atRiskM) // the guard may have changed with the TTL
	}
	c.fifo = append(c.fifo, q)
}

func (c *Client) internal(op, name string, token uint64, lastHold bool) *req {
	q := &req{op: op, name: name, token: token, internal: true, lastHold: lastHold, deadline: never}
	if c.state == stUp && (c.sessionOK || op == "AUTH" || op == "HELLO") {
		c.write(q, nowMs())
	} else if (op == "UNLOCK" || c.state == stUp) && c.state != stDead {
		q.where = unsent
		c.unsent = append(c.unsent, q)
	}
	return q
}

func (c *Client) renewLease(l *Lease, now float64) {
	q := &req{op: "RENEW", name: l.name, token: l.token, ttl: l.ttl, lease: l, internal: true, deadline: never}
	l.refreshing = true
	c.write(q, now)
}

// cleanupGrant releases a grant nobody wants: one hold of a lease we keep,
// or the whole lease (UNLOCK until RELEASED).
func (c *Client) cleanupGrant(name string, token uint64) {
	keep := false
	for _, l := range c.leases {
		if l.name == name && l.token == token && l.live() {
			keep = true
		}
	}
	c.internal("UNLOCK", name, token, !keep)
}

// ---- requests ----------------------------------------------------------------

func (c *Client) submit(q *req, now float64) {
	switch {
	case c.closing || c.state == stDead:
		c.finish(q, newErr(ErrClosed, "the client is closed"), nil)
	case c.state == stUp && c.sessionOK:
		c.write(q, now)
	default:
		q.where = unsent
		c.unsent = append(c.unsent, q)
	}
}

// reqHeap orders the requests callers wait for by deadline (req.hi is
// the index + 1; 0: not in it).
type reqHeap []*req

func (h reqHeap) Len() int           { return len(h) }
func (h reqHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h reqHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i+1, j+1
}
func (h *reqHeap) Push(x interface{}) {
	q := x.(*req)
	q.hi = len(*h) + 1
	*h = append(*h, q)
}
func (h *reqHeap) Pop() interface{} {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.hi = 0
	return q
}

// setReqDeadline: q fails with ErrTimeout at d unless it ends before.
func (c *Client) setReqDeadline(q *req, d float64) {
	q.deadline = d
	switch {
	case q.internal || q.finished || d == never:
		if q.hi > 0 {
			heap.Remove(&c.timed, q.hi-1)
		}
	case q.hi > 0:
		heap.Fix(&c.timed, q.hi-1)
	default:
		heap.Push(&c.timed, q)
	}
}

func removeReq(qs []*req, q *req) []*req {
	for i, x := range qs {
		if x == q {
			return append(qs[:i], qs[i+1:]...)
		}
	}
	return qs
}

// abandon: the caller stops waiting for q (its context, or the server
// took longer than ServerTimeout).
func (c *Client) abandon(q *req, err error) {
	if q.finished {
		return
	}
	switch q.where {
	case unsent:
		if q.op == "UNLOCK" && q.lastHold {
			q.internal = true // still release the lease once connected
		} else {
			c.unsent = removeReq(c.unsent, q)
			q.where = nowhere
			// a multi-lock's grants read before a drop, their
			// confirmation unsent: given back, the UNLOCKs kept for
			// the next connection (found by review: they were held
			// until their TTL)
			for _, g := range q.grants {
				c.cleanupGrant(g.name, g.token)
			}
		}
	case waiting:
		delete(c.waiting, q.tag)
		q.where = nowhere
		// leave the queue; a grant that crosses the CANCEL comes as a
		// "* GRANTED" nobody waits for, and is released
		if c.state == stUp {
			c.crossing++
			c.internal("CANCEL", q.name, 0, false)
		}
	case sent:
		q.abandoned = true // its reply will be cleaned up
	}
	c.finish(q, err, nil)
}

func (c *Client) finish(q *req, err error, result interface{}) {
	if q.finished {
		return
	}
	q.where = nowhere
	q.finished = true
	if q.hi > 0 {
		heap.Remove(&c.timed, q.hi-1)
	}
	q.err = err
	q.result = result
	if q.hook != nil {
		q.hook()
		q.hook = nil
	}
	if q.done != nil {
		close(q.done)
	}
}

// ---- turns -------------------------------------------------------------------

func (c *Client) takeTurn(name string) *ticket {
	t := &ticket{name: name, ready: make(chan struct{})}
	c.turns[name] = append(c.turns[name], t)
	if len(c.turns[name]) == 1 {
		t.head = true
		close(t.ready)
	}
	return t
}

func (c *Client) giveTurn(t *ticket) {
	if t == nil {
		return
	}
	dq := c.turns[t.name]
	for i, x := range dq {
		if x != t {
			continue
		}
		dq = append(dq[:i], dq[i+1:]...)
		if len(dq) == 0 {
			delete(c.turns, t.name)
		} else {
			c.turns[t.name] = dq
			if i == 0 && !dq[0].head {
				dq[0].head = true
				close(dq[0].ready)
			}
		}
		return
	}
}

// ---- leases and timers -------------------------------------------------------

func (c *Client) lose(l *Lease, why LostReason, brokenBy string) {
	if l.lostM != NotLost {
		return
	}
	l.lostM = why
	c.giveTurn(l.ticket)
	l.ticket = nil
	msg := map[LostReason]string{
		LostExpired:     "the server ended it",
		LostRejected:    "the server does not know it (NOT_HOLDER)",
		LostUnconfirmed: "it could not be confirmed before its local deadline",
		LostClosed:      "the client was closed",
	}[why]
	if brokenBy != "" {
		msg = "broken by " + brokenBy
	}
	l.setLost(&Error{Kind: ErrLost, Reason: why, BrokenBy: brokenBy,
		Msg: fmt.Sprintf("%s (token %d): %s", l.name, l.token, msg)})
}

func (c *Client) risk(l *Lease) {
	if !l.atRiskM && l.live() {
		l.atRiskM = true
		l.setDeadline(l.deadlineM, true)
	}
}

func (c *Client) released(l *Lease) {
	l.unlocking = false
	l.released = true
	for i, x := range c.leases {
		if x == l {
			c.leases = append(c.leases[:i], c.leases[i+1:]...)
			break
		}
	}
	c.giveTurn(l.ticket)
	l.ticket = nil
}

// tick renews what is due, declares lost what can no longer be confirmed
// in time, marks overdue renewals at risk and times requests out; it
// returns when there is something to do next.
func (c *Client) tick(now float64) float64 {
	next := never
	if c.state == stUp && !c.sessionOK {
		if now >= c.helloBy {
			c.lastError = c.here() + ": no answer to HELLO in time"
			c.helloBy = never
			c.dropWanted = true
		} else {
			next = math.Min(next, c.helloBy)
		}
	}
	if c.naddrs > 1 && c.state == stUp && c.sessionOK && c.bodyReq == nil && len(c.fifo) > 0 {
		// A server that stops answering (stopped, hung, a path that
		// drops its replies) is left for the next of the list (with one
		// server there is nowhere to go, and a drop would only lose the
		// replies of what it may still carry out, as libdlock): the
		// oldest request written and not answered within ServerTimeout
		// drops the connection. A LOCK's wait in the queue does not
		// count (its OK QUEUED moved it to c.waiting), nor do HELLO's
		// (helloBy).
		if due := c.fifo[0].sentAt + c.serverTimeoutMs(); now >= due {
			c.lastError = c.here() + ": no reply within the server timeout"
			c.dropWanted = true
			c.stalled = true
		} else {
			next = math.Min(next, due)
		}
	}
	for _, l := range append([]*Lease(nil), c.leases...) {
		if !l.live() {
			continue
		}
		lostAt := l.lostAtM
		if now >= lostAt {
			c.lose(l, LostUnconfirmed, "")
			continue
		}
		next = math.Min(next, lostAt)
		if !l.renew {
			continue
		}
		overdue := l.renewAt + l.ttl/6
		if !l.atRiskM {
			if now >= overdue {
				c.risk(l)
			} else {
				next = math.Min(next, overdue)
			}
		}
		if l.refreshing || l.rehoming || c.state != stUp || !c.sessionOK {
			continue
		}
		if now < l.renewAt {
			next = math.Min(next, l.renewAt)
			continue
		}
		c.renewLease(l, now)
	}
	// requests whose reply is overdue: the callers' requests by deadline,
	// the earliest first (those given up, internal or finished are not
	// there, however many wait in the FIFO for their reply)
	for len(c.timed) > 0 && c.timed[0].deadline <= now {
		q := heap.Pop(&c.timed).(*req)
		why := "no reply from the server in time"
		if c.state != stUp || !c.sessionOK {
			why = "not connected"
			if c.lastError != "" {
				why += ": " + c.lastError
			}
		}
		c.abandon(q, newErr(ErrTimeout, why))
	}
	if len(c.timed) > 0 {
		next = math.Min(next, c.timed[0].deadline)
	}
	return next
}
