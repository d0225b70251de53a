// partition.go: a partitioned dlockd (proto/PROTOCOL.md, "Partitions",
// MAP, NO MOVED): a name's slot, the partition map, and the router a
// Client becomes when its first server says a map: one ordinary client
// (a leg) per partition, each call about a name handed to the leg of
// the name's partition, MOVED followed.

package dlockd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	slotCount    = 16384 // Redis Cluster's hash slots (DL_SLOTS)
	maxRedirects = 3     // MOVED followed per call, then ErrMoved
	mapLinesMax  = 65536 // a MAP body: a part line per partition, its slots cut at ~2 KB
	mapReadEvery = time.Second
)

// crc16 is CRC16/XMODEM (poly 0x1021, init 0, no reflection), as Redis
// Cluster's (proto/slot.c).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// slotOf is a name's hash slot: Redis Cluster's, of its tag -- the bytes
// between the first '{' and the first '}' after it, when at least one
// byte is between -- or of the whole name.
func slotOf(name string) int {
	if i := strings.IndexByte(name, '{'); i >= 0 {
		if j := strings.IndexByte(name[i+1:], '}'); j > 0 {
			name = name[i+1 : i+1+j]
		}
	}
	return int(crc16(name) % slotCount)
}

// partInfo is one partition of a map: its id, its daemons' addresses
// ("" while none is known) and its tokens' floor.
type partInfo struct {
	id    string
	addrs string
	floor uint64
}

// partMap is MAP's answer: the epoch (0: not partitioned) and which
// partition serves each slot (an index of parts, -1: none).
type partMap struct {
	epoch uint64
	parts []partInfo
	owner [slotCount]int16
}

// parseMap reads OK MAP <epoch> <n> and its n lines.
func parseMap(h *reply, body []string) (*partMap, error) {
	epoch, _ := h.uarg(0)
	m := &partMap{epoch: epoch}
	for i := range m.owner {
		m.owner[i] = -1
	}
	idx := map[string]int{}
	bad := func(s string) error { return newErr(ErrProtocol, "a MAP line no server may send: "+trunc(s)) }
	for _, s := range body {
		w := strings.Fields(s)
		if len(w) < 2 {
			return nil, bad(s)
		}
		switch w[0] {
		case "part":
			if _, dup := idx[w[1]]; dup || len(idx) >= 1<<15 {
				return nil, bad(s)
			}
			r := &reply{args: w[2:]}
			p := partInfo{id: w[1], addrs: r.kvs("addrs"), floor: atou(r.kvs("floor"))}
			if p.addrs == "-" {
				p.addrs = ""
			}
			idx[p.id] = len(m.parts)
			m.parts = append(m.parts, p)
		case "slots":
			i, ok := idx[w[1]]
			if !ok || len(w) != 3 {
				return nil, bad(s)
			}
			if w[2] == "-" {
				continue
			}
			for _, rg := range strings.Split(w[2], ",") {
				a, b, ok := slotRange(rg)
				if !ok {
					return nil, bad(s)
				}
				for x := a; x <= b; x++ {
					if m.owner[x] >= 0 && int(m.owner[x]) != i {
						return nil, bad(s) // a slot of two partitions
					}
					m.owner[x] = int16(i)
				}
			}
		default:
			// a line of a later server: not ours to read
		}
	}
	return m, nil
}

// slotRange parses "<a>-<b>" or "<s>".
func slotRange(s string) (int, int, bool) {
	x, y, isRange := strings.Cut(s, "-")
	a, err := strconv.Atoi(x)
	if err != nil || a < 0 || a >= slotCount {
		return 0, 0, false
	}
	if !isRange {
		return a, a, true
	}
	b, err := strconv.Atoi(y)
	if err != nil || b < a || b >= slotCount {
		return 0, 0, false
	}
	return a, b, true
}

// serversOf is a map's address list as a servers list (the first
// serversMax of them).
func serversOf(addrs string) ([]address, error) {
	if list := strings.Split(addrs, ","); len(list) > serversMax {
		addrs = strings.Join(list[:serversMax], ",")
	}
	return parseServers(addrs)
}

// ---- the client's side ----------------------------------------------------------

// rMap reads OK MAP's header; its lines follow as a body.
func (c *Client) rMap(q *req, r *reply) bool {
	if r.kind != "OK" || r.word != "MAP" {
		return false // ERR UNKNOWN_COMMAND (a server before partitions) and the like
	}
	_, ok1 := r.uarg(0)
	n, ok2 := r.uarg(1)
	if !ok1 || !ok2 {
		// no count to read a body by: nothing follows (a test's server)
		c.finish(q, newErr(ErrProtocol, "unexpected reply: "+r.text()), nil)
		return true
	}
	if n > mapLinesMax {
		c.insane = true
		c.finish(q, newErr(ErrProtocol, "unexpected reply: "+r.text()), nil)
		return true
	}
	q.header = r
	q.body = nil
	if n == 0 {
		c.bodyDone(q)
	} else {
		c.bodyReq = q
		c.bodyLeft = int(n)
		q.where = sent
	}
	return true
}

// readMap asks the server for its partition map.
func (c *Client) readMap(ctx context.Context) (*partMap, error) {
	res, err := c.call(ctx, func(now float64) (*req, error) { return &req{op: "MAP"}, nil })
	if err != nil {
		return nil, err
	}
	return res.(*partMap), nil
}

// setAddrs gives the client a new servers list (a leg whose partition's
// addresses changed); the connection it has is kept.
func (c *Client) setAddrs(addrs []address) {
	if len(addrs) == 0 {
		return
	}
	c.execAlways(func() {
		cur := ""
		if c.addrI < len(c.addrs) {
			cur = c.addrs[c.addrI].name
		}
		c.addrs, c.naddrs = addrs, len(addrs)
		c.addrI, c.hint, c.failedI, c.clusterRefused = 0, -1, -1, 0
		for i, a := range addrs {
			if a.name == cur {
				c.addrI = i
			}
		}
	})
}

// MapEpoch is the epoch of the partition map the client routes by; 0
// for a service that is not partitioned (the client is then what it
// always was).
func (c *Client) MapEpoch() uint64 {
	if rt := c.rt.Load(); rt != nil {
		return rt.epoch()
	}
	return 0
}

// movedOf is err when it is a NO MOVED (or a waiting LOCK's * MOVED):
// one that names a partition, or none (the map says where).
func movedOf(err error) *Error {
	var e *Error
	if errors.As(err, &e) && e.Kind == ErrMoved && e.Code == "MOVED" {
		return e
	}
	return nil
}

// moveUnderWay: err is the ERR UNAVAILABLE of a slot that is moving
// between partitions (the giver's "slot <s> is moving to another
// partition", the receiver's while it imports the slot's locks): for a
// moment, tried again.
func moveUnderWay(err error) bool {
	var e *Error
	if !errors.As(err, &e) || e.Code != "UNAVAILABLE" || !strings.Contains(e.Text, "slot ") {
		return false
	}
	return strings.Contains(e.Text, " is moving") || strings.Contains(e.Text, " is arriving") ||
		strings.Contains(e.Text, "importing")
}

// movePause waits before a request is sent again to a slot that is
// moving: d (doubled for the next, up to 200 ms), or until ctx ends.
func movePause(ctx context.Context, d *time.Duration) error {
	t := time.NewTimer(*d)
	defer t.Stop()
	if *d *= 2; *d > 200*time.Millisecond {
		*d = 200 * time.Millisecond
	}
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// routed runs f, a call about name, on the client of name's partition:
// the client itself when it is not partitioned; following MOVED.
func (c *Client) routed(ctx context.Context, name string, f func(x *Client) error) error {
	rt := c.rt.Load()
	if rt == nil {
		err := f(c)
		mv := movedOf(err)
		if mv == nil || c.leg {
			return err
		}
		// MAP said 0 at Dial (a daemon that had not read its map
		// yet), or was not answered: the service is partitioned
		if rt = c.becomeRouter(ctx); rt == nil {
			return err
		}
		return rt.do(ctx, name, f, mv, c, 1)
	}
	if err := checkName(name, "lock name"); err != nil {
		return err
	}
	return rt.do(ctx, name, f, nil, nil, 0)
}

// becomeRouter reads the map, after a MOVED, and routes by it from now
// on (nil: still none).
func (c *Client) becomeRouter(ctx context.Context) *router {
	if rt := c.rt.Load(); rt != nil {
		return rt
	}
	m, err := c.readMap(ctx)
	if err != nil || m.epoch == 0 {
		return nil
	}
	c.rtMu.Lock()
	defer c.rtMu.Unlock()
	if rt := c.rt.Load(); rt != nil || c.rtClosed {
		return rt // made by another call meanwhile, or closed
	}
	rt := newRouter(c, m)
	c.rt.Store(rt)
	return rt
}

// ---- the router -----------------------------------------------------------------

// leg is one partition's client, dialed on first use.
type leg struct {
	addrs   string        // its servers list, as the map says it
	c       *Client       // nil until dialed
	dialing chan struct{} // closed when a dial under way ends
}

type router struct {
	root   *Client // the first connection: the map, and calls without a name
	mu     sync.Mutex
	m      *partMap
	legs   map[string]*leg
	closed bool

	readMu sync.Mutex // one MAP read at a time
	readAt time.Time  // the last, when not for a MOVED (under readMu)
}

func newRouter(root *Client, m *partMap) *router {
	return &router{root: root, m: m, legs: map[string]*leg{}}
}

func (rt *router) epoch() uint64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.m.epoch
}

// follow is where a MOVED (from the client from) sends a request: a
// partition and its addresses, or "" for the map's choice. A newer map
// than ours is read and routed by (or, while none of that epoch could be
// read, the request goes where the MOVED said); one as old or older: a
// stale daemon or a race, it goes where the MOVED said. A MOVED that
// names no partition (a multi-lock's * FAILED ... MOVED) has the map
// read again, whatever its epoch.
func (rt *router) follow(ctx context.Context, from *Client, mv *Error) (to, addrs string) {
	if mv.Partition == "" || mv.Partition == "-" {
		rt.refresh(ctx, from, rt.epoch()+1)
		return "", ""
	}
	newer := mv.MapEpoch > rt.epoch()
	if newer {
		rt.refresh(ctx, from, mv.MapEpoch)
	}
	if !newer || mv.MapEpoch > rt.epoch() {
		return mv.Partition, mv.Addrs
	}
	return "", ""
}

// stale: mv comes from a daemon whose map is older than ours (the
// receiver of a slot that has not read the map giving it the slot yet,
// which sends the request back where it came from): not followed, the
// request is sent there again in a moment, as for a slot moving.
func (rt *router) stale(mv *Error) bool {
	return mv != nil && mv.Partition != "" && mv.MapEpoch > 0 && mv.MapEpoch < rt.epoch()
}

// do runs f on the leg of name's partition; mv: the MOVED the last try
// got (from the client from), tries: how many were made. A reply that
// the name's slot is moving (moveUnderWay), or a MOVED of an older map
// than ours (stale), has f run again there, after a pause, for up to
// ServerTimeout.
func (rt *router) do(ctx context.Context, name string, f func(x *Client) error, mv *Error, from *Client, tries int) error {
	var until time.Time
	pause := 10 * time.Millisecond
	to, addrs := "", "" // a partition a MOVED named, its addresses; "": the map's
	for {
		if mv != nil {
			to, addrs = rt.follow(ctx, from, mv)
		}
		x, err := rt.clientFor(ctx, name, to, addrs)
		if err != nil {
			return err
		}
		err = f(x)
		if moveUnderWay(err) || rt.stale(movedOf(err)) {
			// the same partition again, in a moment
			if until.IsZero() {
				until = time.Now().Add(x.cfg.serverTimeout)
			}
			if time.Now().Before(until) && movePause(ctx, &pause) == nil {
				mv = nil
				continue
			}
			return err
		}
		next := movedOf(err)
		if next == nil {
			return err
		}
		if tries >= maxRedirects {
			return &Error{Kind: ErrMoved, Code: next.Code, Text: next.Text,
				Msg:       fmt.Sprintf("%s: still served by another partition after %d redirects", name, maxRedirects),
				Partition: next.Partition, Addrs: next.Addrs, MapEpoch: next.MapEpoch}
		}
		tries++
		mv, from = next, x
	}
}

// clientFor is the client of partition `to` (addrs: its addresses, from
// a MOVED), or ("") of name's partition in the map. A slot the map
// gives to no partition goes to the first connection's daemon, which
// says where (MOVED) or that none serves it.
func (rt *router) clientFor(ctx context.Context, name, to, addrs string) (*Client, error) {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return nil, newErr(ErrClosed, "")
	}
	if to == "" {
		i := rt.m.owner[slotOf(name)]
		if i < 0 {
			rt.mu.Unlock()
			return rt.root, nil
		}
		to, addrs = rt.m.parts[i].id, rt.m.parts[i].addrs
	} else {
		for _, p := range rt.m.parts {
			if p.id == to && p.addrs != "" {
				addrs = p.addrs // the map's, over a MOVED's
			}
		}
	}
	rt.mu.Unlock()
	return rt.legFor(ctx, to, addrs)
}

// legFor is partition id's client, dialed if need be (on addrs, or the
// addresses the map gives it).
func (rt *router) legFor(ctx context.Context, id, addrs string) (*Client, error) {
	refreshed := false
	for {
		rt.mu.Lock()
		if rt.closed {
			rt.mu.Unlock()
			return nil, newErr(ErrClosed, "")
		}
		l := rt.legs[id]
		if l == nil {
			l = &leg{}
			rt.legs[id] = l
		}
		if l.addrs == "" {
			l.addrs = addrs
		}
		if l.c != nil {
			x := l.c
			rt.mu.Unlock()
			return x, nil
		}
		if ch := l.dialing; ch != nil {
			rt.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if l.addrs == "" {
			epoch := rt.m.epoch
			rt.mu.Unlock()
			if !refreshed {
				// a partition named before its daemons said where
				// they are: the map may know by now
				refreshed = true
				rt.refresh(ctx, nil, 0)
				rt.mu.Lock()
				for _, p := range rt.m.parts {
					if p.id == id && p.addrs != "" {
						addrs = p.addrs
					}
				}
				rt.mu.Unlock()
				if addrs != "" {
					continue
				}
			}
			return nil, newErr(ErrUnavailable, fmt.Sprintf("partition %s: the map (epoch %d) knows no address of its daemons", id, epoch))
		}
		ch := make(chan struct{})
		l.dialing = ch
		a := l.addrs
		rt.mu.Unlock()
		x, err := rt.dialLeg(ctx, a)
		rt.mu.Lock()
		l.dialing = nil
		close(ch)
		if err == nil && rt.closed {
			rt.mu.Unlock()
			x.Close()
			return nil, newErr(ErrClosed, "")
		}
		var now string
		if err == nil {
			l.c = x
			now = l.addrs // a map read meanwhile may have changed them
		}
		rt.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if now != a {
			if list, perr := serversOf(now); perr == nil {
				x.setAddrs(list)
			}
		}
		return x, nil
	}
}

// dialLeg dials a partition's client: the options of the first
// connection, its owner id and key (one owner in every partition), the
// partition's daemons, and no cluster id of its own yet (each partition
// is a lock table of its own: the leg holds to the first it meets).
func (rt *router) dialLeg(ctx context.Context, addrs string) (*Client, error) {
	list, err := serversOf(addrs)
	if err != nil {
		return nil, newErr(ErrUnavailable, fmt.Sprintf("the partition map's addresses %q: %v", addrs, err))
	}
	cfg := *rt.root.cfg
	cfg.addrs = list
	cfg.owner = rt.root.owner
	cfg.key = rt.root.OwnerKey()
	cfg.cluster = ""
	return dialConfig(ctx, &cfg, rt)
}

// refresh reads the map again: from `from` (the client a MOVED came
// from) or the first connection; want: the epoch the MOVED said (0: at
// most once per mapReadEvery).
func (rt *router) refresh(ctx context.Context, from *Client, want uint64) {
	rt.readMu.Lock()
	defer rt.readMu.Unlock()
	if want > 0 && rt.epoch() >= want {
		return // read by another call meanwhile
	}
	if want == 0 {
		if time.Since(rt.readAt) < mapReadEvery {
			return
		}
		rt.readAt = time.Now()
	}
	for _, x := range []*Client{from, rt.root} {
		if x == nil {
			continue
		}
		if m, err := x.readMap(ctx); err == nil && m.epoch > 0 {
			rt.install(m)
			if want == 0 || m.epoch >= want {
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// install routes by m if it is newer: the legs of partitions still there
// are kept, with their new addresses; the others too (their leases are
// theirs until released), routed to no more.
func (rt *router) install(m *partMap) {
	type change struct {
		c     *Client
		addrs []address
	}
	var changes []change
	rt.mu.Lock()
	if m.epoch <= rt.m.epoch {
		rt.mu.Unlock()
		return
	}
	rt.m = m
	for _, p := range m.parts {
		l := rt.legs[p.id]
		if l == nil || p.addrs == "" || p.addrs == l.addrs {
			continue
		}
		l.addrs = p.addrs
		if l.c != nil {
			if list, err := serversOf(p.addrs); err == nil {
				changes = append(changes, change{l.c, list})
			}
		}
	}
	rt.mu.Unlock()
	for _, ch := range changes {
		ch.c.setAddrs(ch.addrs)
	}
}

// close closes every leg.
func (rt *router) close() {
	rt.mu.Lock()
	rt.closed = true
	var cs []*Client
	for _, l := range rt.legs {
		if l.c != nil {
			cs = append(cs, l.c)
		}
	}
	rt.mu.Unlock()
	for _, x := range cs {
		x.Close()
	}
}

// ---- leases that follow their slot -------------------------------------------
//
// A PARTITION MOVE carries the locks of its slots: the giving partition
// answers every later request about them NO MOVED (a LOCK that waited
// there: * MOVED), and the receiving one has each lease with its owner,
// token and proof. A lease belongs to the client (leg) whose manager
// goroutine owns it; when a request about it is answered MOVED the lease
// is re-homed: taken off that client (detach, on its manager), given to
// the named partition's (attach, on that one's), and the request sent
// again there. In between it is in transit (Lease.c nil): the callers
// wait for its new home. A renewal's MOVED has a goroutine re-home it
// (the leg may have to be dialed, the map read), then it is renewed at
// once; it is lost only as any lease is.

// errRehomed: a request about a lease found it re-homed to another
// client, or was cut from it by the re-home: the caller sends it again
// there.
var errRehomed = errors.New("dlockd: the lease moved to another partition's client")

// home is the client the lease belongs to, once a re-home under way has
// ended.
func (l *Lease) home(ctx context.Context) (*Client, error) {
	for {
		l.mu.Lock()
		x, ch := l.c, l.moveCh
		l.mu.Unlock()
		if x != nil {
			return x, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// homeIs: the lease belongs to x.
func (l *Lease) homeIs(x *Client) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c == x
}

// setHome gives the lease to x (nil: in transit).
func (l *Lease) setHome(x *Client) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.c = x
	if x == nil {
		if l.moveCh == nil {
			l.moveCh = make(chan struct{})
		}
	} else if l.moveCh != nil {
		close(l.moveCh)
		l.moveCh = nil
	}
}

// call runs a caller's request about the lease (build makes it, on the
// manager of the lease's client x) on the client the lease belongs to,
// submitted while submitCtx lasts and waited for while ctx does. A
// MOVED has the lease re-homed to the partition it names and the request
// sent again there (3 redirects at most, then ErrMoved); a slot moving
// (moveUnderWay), or a MOVED of an older map than ours (stale), has it
// sent again after a pause, for up to ServerTimeout. unlock: the request is Unlock's. x: the client the
// last try went to.
func (l *Lease) call(submitCtx, ctx context.Context, unlock bool, build func(x *Client, now float64) (*req, error)) (res interface{}, x *Client, err error) {
	redirects := 0
	var until time.Time
	pause := 10 * time.Millisecond
	for {
		if x, err = l.home(ctx); err != nil {
			return nil, nil, err
		}
		res, err = x.callFrom(submitCtx, ctx, func(now float64) (*req, error) {
			if !l.homeIs(x) {
				return nil, errRehomed
			}
			return build(x, now)
		})
		if err == errRehomed {
			continue
		}
		mv := movedOf(err)
		if rt := x.routerNow(); moveUnderWay(err) || (rt != nil && rt.stale(mv)) {
			// the slot moving, or a MOVED of a daemon that has not
			// read our map yet: there again, in a moment
			if until.IsZero() {
				until = time.Now().Add(x.cfg.serverTimeout)
			}
			if time.Now().Before(until) && movePause(ctx, &pause) == nil {
				continue
			}
			return nil, x, err
		}
		if mv == nil {
			return res, x, err
		}
		if redirects >= maxRedirects {
			return nil, x, &Error{Kind: ErrMoved, Code: mv.Code, Text: mv.Text,
				Msg:       fmt.Sprintf("the lease of %s (token %d): still served by another partition after %d redirects", l.name, l.token, maxRedirects),
				Partition: mv.Partition, Addrs: mv.Addrs, MapEpoch: mv.MapEpoch}
		}
		redirects++
		if _, err := l.rehome(ctx, x, mv, unlock); err != nil {
			return nil, x, err
		}
	}
}

// rehome gives the lease, which belongs to from and was answered mv
// there, to the client of the partition mv names (the map read again
// when mv's epoch is newer), and returns its client now: from itself
// when the map still says from's partition. unlock: for an Unlock,
// whose UNLOCK was answered mv (else a lease being released stays).
func (l *Lease) rehome(ctx context.Context, from *Client, mv *Error, unlock bool) (*Client, error) {
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	if !l.homeIs(from) {
		return l.home(ctx) // re-homed by another call meanwhile
	}
	rt := from.routerOf(ctx)
	if rt == nil {
		return nil, mv // no map to follow
	}
	to, addrs := rt.follow(ctx, from, mv)
	x, err := rt.clientFor(ctx, l.name, to, addrs)
	if err != nil {
		return nil, err
	}
	if x == from {
		return from, nil
	}
	var t *ticket
	var derr error
	if err := from.exec(ctx, func() { t, derr = from.detach(l, unlock) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	if x.execAlways(func() { x.attach(l, nil, !unlock) }) {
		// its turn there taken, its turn here is given back: a Lock of
		// the name waiting for it goes there, behind it
		from.execAlways(func() { from.giveTurn(t) })
		return x, nil
	}
	// x was closed meanwhile (the client is being closed): back home
	if !from.execAlways(func() { from.attach(l, t, false) }) {
		l.lostM = LostClosed
		l.setLost(&Error{Kind: ErrLost, Reason: LostClosed,
			Msg: fmt.Sprintf("%s (token %d): the client was closed", l.name, l.token)})
		l.setHome(from)
	}
	return nil, newErr(ErrClosed, "")
}

// routerNow is the router of this client, or of the leg it is (nil: none).
func (c *Client) routerNow() *router {
	if c.parent != nil {
		return c.parent
	}
	return c.rt.Load()
}

// routerOf is the router a lease of this client follows MOVED by: a
// leg's, or the client's own (made now if a MOVED is the first news of
// partitions); nil when there is no map.
func (c *Client) routerOf(ctx context.Context) *router {
	if c.parent != nil {
		return c.parent
	}
	if c.leg {
		return nil
	}
	return c.becomeRouter(ctx)
}

// detach takes lease l off this client, for another (rehome): the
// requests about it that wait here for a reply are cut from it and
// finished (errRehomed: a caller's is sent again by its caller, there);
// its turn on the name here is returned, to be given back once it has
// one there. Refused once the lease is lost or released, and while an
// UNLOCK of it is under way (or, unless unlock, asked).
func (c *Client) detach(l *Lease, unlock bool) (*ticket, error) {
	switch {
	case !l.homeIs(c):
		return nil, errRehomed
	case l.lostM != NotLost:
		l.mu.Lock()
		err := l.err
		l.mu.Unlock()
		return nil, err
	case l.released || (l.unlocking && !unlock):
		return nil, newErr(ErrNotHolder, "the lease of "+l.name+" is released")
	}
	for _, qs := range [][]*req{c.fifo, c.unsent} {
		for _, q := range qs {
			if q.lease == l && q.op == "UNLOCK" {
				return nil, newErr(ErrNotHolder, "the lease of "+l.name+" is being released")
			}
		}
	}
	for _, q := range c.fifo {
		if q.lease == l {
			q.lease = nil // its reply is read, and dropped (rRefresh)
			c.finish(q, errRehomed, nil)
		}
	}
	kept := c.unsent[:0]
	for _, q := range c.unsent {
		if q.lease == l {
			q.lease = nil
			c.finish(q, errRehomed, nil)
		} else {
			kept = append(kept, q)
		}
	}
	for i := len(kept); i < len(c.unsent); i++ {
		c.unsent[i] = nil
	}
	c.unsent = kept
	for i, x := range c.leases {
		if x == l {
			c.leases = append(c.leases[:i], c.leases[i+1:]...)
			break
		}
	}
	t := l.ticket
	l.ticket = nil
	l.refreshing, l.rehoming = false, false
	l.setHome(nil)
	return t, nil
}

// attach makes lease l this client's (rehome): t is its turn on the name
// here (nil: one is taken); renew: renewed at once.
func (c *Client) attach(l *Lease, t *ticket, renew bool) {
	if t == nil {
		t = c.takeTurn(l.name)
	}
	l.ticket = t
	l.refreshing, l.rehoming = false, false
	c.leases = append(c.leases, l)
	l.setHome(c)
	if renew && l.renew && l.live() {
		l.renewAt = nowMs()
	}
}

// leaseMoved: a renewal of l was answered MOVED. No loss: a goroutine
// re-homes the lease on the partition named, which renews it at once
// (the lease is lost only as any lease is: NOT_HOLDER, or its deadline
// passed unconfirmed). A lease sent back and forth (more than
// maxRedirects MOVED without a confirmation) waits as after
// UNAVAILABLE before it follows the next.
func (c *Client) leaseMoved(l *Lease, mv *Error, now float64) {
	if l.rehoming || !l.live() {
		return
	}
	retry := now + math.Max(l.ttl/10, renewRetryMinMs)
	if rt := c.routerNow(); rt != nil && rt.stale(mv) {
		// a daemon that has not read our map yet: as UNAVAILABLE
		l.renewAt = retry
		c.risk(l)
		return
	}
	if l.movedN++; l.movedN > maxRedirects {
		l.movedN = 0
		l.renewAt = retry
		c.risk(l)
		return
	}
	l.rehoming = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if x, err := l.rehome(c.dialCtx, c, mv, false); err == nil && x != c {
			return
		}
		// it stays (no map, no leg, the map still says here): renewed
		// here again in a moment
		_ = c.exec(c.dialCtx, func() {
			if l.homeIs(c) && l.rehoming {
				l.rehoming = false
				l.renewAt = math.Max(l.renewAt, retry)
			}
		})
	}()
}

// giveUp: an Unlock that could not release the lease where it is now
// (its slot moved and it could not follow): the lease is released here
// all the same, no longer renewed -- the server ends it by its TTL. true
// if it was not released yet.
func (l *Lease) giveUp() bool {
	l.moveMu.Lock()
	defer l.moveMu.Unlock()
	x, err := l.home(context.Background()) // not in transit: under moveMu
	if err != nil {
		return false
	}
	did := false
	x.execAlways(func() {
		if l.homeIs(x) && !l.released {
			x.released(l)
			did = true
		}
	})
	return did
}
