// client.go: the Client: Dial and Close, the manager goroutine that owns
// all protocol state, and the goroutines that dial and read connections.
//
// One goroutine (run) owns everything below the public API: callers hand
// it closures (exec), the reader of the current connection hands it lines,
// a dialer hands it a new connection, and a timer wakes it for renewals,
// lost guards, reconnects and request timeouts. No state is shared with
// callers except through a request's done channel and a Lease's mutex.
// It never blocks on I/O: what it sends goes to the connection's writer
// goroutine through a bounded buffer (a server that stops reading is
// dropped once outMax bytes are unsent), so that loss detection and
// timers run whatever the peer does.

package dlockd

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Timings (ms), as libdlock's and the Python client's.
const (
	backoffMinMs          = 50   // first pause between reconnects; doubles ...
	backoffMaxMs          = 1000 // ... up to this, until a session lasts
	sessionSteadyMs       = 1000 // a session this old resets the backoff
	redirectMs            = 100  // a standby named no other active: ask again after this
	guardMinMs            = 20   // default lost guard: max(TTL/10, this)
	renewRetryMinMs       = 10   // a refused renewal is retried after max(TTL/10, this)
	alreadyWaitingRetries = 3
	clockStepMs           = 250 // the longest sleep while leases are held
	watchQueue            = 1024
	outMax                = 4 << 20 // unsent bytes beyond this: the server does not read; drop it
)

var never = math.Inf(1)

type connState int

const (
	stDown connState = iota
	stConnecting
	stUp
	stDead
)

type where int

const (
	nowhere where = iota
	unsent
	sent
	waiting
)

// req is one request, from the call that makes it until its outcome.
type req struct {
	op        string
	name      string
	token     uint64
	ttl       float64 // ms
	wait      float64 // LOCK: ms as asked, -1 forever, 0 try once
	waitEnd   float64 // LOCK: end of the wait, from the first write
	shared    bool
	limit     int
	reqID     uint64       // LOCK, MLOCK: the acquire's request id (req=), the same on every write
	names     []string     // MLOCK (a multi-lock): its names in byte order (name: the first)
	grants    []multiGrant // MLOCK: told by * LOCKED, until the confirmation says them (given back if abandoned unsent)
	tickets   []*ticket    // MLOCK: the turn on each of names
	notify    bool         // LOCK: notify=waiters
	value     string       // LOCK (and its CONFIRM): the lease's value; REFRESH: a new one (Proclaim); as sent
	waiters   int          // CONFIRM: a * WAITING told before the lease was made
	reason    string       // BREAK
	renew     bool
	internal  bool // nobody waits for it
	abandoned bool // the caller gave up; clean up the outcome
	resent    bool
	lastHold  bool
	retries   int
	seq       int
	tag       string
	sentAt    float64
	where     where
	lease     *Lease
	ticket    *ticket
	watch     *watch
	deadline  float64 // the call fails with ErrTimeout then (setReqDeadline)
	hi        int     // its place in Client.timed + 1 (0: none)
	header    *reply
	body      []string
	bodyBytes int
	heldLeft  int // UNLOCK: the holds the last OK HELD said remain (-1: none said)

	finished bool
	done     chan struct{} // closed when finished (nil: internal)
	err      error
	result   interface{}
	hook     func() // runs in the manager when finished
}

// ticket is one acquisition's turn on a name within this client: the
// server would grant a second LOCK of a name this owner holds as a
// reentry, so the holds of one name are taken one at a time.
type ticket struct {
	name  string
	ready chan struct{}
	head  bool
}

type inMsg struct {
	gen  int
	dial bool
	conn net.Conn // what is read and written (TLS or not)
	raw  net.Conn // the socket under it: closing it never blocks
	line string
	err  error
}

// writer is the connection's writer goroutine's side: the manager
// appends to buf without blocking, the goroutine writes it out.
type writer struct {
	conn    net.Conn
	timeout time.Duration
	wake    chan struct{} // cap 1
	stop    chan struct{} // closed when the connection is dropped
	mu      sync.Mutex
	buf     []byte
	unsent  int // bytes handed over and not yet written
}

// enqueue hands b to the writer (copied); it returns the bytes unsent.
func (w *writer) enqueue(b []byte) int {
	w.mu.Lock()
	w.buf = append(w.buf, b...)
	w.unsent += len(b)
	n := w.unsent
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return n
}

// Client is a connection to dlockd (the active daemon of a list) and the
// goroutines that read it, renew the leases and reconnect. Safe for
// concurrent use. Within a client the holds of one name are taken one at
// a time: a second Lock of a name the client holds waits for its Unlock
// (a lock is not reentrant across calls).
type Client struct {
	cfg   *config
	owner string

	// owned by the manager goroutine
	key            string
	defaultTTL     float64
	state          connState
	ready          bool
	fatal          error
	closing        bool
	raw            net.Conn // the current connection's socket
	w              *writer  // and its writer
	gen            int
	out            []byte
	fifo           []*req
	unsent         []*req
	timed          reqHeap // the requests callers wait for, by deadline
	waiting        map[string]*req
	bodyReq        *req
	bodyLeft       int
	crossing       int
	seq            int
	leases         []*Lease
	turns          map[string][]*ticket
	addrs          []address // the servers list (a leg's: its partition's, changed by a new map)
	naddrs         int
	addrI          int
	hint           int
	failedI        int
	standby        bool
	reconnectAt    float64
	backoff        float64
	sessionAt      float64 // when HELLO was last answered OK
	lastError      string
	sessionOK      bool
	dropWanted     bool
	stalled        bool // the drop wanted is for a server that stopped answering
	descRefused    bool
	takesReq       bool // this connection's HELLO said 0.4.0 or later: LOCK req=
	helloBy        float64
	cluster        string
	clusterFrom    string
	clusterRefused int
	clusterWhy     string
	insane         bool
	watches        []*watch

	multiTurn chan struct{} // cap 1: taken by the multi-lock in progress (one per connection)

	calls     chan func()
	inbox     chan inMsg
	stop      chan struct{}
	quit      chan struct{}
	readyCh   chan struct{}
	readyOnce sync.Once
	stopOnce  sync.Once
	wg        sync.WaitGroup
	dialCtx   context.Context
	cancel    context.CancelFunc

	pubMu      sync.Mutex
	pubKey     string
	pubCluster string

	// partitions (partition.go): the router of a client whose first
	// server said a partition map (nil: one lock table, as before), and
	// leg: this client is one partition's, made by a router
	rt       atomic.Pointer[router]
	rtMu     sync.Mutex // making the router after a MOVED; and rtClosed
	rtClosed bool       // Close was called: no router is made any more
	leg      bool
	parent   *router // a leg's router (nil: not a leg)

	// news of waiters for OnContended, handed to its goroutine
	newsMu   sync.Mutex
	news     []*Lease
	newsWake chan struct{} // cap 1
}

// Dial connects to the first server of the list ("host:port,host:port";
// "" for the DLOCK_* environment) that is the active daemon of the
// client's cluster, and starts the client's goroutines. It fails when no
// server could be used within ConnectTimeout (ErrUnavailable, naming why),
// when AUTH or HELLO is refused (ErrDenied), or when every server names
// another cluster (ErrClusterMismatch).
//
// Once connected it asks the server for its partition map (MAP). A
// server without partitions (or one too old to know MAP) makes the
// client what it always was. A partitioned one makes it a router over
// the partitions: see "Partitions" in the package documentation.
func Dial(ctx context.Context, servers string, opts ...Option) (*Client, error) {
	cfg, err := build(servers, opts)
	if err != nil {
		return nil, err
	}
	c, err := dialConfig(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	// The mode is decided here: a map of epoch 0, a refusal (a server
	// before partitions) or no answer leaves the client unpartitioned
	// (a MOVED later makes it a router after all: routed).
	m, err := c.readMap(ctx)
	if ctx.Err() != nil {
		c.Close()
		return nil, ctx.Err()
	}
	if err == nil && m.epoch > 0 {
		c.rt.Store(newRouter(c, m))
	}
	return c, nil
}

// dialConfig makes a client of cfg and waits until it is connected (see
// Dial); parent: the router it is one partition's client of (a leg),
// nil for a Dial's.
func dialConfig(ctx context.Context, cfg *config, parent *router) (*Client, error) {
	c := &Client{
		cfg:        cfg,
		owner:      cfg.owner,
		key:        cfg.key,
		defaultTTL: defaultTTLMs,
		waiting:    map[string]*req{},
		turns:      map[string][]*ticket{},
		addrs:      cfg.addrs,
		naddrs:     len(cfg.addrs),
		hint:       -1,
		failedI:    -1,
		backoff:    backoffMinMs,
		cluster:    cfg.cluster,
		calls:      make(chan func()),
		inbox:      make(chan inMsg, 64),
		stop:       make(chan struct{}),
		quit:       make(chan struct{}),
		readyCh:    make(chan struct{}),
		multiTurn:  make(chan struct{}, 1),
		leg:        parent != nil,
		parent:     parent,
	}
	if c.owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		c.owner = "go-" + hex.EncodeToString(b[:])
	}
	c.pubKey, c.pubCluster = c.key, c.cluster
	c.dialCtx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.run()
	if cfg.onContended != nil {
		c.newsWake = make(chan struct{}, 1)
		c.wg.Add(1)
		go c.tellContended()
	}
	t := time.NewTimer(cfg.connectTimeout)
	defer t.Stop()
	select {
	case <-c.readyCh:
	case <-t.C:
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
	var ok bool
	var fatal error
	var why string
	c.execAlways(func() { ok, fatal, why = c.ready, c.fatal, c.lastError })
	if !ok {
		c.Close()
		if fatal != nil {
			return nil, fatal
		}
		msg := "cannot connect to dlockd"
		if why != "" {
			msg += ": " + why
		}
		return nil, newErr(ErrUnavailable, msg)
	}
	return c, nil
}

// Close stops the client: pending calls fail with ErrClosed, the
// connection is closed and every goroutine of the client has ended when
// it returns. Leases still held are not released (they end at the server
// by their TTL); their Done channels are closed (LostClosed). Watch
// channels are closed.
//
// A partitioned client closes every partition's client too (leases
// taken through them alike).
func (c *Client) Close() error {
	c.rtMu.Lock()
	c.rtClosed = true
	rt := c.rt.Load()
	c.rtMu.Unlock()
	if rt != nil {
		rt.close()
	}
	c.stopOnce.Do(func() { close(c.stop) })
	c.wg.Wait()
	return nil
}

// Owner is the owner id the client says in HELLO.
func (c *Client) Owner() string { return c.owner }

// OwnerKey is the secret that proves the owner id (given, or the
// server's). Another process given Owner(id + "=" + key) acts as the
// same owner: handle it as a password. Of a partitioned service it is
// the owner's key in every partition (the first connection's).
func (c *Client) OwnerKey() string {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	return c.pubKey
}

// ClusterID is the cluster id the client holds to (the Cluster option, or
// the first a server named); "" while none did. Of a partitioned service:
// the first connection's partition's.
func (c *Client) ClusterID() string {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	return c.pubCluster
}

// exec runs f on the manager goroutine and returns once it ran.
func (c *Client) exec(ctx context.Context, f func()) error {
	ran := make(chan struct{})
	select {
	case c.calls <- func() { f(); close(ran) }:
		<-ran
		return nil
	case <-c.quit:
		return newErr(ErrClosed, "")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) execAlways(f func()) bool {
	return c.exec(context.Background(), f) == nil
}

// call submits the request build makes (on the manager goroutine) and
// waits for its outcome. When ctx ends first the request is given up:
// the manager cleans up what it still brings (a grant is released, a wait
// cancelled); an outcome that came first is returned.
func (c *Client) call(ctx context.Context, build func(now float64) (*req, error)) (interface{}, error) {
	return c.callFrom(ctx, ctx, build)
}

// callFrom is call whose request is submitted while submitCtx lasts and
// waited for while ctx does: Unlock submits whatever its ctx says (a
// context ended already must not leave the lease held and renewed).
func (c *Client) callFrom(submitCtx, ctx context.Context, build func(now float64) (*req, error)) (interface{}, error) {
	var q *req
	var berr error
	if err := c.exec(submitCtx, func() {
		now := nowMs()
		q, berr = build(now)
		if q != nil {
			q.done = make(chan struct{})
			c.setReqDeadline(q, now+c.serverTimeoutMs())
			c.submit(q, now)
		}
	}); err != nil {
		return nil, err
	}
	if berr != nil || q == nil {
		return nil, berr
	}
	select {
	case <-q.done:
		return q.result, q.err
	case <-ctx.Done():
		c.execAlways(func() { c.abandon(q, ctx.Err()) })
		select {
		case <-q.done:
			return q.result, q.err
		case <-c.quit:
			return nil, ctx.Err()
		}
	case <-c.quit:
		select {
		case <-q.done:
			return q.result, q.err
		default:
			return nil, newErr(ErrClosed, "")
		}
	}
}

func (c *Client) serverTimeoutMs() float64 {
	return float64(c.cfg.serverTimeout) / float64(time.Millisecond)
}

func (c *Client) connectTimeoutMs() float64 {
	return float64(c.cfg.connectTimeout) / float64(time.Millisecond)
}

// ---- the manager goroutine ----------------------------------------------

func (c *Client) run() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := nowMs()
		next := c.tick(now)
		if c.takeDrop() {
			c.drop(now)
			continue
		}
		if c.state == stDown && !c.closing {
			if now >= c.reconnectAt {
				c.startConnect(now)
			} else {
				next = math.Min(next, c.reconnectAt)
			}
		}
		c.flush()
		if c.takeDrop() {
			c.drop(now)
			continue
		}
		d := next - nowMs()
		if len(c.leases) > 0 && d > clockStepMs {
			d = clockStepMs // a suspend is noticed this late
		}
		if d > 3600e3 {
			d = 3600e3
		}
		if d < 1 {
			d = 1
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(time.Duration(d * float64(time.Millisecond)))
		select {
		case <-c.stop:
			c.shutdown()
			return
		case f := <-c.calls:
			f()
		case m := <-c.inbox:
			c.handle(m, nowMs())
		case <-timer.C:
		}
	}
}

func (c *Client) handle(m inMsg, now float64) {
	if m.dial {
		if m.gen != c.gen || c.state != stConnecting {
			if m.raw != nil {
				m.raw.Close()
			}
			return
		}
		if m.err != nil {
			c.connectFailed(now, m.err.Error(), m.fatal())
			return
		}
		c.raw = m.raw
		c.w = &writer{conn: m.conn, timeout: c.cfg.serverTimeout, wake: make(chan struct{}, 1), stop: make(chan struct{})}
		c.wg.Add(2)
		go c.reader(c.gen, m.conn)
		go c.writeLoop(c.gen, c.w)
		c.connected(now)
		return
	}
	if m.gen != c.gen || c.state != stUp {
		return
	}
	if m.err != nil {
		if c.sessionOK || c.lastError == "" {
			c.lastError = c.here() + ": " + m.err.Error()
		}
		c.drop(now)
		return
	}
	if !c.lineIn(m.line, now) {
		c.drop(now)
	}
}

// fatal: a TLS failure of the first connection to the only server (its
// certificate is not trusted, or it refused ours) ends Dial at once.
func (m inMsg) fatal() bool {
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(m.err, &ua) || errors.As(m.err, &he) || errors.As(m.err, &ci)
}

func (c *Client) startConnect(now float64) {
	c.state = stConnecting
	c.gen++
	a := c.addrs[c.addrI]
	timeout := c.connectTimeoutMs()
	if !c.ready && c.naddrs > 1 {
		timeout /= float64(c.naddrs)
	}
	c.wg.Add(1)
	go c.dial(c.gen, a, time.Duration(timeout*float64(time.Millisecond)))
}

func (c *Client) dial(gen int, a address, timeout time.Duration) {
	defer c.wg.Done()
	ctx, cancel := context.WithTimeout(c.dialCtx, timeout)
	defer cancel()
	var d net.Dialer
	nw, addr := a.network()
	raw, err := d.DialContext(ctx, nw, addr)
	conn := raw
	if err == nil {
		if cfg := c.cfg.tlsFor(a); cfg != nil {
			tc := tls.Client(raw, cfg)
			if err = tc.HandshakeContext(ctx); err != nil {
				raw.Close()
				raw, conn = nil, nil
				err = fmt.Errorf("TLS: %w", err)
			} else {
				conn = tc
			}
		}
	}
	select {
	case c.inbox <- inMsg{gen: gen, dial: true, conn: conn, raw: raw, err: err}:
	case <-c.quit:
		if raw != nil {
			raw.Close()
		}
	}
}

func (c *Client) reader(gen int, conn net.Conn) {
	defer c.wg.Done()
	buf := make([]byte, 0, 4096)
	tmp := make([]byte, 32768)
	for {
		// The bytes a Read returns come first, then its error: a TLS
		// connection returns the last bytes (* BYE not-active) together
		// with io.EOF after the server's close_notify.
		n, err := conn.Read(tmp)
		buf = append(buf, tmp[:n]...)
		start := 0
		for {
			i := indexLF(buf[start:])
			if i < 0 {
				break
			}
			s := buf[start : start+i]
			if len(s) > 0 && s[len(s)-1] == '\r' {
				s = s[:len(s)-1]
			}
			m := inMsg{gen: gen, line: string(s)}
			start += i + 1
			select {
			case c.inbox <- m:
			case <-c.quit:
				return
			}
		}
		// keep the partial line at the start of buf (rewound: the array
		// is reused, not grown from a moving start)
		buf = buf[:copy(buf, buf[start:])]
		if err == nil && len(buf) > replyLineMax {
			err = errors.New("a line longer than the protocol allows")
		}
		if err != nil {
			select {
			case c.inbox <- inMsg{gen: gen, err: err}:
			case <-c.quit:
			}
			return
		}
	}
}

// writeLoop writes what the manager hands to w until the connection is
// dropped; a failed write (or one blocked for ServerTimeout: the server
// does not read) is reported as the connection's error.
func (c *Client) writeLoop(gen int, w *writer) {
	defer c.wg.Done()
	var out []byte
	for {
		select {
		case <-w.wake:
		case <-w.stop:
			return
		case <-c.quit:
			return
		}
		for {
			w.mu.Lock()
			out, w.buf = w.buf, out[:0]
			w.mu.Unlock()
			if len(out) == 0 {
				break
			}
			_ = w.conn.SetWriteDeadline(time.Now().Add(w.timeout))
			_, err := w.conn.Write(out)
			w.mu.Lock()
			w.unsent -= len(out)
			w.mu.Unlock()
			if err != nil {
				select {
				case c.inbox <- inMsg{gen: gen, err: fmt.Errorf("write: %w", err)}:
				case <-w.stop:
				case <-c.quit:
				}
				return
			}
		}
	}
}

func indexLF(b []byte) int {
	for i, x := range b {
		if x == '\n' {
			return i
		}
	}
	return -1
}

// flush hands what was formatted to the connection's writer; it never
// blocks. A request's deadline counts from its formatting (write), which
// is before it can reach the server.
func (c *Client) flush() {
	if len(c.out) == 0 {
		return
	}
	if c.w == nil || c.state != stUp {
		c.out = c.out[:0]
		return
	}
	n := c.w.enqueue(c.out)
	c.out = c.out[:0]
	if n > outMax {
		c.lastError = fmt.Sprintf("%s: the server does not read (%d bytes unsent)", c.here(), n)
		c.dropWanted = true
	}
}

// closeConn closes the current connection without blocking: the socket
// itself (a TLS close_notify could block on a server that does not
// read), which ends its reader and writer.
func (c *Client) closeConn() {
	if c.w != nil {
		close(c.w.stop)
		c.w = nil
	}
	if c.raw != nil {
		c.raw.Close()
		c.raw = nil
	}
}

func (c *Client) takeDrop() bool {
	d := c.dropWanted
	c.dropWanted = false
	return d && c.state == stUp
}

// drop closes the connection and decides the fate of what it carried.
func (c *Client) drop(now float64) {
	c.closeConn()
	c.gen++
	c.connectionLost(now)
}

func (c *Client) here() string {
	return c.addrs[c.addrI].name
}

func (c *Client) shutdown() {
	c.closing = true
	err := newErr(ErrClosed, "the client is closed")
	if c.bodyReq != nil {
		c.finish(c.bodyReq, err, nil)
		c.bodyReq = nil
	}
	for _, q := range c.fifo {
		c.finish(q, err, nil)
	}
	for _, q := range c.waiting {
		c.finish(q, err, nil)
	}
	for _, q := range c.unsent {
		c.finish(q, err, nil)
	}
	c.fifo, c.unsent, c.waiting = nil, nil, map[string]*req{}
	c.state = stDead
	for _, l := range c.leases {
		if l.lostM == NotLost && !l.released {
			c.lose(l, LostClosed, "")
		}
	}
	for _, w := range c.watches {
		w.close()
	}
	c.watches = nil
	c.closeConn()
	c.cancel()
	close(c.quit)
}

func (c *Client) signalReady() {
	c.readyOnce.Do(func() { close(c.readyCh) })
}

func (c *Client) setKey(k string) {
	c.key = k
	c.pubMu.Lock()
	c.pubKey = k
	c.pubMu.Unlock()
}

func (c *Client) setCluster(id, from string) {
	c.cluster, c.clusterFrom = id, from
	c.pubMu.Lock()
	c.pubCluster = id
	c.pubMu.Unlock()
}

// describe is the words of the describing HELLO (host, pid, program).
func (c *Client) describeLine() *line {
	l := newLine("HELLO")
	if h, err := os.Hostname(); err == nil {
		l.kv("host", descEncode(h, descHostMax))
	}
	l.kv("pid", strconv.Itoa(os.Getpid()))
	if len(os.Args) > 0 {
		l.kv("cmd", descEncode(filepath.Base(os.Args[0]), descCmdMax))
	}
	return l
}

// contended: the server said that n requests wait for lease l (* WAITING):
// the lease says n from now on, and OnContended is told, on its own
// goroutine (once for news that comes while a call for l is pending).
// The manager never waits for OnContended.
func (c *Client) contended(l *Lease, n int) {
	l.mu.Lock()
	l.waiters = n
	tell := c.newsWake != nil && !l.newsPending
	l.newsPending = l.newsPending || tell
	l.mu.Unlock()
	if !tell {
		return
	}
	c.newsMu.Lock()
	c.news = append(c.news, l)
	c.newsMu.Unlock()
	select {
	case c.newsWake <- struct{}{}:
	default:
	}
}

// tellContended is the goroutine that calls OnContended, one call at a
// time, with the latest count of each lease that has news, until the
// client is closed.
func (c *Client) tellContended() {
	defer c.wg.Done()
	for {
		select {
		case <-c.newsWake:
		case <-c.quit:
			return
		}
		for {
			select {
			case <-c.quit:
				return
			default:
			}
			c.newsMu.Lock()
			if len(c.news) == 0 {
				c.newsMu.Unlock()
				break
			}
			l := c.news[0]
			c.news[0] = nil
			c.news = c.news[1:]
			c.newsMu.Unlock()
			l.mu.Lock()
			n := l.waiters
			l.newsPending = false
			held := !l.ended && !l.lostLocked(nowMs())
			l.mu.Unlock()
			if held {
				c.cfg.onContended(l, n)
			}
		}
	}
}

// sortBySeq orders requests as they were written.
func sortBySeq(qs []*req) {
	sort.Slice(qs, func(i, j int) bool { return qs[i].seq < qs[j].seq })
}
