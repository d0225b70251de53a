// options.go: Dial's options and Lock's, and the DLOCK_* environment the
// dlock command and the Python client read (client/python/dlockd/_options.py).

package dlockd

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

const serversMax = 8

// address is one daemon: "host:port" as written in the servers list
// (which a standby's active= is matched against), or a unix socket path.
type address struct {
	name string // "host:port" as written, or the socket path
	host string
	port int
	path string
}

func (a address) network() (string, string) {
	if a.path != "" {
		return "unix", a.path
	}
	return "tcp", net.JoinHostPort(a.host, strconv.Itoa(a.port))
}

type config struct {
	addrs          []address
	password       string
	user           string
	owner, key     string
	cluster        string
	tls            *tls.Config
	tlsServerName  string
	connectTimeout time.Duration
	serverTimeout  time.Duration
	describe       bool
	lostGuard      time.Duration
	onContended    func(l *Lease, waiters int)
	err            error
}

// An Option configures Dial.
type Option func(*config)

// Owner sets the owner id said in HELLO ("id", or "id=key" as DLOCK_OWNER
// takes it). Default: DLOCK_OWNER, else a random id for the client's life.
// Clients that say one id with its key are one owner to the server.
func Owner(id string) Option {
	return func(c *config) {
		id, key, ok := strings.Cut(id, "=")
		c.owner = id
		if ok {
			c.key = key
		}
	}
}

// OwnerKey sets the secret that proves the owner id (16 to 64 letters,
// digits, - or _). Default: the one the server makes, presented on every
// reconnect (Client.OwnerKey tells it).
func OwnerKey(key string) Option { return func(c *config) { c.key = key } }

// User authenticates as a user of the server's users file (AUTH <user>
// <secret>); with user "" it sends the server's one password (AUTH
// <password>). Default: DLOCK_USER and DLOCK_SECRET or DLOCK_PASSWORD.
func User(name, password string) Option {
	return func(c *config) { c.user, c.password = name, password }
}

// TLS speaks TLS with this configuration (cloned; ServerName defaults to
// each server's host). Default: DLOCK_TLS, DLOCK_TLS_CA, DLOCK_TLS_CERT,
// DLOCK_TLS_KEY, DLOCK_TLS_SERVER_NAME. Not used on a unix socket.
func TLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// ConnectTimeout bounds Dial (and each attempt to connect): 2s by
// default. While no server answered yet, each of n servers gets 1/n of it.
func ConnectTimeout(d time.Duration) Option { return func(c *config) { c.connectTimeout = d } }

// ServerTimeout is how long a reply may take (5s by default; the wait
// of a LOCK in the server's queue is not counted): a later one fails the
// call with ErrTimeout.
func ServerTimeout(d time.Duration) Option { return func(c *config) { c.serverTimeout = d } }

// Cluster pins the cluster id (32 hex digits, HELLO's cluster=) every
// server must name. Default: DLOCK_CLUSTER, else the first a server names.
// Of a partitioned service (each partition a cluster of its own) it pins
// the first connection's; each partition's client holds to the first
// id its daemons name.
func Cluster(id string) Option { return func(c *config) { c.cluster = id } }

// Describe says (true, the default) or not who the client is: the host
// name, pid and program name, which the server shows with its leases.
func Describe(on bool) Option { return func(c *config) { c.describe = on } }

// LostGuard: a lease not confirmed until now + d is lost (Done closed).
// Default max(TTL/10, 20ms).
func LostGuard(d time.Duration) Option { return func(c *config) { c.lostGuard = d } }

// OnContended sets the function told that others wait for a lease that
// asked to be told (NotifyWaiters): waiters requests wait for its lock.
// The server says so when the lease is granted while some wait, then
// when a request queues behind it if the queue has doubled since the
// lease was last told or a second or more has passed (about log2(n)
// times for a queue that grows to n, plus once a second at most);
// nothing is said when the queue shrinks. It is for a holder that can
// let go early -- a cache written back, a batch stopped between items.
//
// f runs on a goroutine of the client's own, one call at a time, never
// on the one that handles the server's replies and events nor with any
// lock of the client held: it may call the client (Unlock the lease,
// say), and its time delays no renewal. News
// for a lease whose call has not run yet is not queued behind it: f is
// called once, with the latest count. It is not called for a lease
// unlocked or lost, nor once the client is closed. Close waits for a
// call running to return: f must not call Close. Lease.Waiters reads
// the latest count, for code that polls instead.
func OnContended(f func(l *Lease, waiters int)) Option {
	return func(c *config) { c.onContended = f }
}

func env(name string) string { return os.Getenv(name) }

// parseServers parses "host:port,host:port" (an IPv6 host in brackets; the
// port may be left out: 7420; an entry starting with '/' is a unix socket).
func parseServers(s string) ([]address, error) {
	entries := strings.Split(s, ",")
	if len(entries) > serversMax {
		return nil, newErr(ErrInvalid, fmt.Sprintf("bad servers list %q: 1 to %d host:port, comma-separated", s, serversMax))
	}
	var out []address
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			return nil, newErr(ErrInvalid, fmt.Sprintf("bad servers list %q: 1 to %d host:port, comma-separated", s, serversMax))
		}
		if strings.HasPrefix(e, "/") || strings.HasPrefix(e, "unix:") {
			p := strings.TrimPrefix(e, "unix:")
			out = append(out, address{name: p, path: p})
			continue
		}
		host, port := e, defaultPort
		if i := strings.LastIndexByte(e, ':'); i >= 0 && !strings.Contains(e[i:], "]") {
			p, err := strconv.Atoi(e[i+1:])
			if err != nil || p < 1 || p > 65535 {
				return nil, newErr(ErrInvalid, fmt.Sprintf("server %q: bad port (1-65535)", e))
			}
			host, port = e[:i], p
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if host == "" {
			return nil, newErr(ErrInvalid, fmt.Sprintf("bad server %q: host:port", e))
		}
		out = append(out, address{name: e, host: host, port: port})
	}
	return out, nil
}

// build makes the configuration: the environment first, then the options.
func build(servers string, opts []Option) (*config, error) {
	c := &config{connectTimeout: 2 * time.Second, serverTimeout: 5 * time.Second, describe: true}
	var err error
	switch {
	case servers != "":
		c.addrs, err = parseServers(servers)
	case env("DLOCK_SERVERS") != "":
		c.addrs, err = parseServers(env("DLOCK_SERVERS"))
	case env("DLOCK_SOCKET") != "":
		c.addrs = []address{{name: env("DLOCK_SOCKET"), path: env("DLOCK_SOCKET")}}
	default:
		h, p := env("DLOCK_HOST"), env("DLOCK_PORT")
		if h == "" {
			h = "127.0.0.1"
		}
		if p == "" {
			p = strconv.Itoa(defaultPort)
		}
		c.addrs, err = parseServers(net.JoinHostPort(h, p))
	}
	if err != nil {
		return nil, err
	}
	c.password = env("DLOCK_SECRET")
	if c.password == "" {
		c.password = env("DLOCK_PASSWORD")
	}
	c.user = env("DLOCK_USER")
	if o := env("DLOCK_OWNER"); o != "" {
		Owner(o)(c)
	}
	c.cluster = env("DLOCK_CLUSTER")
	if err := envTLS(c); err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(c)
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.user != "" {
		if err := checkUser(c.user); err != nil {
			return nil, err
		}
	}
	if c.password != "" && (!printableWord(c.password) || len(c.password) > 512) {
		return nil, newErr(ErrInvalid, "bad password: 1-512 printable ASCII characters, no space")
	}
	if c.owner != "" {
		if err := checkOwner(c.owner); err != nil {
			return nil, err
		}
	}
	if c.key != "" {
		if err := checkKey(c.key); err != nil {
			return nil, err
		}
	}
	if c.cluster != "" {
		if err := checkCluster(c.cluster); err != nil {
			return nil, err
		}
	}
	if c.connectTimeout <= 0 {
		c.connectTimeout = 2 * time.Second
	}
	if c.serverTimeout <= 0 {
		c.serverTimeout = 5 * time.Second
	}
	return c, nil
}

func envTLS(c *config) error {
	on := env("DLOCK_TLS") != "" && env("DLOCK_TLS") != "0"
	ca, cert, key := env("DLOCK_TLS_CA"), env("DLOCK_TLS_CERT"), env("DLOCK_TLS_KEY")
	c.tlsServerName = env("DLOCK_TLS_SERVER_NAME")
	if !on && ca == "" && cert == "" && key == "" {
		return nil
	}
	if (cert == "") != (key == "") {
		return newErr(ErrInvalid, "DLOCK_TLS_CERT and DLOCK_TLS_KEY go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("dlockd: DLOCK_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("dlockd: DLOCK_TLS_CA %s: no certificate", ca)
		}
		cfg.RootCAs = pool
	}
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("dlockd: DLOCK_TLS_CERT/KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	c.tls = cfg
	return nil
}

// tlsFor is the TLS configuration for one server (nil: plaintext).
func (c *config) tlsFor(a address) *tls.Config {
	if c.tls == nil || a.path != "" {
		return nil
	}
	cfg := c.tls.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = c.tlsServerName
	}
	if cfg.ServerName == "" {
		cfg.ServerName = a.host
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	return cfg
}

type lockConfig struct {
	ttl    time.Duration
	wait   time.Duration
	hasTTL bool
	waitOK bool
	shared bool
	limit  int
	renew  bool
	notify bool
	value  string // as sent (descEncode); "": none
	err    error
}

// A LockOption configures Lock and TryLock (and LockAll, TryLockAll:
// TTL, Wait and NoRenew only).
type LockOption func(*lockConfig)

// TTL is the lease's length (default: the server's, 30s).
func TTL(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d <= 0 {
			c.err = newErr(ErrInvalid, fmt.Sprintf("TTL(%v): must be positive", d))
		}
		c.ttl, c.hasTTL = d, true
	}
}

// Wait bounds the wait in the server's queue (default: until granted or
// the context is done; 0: try once, as TryLock).
func Wait(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d < 0 {
			d = 0
		}
		c.wait, c.waitOK = d, true
	}
}

// Shared takes the lock with other shared holders (a reader).
func Shared() LockOption { return func(c *lockConfig) { c.shared = true } }

// Limit takes the lock as one of n permits (a semaphore, 2 <= n <= 1024;
// another n fails with ErrInvalid: a lock of one permit is Lock without
// Limit).
// The limit belongs to the lock: while it is held with another limit,
// Lock fails with ErrLimitMismatch.
func Limit(n int) LockOption {
	return func(c *lockConfig) {
		if n < 2 || n > limitMax {
			c.err = newErr(ErrInvalid, fmt.Sprintf("Limit(%d): 2 to %d", n, limitMax))
		}
		c.limit = n
	}
}

// NotifyWaiters asks the server to tell the client when others wait
// for the lease (LOCK notify=waiters): OnContended is called and
// Lease.Waiters says how many. The request goes with the lease: a lease
// restored after a daemon's restart or a take-over is told again. A
// server before 0.4.0 refuses it (ErrServer, code BAD_ARG).
func NotifyWaiters() LockOption { return func(c *lockConfig) { c.notify = true } }

// Value is what the lease says to whoever looks at the lock (LOCK
// value=): an elected leader's address, say. It is how an election is
// held on a lock: candidates Lock its name with their Value, the holder
// is the leader and its Token the term; followers read it with Status
// and Watch (see Lease.Proclaim). It is sent as a text value: printable
// ASCII kept, a space or '%' as %20 or %25, any other byte as '?', cut
// at 128 bytes as sent (never inside an escape); Status and Watch give
// it back decoded. A waiter's value waits with it and is the lease's
// once granted; the lease keeps it (a RECLAIM sends it again). "" is
// none. A server without elections refuses it (ErrServer, code BAD_ARG).
func Value(v string) LockOption {
	return func(c *lockConfig) { c.value = descEncode(v, valueMax) }
}

// NoRenew leaves the lease to run out at its TTL unless Refresh is called
// (by default it is renewed in the background every TTL/3).
func NoRenew() LockOption { return func(c *lockConfig) { c.renew = false } }

// durMs is a duration in whole milliseconds for the wire (at least 1).
func durMs(d time.Duration) int64 {
	m := int64((d + time.Millisecond - 1) / time.Millisecond)
	if m < 1 {
		m = 1
	}
	if m > durationMaxMs {
		m = durationMaxMs
	}
	return m
}
