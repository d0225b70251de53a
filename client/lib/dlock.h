/* SPDX-License-Identifier: MIT */
/*
 * dlock.h -- libdlock, the C client of the dlockd lock server.
 *
 * A dlock_client is one connection to dlockd plus a background thread
 * that reads the server's lines, renews held leases and reconnects. Every
 * function is blocking and thread-safe: any number of threads may share
 * one client.
 *
 *     struct dlock_options o;
 *     dlock_client *c;
 *     dlock_lease *l;
 *
 *     dlock_options_init(&o);
 *     o.host = "10.0.0.5";
 *     if (dlock_connect(&o, &c) != 0) ...
 *     if (dlock_lock(c, "stock", 30000, DLOCK_WAIT_FOREVER, &l) == 0) {
 *             write_with_fence(dlock_lease_token(l));   // critical section
 *             dlock_unlock(c, l);                        // frees l
 *     }
 *     dlock_close(c);
 *
 * Leases. A lease handle stands for one hold of a lock: dlock_lock() and
 * dlock_trylock() create it, dlock_unlock() releases that hold and frees
 * the handle. While a lease is held the library refreshes it every TTL/3
 * (options.renew) and keeps a local deadline on CLOCK_BOOTTIME,
 * counted from the moment the request was sent, so the application never
 * believes in a lease longer than the server grants it. When the lease is
 * lost -- the server says so (* EXPIRED, NO NOT_HOLDER), or it cannot be
 * confirmed until at least now + options.lost_guard_ms -- the on_lost
 * callback is called, before the local deadline, and dlock_lease_valid()
 * turns false. The handle stays allocated until dlock_unlock().
 *
 * Who holds it. The client says who it is (HELLO host= pid= cmd=: its
 * host name, process id and command line, options.describe), and the
 * server shows that with each lease it holds: dlock_holders() returns it,
 * and after a dlock_trylock() that found the lock busy,
 * dlock_busy_holder() names the holder ("held by deploy-7 on web3 (pid
 * 4242, make deploy) for 3m12s").
 *
 * Reconnects. If the connection drops, the background thread reconnects
 * with backoff (options.reconnect), says AUTH and HELLO with the same
 * owner id and key and, once HELLO is answered (by a server of the
 * client's cluster: options.cluster), refreshes the leases
 * still within their local deadline and sends again the LOCKs still
 * waiting (a daemon that restarted gives a waiter back its place in the
 * queue). Calls made while disconnected wait for the reconnect up to their
 * timeout. A server that forgot the owner (it held nothing through a
 * restart or take-over) may have given its id to another client since:
 * HELLO is then refused, and the client tries again after the reconnect
 * pause, sending nothing on that connection, until the id is free.
 *
 * Leases of other processes. dlock_unlock_token() and dlock_refresh_token()
 * act on a lease of the client's owner id by (name, token), without a
 * handle: one that another process with the same owner id took.
 *
 * Partitions. A dlockd service may split its lock names into partitions,
 * each its own cluster of daemons (PROTOCOL.md, Partitions). The client
 * finds out when it first connects (MAP), and then routes: each call
 * about a name goes to the daemons of the name's partition, through a
 * client of its own (a *leg*: connected on first use, with the same
 * options, owner id and key), and follows the service when the map
 * changes. See "partitions" below. Against a daemon that is not
 * partitioned, nothing changes.
 *
 * Errors are negative DLOCK_E* codes; dlock_strerror() describes them, and
 * dlock_last_error() gives the server's text of the last ERR reply seen by
 * the calling thread, or why dlock_connect() could not connect.
 */
#ifndef DLOCK_H
#define DLOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* libdlock.so exports what this header declares and nothing else. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define DLOCK_VERSION "0.4.0"

/* ---- errors -------------------------------------------------------------- */

enum {
	DLOCK_OK = 0,
	DLOCK_EBUSY = -1,	 /* TRYLOCK: held by another owner */
	DLOCK_ETIMEDOUT = -2,	 /* the wait ran out (* TIMEOUT), or no reply
				    within request_timeout_ms */
	DLOCK_ENOTHOLDER = -3,	 /* UNLOCK/REFRESH: not this owner's lease */
	DLOCK_ESTALE = -4,	 /* CHECK: the token does not hold the lock */
	DLOCK_ELOST = -5,	 /* the lease was lost before the call */
	DLOCK_ECONNECT = -6,	 /* cannot connect; dlock_last_error() says
				    why: "connection refused", "cannot
				    resolve the host name: ...", "accepted
				    the connection but did not answer in
				    time", "a standby (the active: h:p)"...
				    (with options.servers, "h:p: <why>" for
				    each server, joined by "; ") */
	DLOCK_ECLOSED = -7,	 /* the connection closed and could not be
				    re-established in time */
	DLOCK_EAUTH = -8,	 /* AUTH failed, or required and missing */
	DLOCK_EUNAVAILABLE = -9, /* server: persistence down, try later */
	DLOCK_ELIMIT = -10,	 /* server: a limit was reached */
	DLOCK_EINVAL = -11,	 /* bad argument (also server BAD_ARG) */
	DLOCK_EPROTO = -12,	 /* the server said something unexpected */
	DLOCK_ENOMEM = -13,
	DLOCK_ESERVER = -14,	  /* any other ERR from the server */
	DLOCK_ECANCELED = -15,	  /* the client is closing */
	DLOCK_EMISMATCH = -16,	  /* the lock lives with another limit (NO
				     LIMIT_MISMATCH; dlock_last_error() names
				     the lock's) */
	DLOCK_EDEADLK = -17,	  /* exclusive asked by a shared holder: it
				     would wait for itself (NO
				     UPGRADE_DEADLOCK) */
	DLOCK_ETLS = -18,	  /* TLS failed: the server's certificate is
				     not trusted or does not carry its name,
				     it refused ours, a TLS file does not load,
				     a bad record; dlock_last_error() says
				     which (dlock_connect only: later, a
				     broken connection is made again) */
	DLOCK_EDENIED = -19,	  /* the user may not do that on that name (NO
				     DENIED; dlock_last_error() says which
				     right it needs) */
	DLOCK_ECYCLE = -20,	  /* waiting would close a cycle of owners that
				     wait for each other, a deadlock (NO
				     DEADLOCK; nothing changed, nothing
				     waits): dlock_last_error() names the
				     cycle, see PROTOCOL.md */
	DLOCK_EHELDBYOWNER = -21, /* held by this owner id in another
				     process (a client sharing the id and
				     key): not granted (options.owner) */
	DLOCK_ECLUSTER = -22,	  /* no server reached is of the client's
				     cluster: their HELLO names another
				     cluster id than the one the client met
				     first (or options.cluster); nothing was
				     sent to them. dlock_last_error() names
				     both: check the daemons' Redis URL, db
				     and prefix */
	DLOCK_EMOVED = -23,	  /* a partitioned service (see Partitions)
				     sent the call on to another partition
				     more than 3 times (the map keeps
				     changing), or the partition a name
				     moved to did not serve it within the
				     request timeout: nothing was done;
				     dlock_last_error() is the last NO MOVED.
				     Try again */
};

const char *dlock_strerror(int err);
/* The text of the ERR/NO line the calling thread's last call received,
 * or why its dlock_connect() failed (DLOCK_ECONNECT, DLOCK_ETLS), or ""
 * (the call succeeded, failed on the client side, or got no such line):
 * every call clears it first. */
const char *dlock_last_error(void);

/* ---- options ------------------------------------------------------------- */

typedef struct dlock_client dlock_client;
typedef struct dlock_lease dlock_lease;

/* Why a lease was lost. */
enum dlock_lost_reason {
	DLOCK_LOST_EXPIRED = 1,	    /* the server reaped it (* EXPIRED) */
	DLOCK_LOST_REJECTED = 2,    /* a refresh was answered NO NOT_HOLDER */
	DLOCK_LOST_UNCONFIRMED = 3, /* no confirmation in time (server or
				       network unreachable) */
};

/*
 * Called on the library's thread when a lease is lost, at most once per
 * lease, before its local deadline. `c` is the client the application
 * made (also when a partition's connection holds the lease). It must return
 * quickly and must not call libdlock functions on the same client (signal the
 * application instead: set a flag, write to a pipe, kill a child process).
 * `lease` stays valid until the application calls dlock_unlock() on it.
 */
typedef void (*dlock_lost_cb)(dlock_client *c, const dlock_lease *lease,
			      enum dlock_lost_reason why, void *arg);

/* What a client says of itself (dlock_options.describe). */
enum dlock_describe {
	DLOCK_DESCRIBE_NONE = 0, /* nothing */
	DLOCK_DESCRIBE_NAME = 1, /* host, pid, the program's name */
	DLOCK_DESCRIBE_FULL = 2	 /* host, pid, the whole command line */
};

/*
 * Called on the library's thread when a lease is at risk while it still
 * has time: its renewal has not been confirmed by half its TTL (the
 * server or the network is slow or gone, or a renewal was refused as
 * UNAVAILABLE), or the server sent * EXPIRING for it (the lease's
 * warning, dlock_lock_options.warn_ms: it was not refreshed in time,
 * e.g. with renewal off). At most once until the lease is confirmed
 * again, and always before on_lost for the same handle; it may be
 * followed by a confirmation (nothing lost) or by on_lost. The same rules
 * as on_lost: return quickly, no libdlock calls on the same client;
 * `arg` is options.arg.
 */
typedef void (*dlock_at_risk_cb)(dlock_client *c, const dlock_lease *lease,
				 void *arg);

/*
 * Called on the library's thread when the server says that others wait
 * for a lease that asked to be told (dlock_lock_options.notify_waiters):
 * `waiters` requests are queued for its lock. Sent once the lease is
 * granted if some wait, then as the queue doubles or a second later (the
 * server's pace, LOCK notify=waiters in PROTOCOL.md): a holder that can
 * let go early -- a cache written back, a batch stopped between items --
 * does so. Nothing is said when the queue shrinks. The same rules as
 * on_lost: return quickly, no libdlock calls on the same client; `arg`
 * is options.arg. dlock_lease_waiters() reads the last count from any
 * thread, for a holder that polls rather than be called.
 */
typedef void (*dlock_contended_cb)(dlock_client *c, const dlock_lease *lease,
				   uint32_t waiters, void *arg);

struct dlock_options {
	const char *host;      /* "127.0.0.1" */
	int port;	       /* 7420 */
	const char *unix_path; /* used instead of host/port when set */
	/*
	 * servers: "host:port,host:port,..." (at most DLOCK_SERVERS_MAX),
	 * used instead of host/port/unix_path when set: the dlockd daemons
	 * of one cluster, an active one and its standbys. The client
	 * connects to the first that answers; a standby's HELLO (role=
	 * standby) or ERR NOT_ACTIVE sends it to the active the standby
	 * names (or to the next server), and a * BYE not-active too. Over a
	 * fail-over it reconnects as over any drop (same owner id, leases
	 * confirmed, waits sent again); requests a standby refused were not
	 * executed and are sent again whatever they were. dlock_connect()
	 * rides through a take-over in progress (the standbys name an active
	 * that does not answer, or no server answers): it asks again after
	 * pauses, 100 ms doubling up to 500 ms, until connect_timeout_ms.
	 */
	const char *servers;
	const char *password; /* NULL: no AUTH; with `user`, its secret */
	/*
	 * owner: the owner id said in HELLO (the string is copied). NULL:
	 * a random one, fixed for the client's life and never shared.
	 *
	 * The server knows holders by owner id, not by connection: all
	 * connections that say one id (with its key, owner_key) are ONE
	 * holder. A LOCK of a name that id holds is granted at once as a
	 * reentry (same token, one more hold), whichever client or process
	 * sends it, and any of them may UNLOCK or REFRESH the lease. That is
	 * what lets a client keep its leases over a reconnect, and
	 * dlock_unlock_token() reach a lease another process took.
	 *
	 * Clients of one id still exclude each other. A grant says how many
	 * holds its lease has (holds=, PROTOCOL.md); one with more than
	 * this client's own and the new one is a lease that another client
	 * of the id holds -- another process that shares the id and key,
	 * or a lease an earlier user left at the server (a `dlock lock`, a
	 * client closed without unlocking). The library gives that one hold
	 * back at once (a single UNLOCK) and the acquire fails with
	 * DLOCK_EHELDBYOWNER, whatever its wait: the server never queues an
	 * owner behind itself, so asking again would only be granted again.
	 * Threads of one client are not affected: they exclude each other
	 * locally, and the thread that holds a lease re-enters it as before.
	 * A server of 0.3.0 or older sends no holds=: with it, clients of
	 * one id do not exclude each other.
	 *
	 * Reconnects. A LOCK whose reply was lost with the connection is
	 * sent again; if the first one had been granted, the second is
	 * granted as a reentry of a hold that no handle stands for, which
	 * the library cannot tell from another process's: it is refused as
	 * above, and the lost hold ends at its TTL. (A server without
	 * holds= does not say; then the library takes the grant, and when
	 * the UNLOCK of a lease's last handle is answered HELD -- no handle
	 * of the lease left, no thread of the client acquiring its name --
	 * sends UNLOCK again until RELEASED or NOT_HOLDER; the clean-up of a
	 * grant nobody wanted does the same, unless holds= said the lease
	 * was another client's too: then it gives back exactly one hold.)
	 */
	const char *owner;
	int connect_timeout_ms; /* 2000; with `servers`, a server that
				   accepts and never answers (stopped,
				   hung) is given up after its share of
				   it, for the next */
	int request_timeout_ms; /* 5000: a reply later than this is
				   DLOCK_ETIMEDOUT (the lock wait itself is
				   not counted), and with more than one
				   server the server is left: the
				   connection is dropped and the next
				   server of the list tried (a stopped or
				   hung active fails over as a dead one) */
	int reconnect;		/* 1: reconnect after a drop (backoff up to
				   1 s); 0: fail with DLOCK_ECLOSED */
	int renew;		/* 1: refresh held leases every TTL/3 */
	int lost_guard_ms;	/* 0: max(TTL/10, 20 ms). A lease not
				   confirmed until now + this is lost */
	dlock_lost_cb on_lost;	/* NULL: none */
	void *arg;		/* passed to on_lost and on_at_risk */
	/*
	 * TLS. A dlockd with a certificate speaks only TLS on its TCP port
	 * (its unix socket never does: with unix_path these are ignored).
	 * The server's certificate is verified: its chain against tls_ca
	 * (NULL: the system's CA store), and its name against the host
	 * connected to -- options.host, or each options.servers entry's
	 * host -- or tls_server_name when set (it is also the name sent in
	 * SNI). A host given as an IP address must be in the certificate's
	 * IP subject alternative names, a DNS name in its DNS names. Any
	 * failure ends dlock_connect() with DLOCK_ETLS, and a reconnect that
	 * fails it is tried again later like a server that does not answer.
	 * TLS 1.2 at least. The files are read once, by dlock_connect():
	 * reconnects use what was read then.
	 */
	int tls;	      /* 1: TLS (implied by tls_ca or tls_cert) */
	const char *tls_ca;   /* PEM file of the CAs to trust, or NULL */
	const char *tls_cert; /* PEM client certificate (chain), with */
	const char *tls_key;  /* its key: for a daemon that asks for one */
	const char *tls_server_name; /* the name to verify instead of the
					host's, or NULL */
	int tls_no_verify; /* 1: no verification at all -- anyone on the
			      path can then read and change the traffic;
			      for tests only */
	/*
	 * user: a user of the server's users file. NULL: AUTH <password>
	 * (the server's one password), or nothing. Set: AUTH <user>
	 * <password>, the password being the user's secret (dlockd
	 * --new-secret made it); with no password, no AUTH is sent (the
	 * server knows the user by its uid on a unix socket, or by its
	 * client certificate's name under TLS). Owner ids live inside
	 * their user: the same owner id under two users is two owners.
	 */
	const char *user;
	/*
	 * owner_key: the secret that proves this client is `owner` (the
	 * server binds an owner id to a secret while the owner holds or waits
	 * for anything, or has a client; PROTOCOL.md, Identity). NULL: the
	 * server makes one when the owner is new, and the client presents it
	 * on every reconnect and fail-over; dlock_owner_key() tells it, for
	 * another process that must act on the owner's leases (a shell script
	 * that locks in one command and unlocks in another). Given: the owner
	 * is proven with it (16 to 64 letters, digits, - or _: choose a long
	 * random one). A client whose owner id is bound to another secret --
	 * another client uses that id -- fails to connect with DLOCK_EDENIED
	 * (and, on a reconnect, waits for the id: see Reconnects): two
	 * clients that do not share the secret never act as one owner.
	 */
	const char *owner_key;
	/*
	 * standby_ok: 1 keeps the client with the daemon it reached even if
	 * that daemon is a standby, for a health check that asks one daemon
	 * directly: a standby answers dlock_ping() and dlock_stats() (its
	 * role_active is 0), dlock_server_role() says "standby", and
	 * anything about locks fails with DLOCK_EUNAVAILABLE ("ERR
	 * NOT_ACTIVE active=<host:port> ..." in dlock_last_error()). 0 (the
	 * default): only the active daemon will do (servers, above).
	 */
	int standby_ok;
	/*
	 * describe: DLOCK_DESCRIBE_NAME (1, the default): after HELLO, the
	 * client says who it is -- host, pid and the program's name -- and
	 * the server shows it with each lease the client takes (STATUS,
	 * HOLDERS, LOCKS, and to whoever finds the lock busy), to every
	 * user who may read the lock. DLOCK_DESCRIBE_FULL (2): the whole
	 * command line instead of the name. DLOCK_DESCRIBE_NONE (0):
	 * nothing is said.
	 *
	 * desc_host: NULL: gethostname(). desc_pid: 0: getpid().
	 * desc_cmd: NULL: the program's name (program_invocation_short_name)
	 * or, with DLOCK_DESCRIBE_FULL, the command line (/proc/self/cmdline,
	 * its words joined by spaces). The texts are sent as the protocol
	 * takes them (proto/desc.h): a byte that is not printable ASCII
	 * becomes '?', a space or '%' an escape of 3 bytes, and they are cut
	 * to 64 (host) and 128 (cmd) bytes so counted. "" leaves that part
	 * out.
	 *
	 * A command line can carry what others should not read (a password
	 * given as an argument): every user who may read the lock sees it,
	 * and Redis keeps it with the lease. Ask for DLOCK_DESCRIBE_FULL
	 * only for programs whose arguments say nothing secret. A server
	 * that does not know descriptions (dlockd 0.3) refuses them, and the
	 * client goes on without: nothing fails.
	 */
	int describe; /* DLOCK_DESCRIBE_* */
	const char *desc_host;
	const char *desc_cmd;
	int desc_pid;
	dlock_at_risk_cb on_at_risk; /* NULL: none */
	/*
	 * cluster: the cluster id (32 hex digits, HELLO's cluster=) every
	 * server must name, or NULL: the first id a server names is the
	 * client's for its life. Daemons on different Redis keyspaces (a
	 * typo in one node's URL, db or prefix) are different clusters,
	 * whose lock tables know nothing of each other: a server that
	 * names another id is disconnected before any request is sent to
	 * it, and the next one is tried (DLOCK_ECLUSTER when none
	 * matches). A server that names no id (0.3 and before, or a standby
	 * that has not read it yet) is not refused. Without this option,
	 * the server the id was learnt from that names a new one (it
	 * restarted memory-only, or on another keyspace) gives the client
	 * its new id: there is no other table to fail over to, and the
	 * leases it does not know are refused there (on_lost, REJECTED).
	 * Each partition of a partitioned service is a cluster of its own:
	 * the option holds the first connection only, and each partition's
	 * connection holds to the first id its servers name.
	 */
	const char *cluster;
	dlock_contended_cb on_contended; /* NULL: none */
};

#define DLOCK_SERVERS_MAX 8

/* Fill o with the defaults above. The strings are borrowed only during
 * dlock_connect() (the client copies them, and reads the TLS files, and
 * makes its description). */
void dlock_options_init(struct dlock_options *o);

/* ---- the client ---------------------------------------------------------- */

/* Connect, AUTH, HELLO owner=...; start the background thread. On success
 * *out is a client to free with dlock_close(). */
int dlock_connect(const struct dlock_options *o, dlock_client **out);

/* Stop renewing, close the connection (and each partition's: see
 * Partitions), join the thread, free the client.
 * Leases still held are not released (they expire at the server); their
 * handles are freed: the application must not use them afterwards.
 * dlock_close(NULL) is a no-op. Not to be called from on_lost. */
void dlock_close(dlock_client *c);

/* Of a partitioned service (Partitions), these four and dlock_ping(),
 * dlock_stats(), dlock_locks() and dlock_watch() of a prefix are about
 * the client's first connection: one partition's daemon. */
/* The owner id (valid for the client's life). */
const char *dlock_owner(const dlock_client *c);
/* The secret that proves it (options.owner_key, or the one the server
 * made): "" before the first connection succeeded, then valid for the
 * client's life. A secret: handle it as a password. */
const char *dlock_owner_key(const dlock_client *c);
/* The role the daemon gave in its last HELLO: "active", "standby" (only
 * with options.standby_ok), or "" (a daemon that says none). A static
 * string. */
const char *dlock_server_role(const dlock_client *c);
/* The cluster id the client holds to (options.cluster, or the first a
 * server named): 32 hex digits, or "" while no server named one. */
const char *dlock_cluster(const dlock_client *c);

/* ---- locking ------------------------------------------------------------- */

#define DLOCK_WAIT_FOREVER (-1)

/* Acquire `name` with a lease of ttl_ms (0: the server's default), waiting
 * up to wait_ms (0: try once; DLOCK_WAIT_FOREVER). On success *out is a
 * lease handle owned by the caller, to give back with dlock_unlock(), and
 * it is valid: a grant whose reply comes too late to leave the lease any
 * time before its lost guard (a server that held it through a take-over)
 * is given back and asked for again while the wait lasts.
 * Errors: DLOCK_EBUSY (wait_ms 0), DLOCK_ETIMEDOUT (also: granted too
 * late, above), DLOCK_ECYCLE (the wait would deadlock: refused at once,
 * whatever wait_ms), DLOCK_EHELDBYOWNER (another process of this owner id
 * holds it: options.owner; at once, whatever the wait), DLOCK_ELIMIT,
 * DLOCK_EUNAVAILABLE, DLOCK_EINVAL, transport errors. */
int dlock_lock(dlock_client *c, const char *name, int64_t ttl_ms,
	       int64_t wait_ms, dlock_lease **out);
int dlock_trylock(dlock_client *c, const char *name, int64_t ttl_ms,
		  dlock_lease **out);

/*
 * Shared locks and semaphores: dlock_acquire() takes its options in a
 * struct (dlock_lock_options_init() fills the defaults, so fields added
 * later keep their default in old code).
 *
 *   mode   DLOCK_EXCLUSIVE: the only holder; DLOCK_SHARED: with up
 *          to 1023 other shared holders (one more waits). Strict FIFO
 *          across modes: a shared request behind a queued exclusive one
 *          waits.
 *   limit  0 or 1: a lock. n > 1: a semaphore, n holders at once, each
 *          with its own lease and token (mode must be exclusive). The
 *          lock's limit is set by the request that finds it free; while
 *          it is held or waited for, a request with another limit fails
 *          with DLOCK_EMISMATCH.
 *
 * Each holder has its own lease: its own token, TTL and renewal, as with
 * dlock_lock(). Asking again for a lock this owner holds is a reentry of
 * its lease, in the mode it holds (an exclusive holder asking shared
 * gets its exclusive lease again: there is no downgrade in place); a
 * shared holder asking exclusive fails with DLOCK_EDEADLK rather than
 * wait for itself. dlock_lock(c, n, ttl, wait, out) is dlock_acquire()
 * with an exclusive lock.
 *
 *   warn_ms  0: none. n: the server sends * EXPIRING when n ms of the
 *          lease remain unrefreshed (n below the TTL), and the client
 *          calls on_at_risk: for leases that renewal does not keep
 *          (options.renew off), or that must be known at risk early.
 *   delay_ms  0: none. n (at most 60000): the lock's lock-delay: after
 *          a lease of it ends without an unlock (it expired, e.g. its
 *          holder lost the server, or was broken), the server grants it
 *          to nobody for n ms, waiters keeping their place; an unlock
 *          frees it at once. Set by the request that finds the lock
 *          free, raised by later ones. Above 60000: DLOCK_EINVAL.
 *   notify_waiters  1: the server says when others wait for the lease
 *          (options.on_contended is called, dlock_lease_waiters() says
 *          how many), so that the holder can let go early.
 *
 * A LOCK whose reply a drop or a fail-over lost is sent again after the
 * reconnect; with a server of 0.4.0 or later it carries the acquire's
 * request id (LOCK req=, 64 random bits per dlock_acquire()), so that the
 * server gives it the grant it had, or its place in the queue, rather
 * than one more hold (which would fail it with DLOCK_EHELDBYOWNER while
 * the hold it lost kept the lock busy).
 */
/* The longest value a lease may say (dlock_lock_options.value), in bytes
 * as sent: a space or '%' takes three ("%20"). */
#define DLOCK_VALUE_MAX 128

enum dlock_mode { DLOCK_EXCLUSIVE = 0, DLOCK_SHARED = 1 };

struct dlock_lock_options {
	int64_t ttl_ms;	 /* 0: the server's default */
	int64_t wait_ms; /* DLOCK_WAIT_FOREVER (the default); 0: try once */
	enum dlock_mode mode;
	uint32_t limit;	    /* 0 or 1: a lock; n > 1: a semaphore of n */
	int64_t warn_ms;    /* 0: none; else below the TTL (LOCK warn=) */
	int64_t delay_ms;   /* 0: none; else the lock's lock-delay, at most
			       60000 (LOCK delay=) */
	int notify_waiters; /* 1: be told when others wait for the lease
			       (options.on_contended, dlock_lease_waiters;
			       LOCK notify=waiters) */
	const char *value;  /* NULL: none; else what the lease says to whoever
			       looks at the lock (an elected leader's
			       address): see Elections below */
};

void dlock_lock_options_init(struct dlock_lock_options *o);
int dlock_acquire(dlock_client *c, const char *name,
		  const struct dlock_lock_options *o, dlock_lease **out);

/*
 * Several locks at once. dlock_acquire_all() takes the n locks of
 * `names` in one request (LOCK a b c ...), all or none: on success out[i]
 * is the lease of names[i], for each i; on failure out[] is all NULL and
 * none is held. Each lock is taken exclusive, as by dlock_lock(), with
 * its own lease, token, TTL (o->ttl_ms, the same for all) and renewal:
 * ordinary leases, given back one by one with dlock_unlock(), or all
 * with dlock_release_all().
 *
 * The server takes the names in byte order (strcmp), each in its own
 * FIFO queue, holding those it has while it waits for the next -- so
 * that two multi-locks never wait for each other in a cycle -- for up to
 * o->wait_ms (0: try once, DLOCK_WAIT_FOREVER); while it waits, the
 * locks it took are held by this owner (dlock_status shows them) and
 * kept alive by the server, and they are given back if the wait fails,
 * runs out, is given up or the connection closes. The caller hears only
 * the end.
 *
 *   names  2 to DLOCK_MULTI_MAX distinct lock names (the request line
 *          is still at most 1024 bytes: DLOCK_EINVAL when they do not
 *          fit); one name is dlock_acquire() of an exclusive lock.
 *
 * Errors: DLOCK_EBUSY (wait 0: not all free), DLOCK_ETIMEDOUT (the wait
 * ran out), DLOCK_ECYCLE (a wait would close a cycle of owners, at once
 * or later: dlock_last_error() reads "NO DEADLOCK <name> <n> ..." as for
 * a single lock), DLOCK_EHELDBYOWNER (this owner holds one of the names
 * already: a multi-lock takes new leases only, it never re-enters),
 * DLOCK_ELOST (a lock it had taken was broken while it waited),
 * DLOCK_EMISMATCH (a name is a semaphore or shared), DLOCK_ELIMIT,
 * DLOCK_EUNAVAILABLE, DLOCK_EINVAL, transport errors. A failure the
 * server tells once the wait has begun (* FAILED) gives in
 * dlock_last_error() the line a single LOCK of the failing name would
 * have got.
 *
 * As dlock_acquire(): threads of one client exclude each other locally
 * (a thread waits, within its wait, while another holds or acquires one
 * of the names; and a client sends one multi-lock at a time, the
 * server's bound per connection); the request carries one request id
 * (req=, to a server of 0.4.0 or later) for all its leases, so that one
 * sent again after a drop or a fail-over gets back what it was granted;
 * a wait given up sends CANCEL of the first name in byte order, and a
 * grant that crosses it is given back.
 */
#define DLOCK_MULTI_MAX 64

struct dlock_lock_all_options {
	int64_t ttl_ms;	 /* 0: the server's default */
	int64_t wait_ms; /* DLOCK_WAIT_FOREVER (the default); 0: try once */
};

void dlock_lock_all_options_init(struct dlock_lock_all_options *o);
int dlock_acquire_all(dlock_client *c, const char *const names[], size_t n,
		      const struct dlock_lock_all_options *o,
		      dlock_lease *out[]);
/* dlock_unlock() each of the n handles (NULL ones are skipped), and set
 * each to NULL: all are freed, whatever the outcome. 0, or the first
 * error (dlock_last_error() says its text); the others are still given
 * back. */
int dlock_release_all(dlock_client *c, dlock_lease *leases[], size_t n);

/*
 * Elections. An election is a lock: candidates take it with
 * dlock_acquire() and lo.value set to what their followers should know
 * (an address), waiting as long as they are willing to stand; the holder
 * is the leader, its lease's token the term (strictly growing: give it to
 * what the leader writes to, which then refuses an older leader), and
 * its lease is its leadership -- renewed by the library, lost as any
 * lease is (on_lost, before another can be elected). Resigning is
 * dlock_unlock(). Followers read the leader with dlock_status() (owner,
 * token, value) and follow it with dlock_watch(): DLOCK_WATCH_GRANTED
 * names a new leader and its value, DLOCK_WATCH_VALUE a new value of the
 * same one, RELEASED, EXPIRED and BROKEN the end of a term.
 *
 * dlock_proclaim: the leader says a new value (REFRESH value=), which its
 * followers are told of; the lease is refreshed too. 0, DLOCK_ENOTHOLDER
 * (the lease is gone: no longer leader), DLOCK_ELOST, DLOCK_EINVAL (value
 * NULL or empty), transport errors. A value is sent as a text value:
 * printable ASCII, a space as %20, anything else as '?', cut at
 * DLOCK_VALUE_MAX bytes; followers get it decoded.
 */
int dlock_proclaim(dlock_client *c, dlock_lease *l, const char *value);

/* Release one hold and free the handle -- always, whatever the outcome,
 * like free(). 0 when the server released it (or one reentrant hold of
 * it), DLOCK_ENOTHOLDER if the lease was already gone, or a transport
 * error (the lease then simply expires at the server). NULL is a no-op.
 * A hold of a lease this client holds with other handles is given back
 * (0) even where the server does not know the lease (Redis forgot it):
 * the lease is then reclaimed with the holds left, or its other handles
 * are told it is lost (on_lost). */
int dlock_unlock(dlock_client *c, dlock_lease *l);

/* Refresh now, with a new TTL (0: the lease's TTL). DLOCK_ENOTHOLDER if
 * the server no longer has it (on_lost is called too). */
int dlock_refresh(dlock_client *c, dlock_lease *l, int64_t ttl_ms);

/* ---- leases by (name, token) --------------------------------------------- */

/*
 * These act on a lease of this client's owner id that the client has no
 * handle for: typically one that another process with the same owner id
 * (options.owner) took, as `dlock lock` does for `dlock unlock` and
 * `dlock refresh`. Each call sends one request and keeps no state: no
 * lease record or handle is made, the library does not renew the lease,
 * keeps no deadline for it and never calls on_lost for it. `name` is
 * borrowed for the call.
 *
 * A (name, token) for which this client holds lease handles (also lost
 * ones not yet given back with dlock_unlock(), or a last one being
 * unlocked) is refused with DLOCK_EINVAL, before anything is sent: use
 * dlock_unlock() and dlock_refresh() on the handles, which keep the
 * client's record of the lease true.
 */

/* UNLOCK name token: give back one hold. 0 on success, and *holds_left
 * (if not NULL) says what is left: 0 when that was the last hold and the
 * lease is released (RELEASED), else the reentrant holds still held
 * (HELD). DLOCK_ENOTHOLDER if this owner holds no lease of `name` with
 * that token (wrong owner or token, released, expired). DLOCK_EINVAL (bad
 * name, or a lease this client has handles for), DLOCK_EUNAVAILABLE, and
 * transport errors. The UNLOCK is never sent twice (a second one would
 * give back a second hold): after DLOCK_ETIMEDOUT or DLOCK_ECLOSED (the
 * connection dropped meanwhile) its outcome is unknown. */
int dlock_unlock_token(dlock_client *c, const char *name, uint64_t token,
		       uint32_t *holds_left);

/* REFRESH name token: the lease's deadline becomes now + ttl_ms (0: the
 * lease's last TTL, as the server keeps it). 0 on success, and
 * *granted_ttl_ms (if not NULL) is what remains of the lease as the server
 * answered: the TTL, less any time the reply waited for Redis.
 * DLOCK_ENOTHOLDER if this owner holds no such lease (a lease past its
 * deadline is gone). DLOCK_EINVAL (bad name or TTL, a TTL above the
 * server's max_ttl, or a lease this client has handles for),
 * DLOCK_EUNAVAILABLE, and transport errors. A REFRESH whose reply was lost
 * with the connection is sent again after the reconnect (twice is
 * harmless). */
int dlock_refresh_token(dlock_client *c, const char *name, uint64_t token,
			int64_t ttl_ms, int64_t *granted_ttl_ms);

/* ---- questions ----------------------------------------------------------- */

/* Ask the server whether `token` holds `name`: 0 (and *remaining_ms, if
 * not NULL) or DLOCK_ESTALE (and *current, if not NULL: the holder's
 * token, 0 if free). */
int dlock_check(dlock_client *c, const char *name, uint64_t token,
		int64_t *remaining_ms, uint64_t *current);

/* A lock as STATUS (and each line of LOCKS) describes it. token, ttl_ms,
 * count and owner are the first holder's. */
struct dlock_status {
	int held;
	uint64_t token;
	int64_t ttl_ms; /* remaining */
	uint32_t count; /* reentrant holds */
	uint32_t waiters;
	char owner[65];	  /* "" when free */
	char mode[12];	  /* "exclusive", "shared", "semaphore"; "" when free */
	uint32_t limit;	  /* holders at once: 1 for a lock, n: a semaphore */
	uint32_t holders; /* how many hold it now */
	int64_t delay_ms; /* the lock's lock-delay, 0 if none */
	int64_t delay_left_ms; /* what is left of it while it runs, else 0 */
	/* grants are closed for this long (Redis forgot leases that may
	 * still be held): a free lock admits nobody until then; 0: open */
	int64_t closed_ms;
	/* the first holder's value (LOCK value=: an elected leader's),
	 * decoded; "" when none */
	char value[DLOCK_VALUE_MAX + 1];
};
int dlock_status(dlock_client *c, const char *name, struct dlock_status *st);

/* One holder or waiter of a lock (HOLDERS). */
struct dlock_holder {
	int waiter;	   /* 0: a holder */
	int shared;	   /* its mode */
	int restored;	   /* a waiter restored from Redis, not yet back */
	const char *owner; /* lives for the callback */
	uint64_t token;	   /* holder */
	int64_t ttl_ms;	   /* holder: what remains of its lease */
	uint32_t count;	   /* holder: reentrant holds */
	uint32_t position; /* waiter: 1 = next */
	int64_t wait_ms;   /* waiter: what remains of its wait, -1 forever */
	/* who it is, as its client described itself (options.describe),
	 * decoded: printable ASCII, "" / 0 when not said. These live as long
	 * as `owner`. */
	const char *host;
	uint32_t pid;
	const char *cmd;
	int64_t held_ms;   /* holder: how long it has held; -1: not said (a
			      server before descriptions) */
	const char *user;  /* the owner's user (users file), "" if none */
	const char *value; /* holder: its lease's value, decoded ("" none) */
};

/* Every holder of `name` in grant order, then every waiter in queue order
 * (at most 1000 of each: *more, if not NULL, counts those left out): cb is
 * called once each, on the calling thread. *st (if not NULL) receives the
 * lock's status (mode, limit, counts). A free lock calls cb never. */
int dlock_holders(dlock_client *c, const char *name,
		  void (*cb)(const struct dlock_holder *h, void *arg),
		  void *arg, struct dlock_status *st, uint64_t *more);

/*
 * Who holds the lock that the calling thread's last call found busy
 * (dlock_trylock(), dlock_lock() or dlock_acquire() returned DLOCK_EBUSY):
 * the server's NO BUSY names the first holder, and this fills *h with it
 * -- owner, user, held_ms, and its description -- and ttl_ms with the ms
 * until the first holder in the way is due to leave. The strings live in
 * the thread's storage until it calls dlock_busy_holder() again. 0, or
 * DLOCK_EINVAL when that reply named nobody: there was none, the server
 * is older (dlockd 0.3), the user may not read the lock, or no lease
 * holds it (grants closed: PROTOCOL.md, Redis that forgets).
 */
int dlock_busy_holder(struct dlock_holder *h);

int dlock_ping(dlock_client *c);

/* End the lease `token` of `name` now, whoever holds it: an operator's
 * tool for a holder that is gone or stuck. Its owner's connections get
 * * EXPIRED (libdlock calls its on_lost; dlock run stops its command) and
 * the next waiter gets the lock with a larger token, so fenced writes of
 * the old holder are refused downstream. DLOCK_ESTALE (and *current, if
 * not NULL: the holder's token now, 0 if free) when the token holds
 * nothing: asking for the token makes sure the lease broken is the one
 * looked at. */
int dlock_break_reason(dlock_client *c, const char *name, uint64_t token,
		       const char *reason, uint64_t *current);
/* A BREAK must say why (`reason`: 1-128 printable bytes, no space; it
 * goes to the server's audit log with the user who broke it, and the
 * holder's * EXPIRED names that user). The server refuses a user without
 * the break right on the name (DLOCK_EDENIED). dlock_break() is kept for
 * programs written against libdlock 0.2: it gives no reason, so it fails
 * with DLOCK_EINVAL before sending anything; call dlock_break_reason(). */
int dlock_break(dlock_client *c, const char *name, uint64_t token,
		uint64_t *current);

/* One page of the server's locks (LOCKS): those whose names start with
 * `prefix` (NULL or "": all) and sort after `after` (NULL or "": from the
 * first), at most `limit` (0: the server's default, 100; at most 1000).
 * With `by_waiters` the page is instead the locks with the most waiters,
 * most first, ties by name (`after` must then be NULL). cb is called once
 * per lock, in order, on the calling thread (the strings live for the
 * call); *more (if not NULL) receives how many more locks match after
 * the page: ask again with `after` = the last name. A listing costs the
 * server a pass over every lock: right after one, the next may be
 * refused with DLOCK_ELIMIT for a few ms per million locks (wait and ask
 * again).
 *
 * On a partitioned service (see Partitions) the page is the service's:
 * every partition that serves a slot of the map (MAP read again first)
 * is asked for the same page, through its own connection, and the pages
 * are merged in the order asked; the first `limit` go to cb, and *more
 * is what the partitions said matched, less what cb was given. A prefix
 * that holds a whole {tag} ("{order:42}:") asks its partition only. A
 * partition that cannot be reached, or refuses (DLOCK_ELIMIT...), fails
 * the call with its error, cb never called. A lock whose slot moves to
 * another partition while the partitions are asked may be listed twice
 * or not at all. */
int dlock_locks(dlock_client *c, const char *prefix, const char *after,
		unsigned limit, int by_waiters,
		void (*cb)(const char *name, const struct dlock_status *st,
			   void *arg),
		void *arg, uint64_t *more);

/* The server's STATS: cb is called once per "key value" line, in order,
 * on the calling thread; the strings live for the duration of the call.
 * On a partitioned service: the daemon of the client's first connection
 * (dlock_stats_all() asks every partition). */
int dlock_stats(dlock_client *c,
		void (*cb)(const char *key, const char *value, void *arg),
		void *arg);

/* Every daemon's STATS: cb is called once per "key value" line of each,
 * with the partition's id (its [partition] id), partition by partition
 * in the order of the map, on the calling thread; the strings live for
 * the callback. A client that is not partitioned has one daemon, its
 * partition "". On a partitioned service, every partition that serves a
 * slot of the map (MAP read again first) is asked, through its own
 * connection (its active daemon); one that cannot be reached fails the
 * call with its error, and then cb is never called. */
int dlock_stats_all(dlock_client *c,
		    void (*cb)(const char *partition, const char *key,
			       const char *value, void *arg),
		    void *arg);

/* ---- watching ------------------------------------------------------------
 *
 * A watch asks the server for news of locks the client does not want to
 * hold: each grant, release, expiry, break or withdrawal of a lease of
 * `pattern` -- a lock name, or a prefix followed by a star (the prefix
 * "jobs/" and a star: every lock under jobs/; a star alone: every lock).
 * The events wait in the client until dlock_watch_next() takes them, in
 * the order the server sent them, each once however many of the client's
 * watches match its lock. At most
 * DLOCK_WATCH_QUEUE_MAX wait; past that, and when the server dropped
 * events for a client that read too slowly, a DLOCK_WATCH_OVERFLOW event
 * says how many were missed, where they were.
 *
 * Watches belong to the connection at the server: after a reconnect or a
 * fail-over the client watches again what it watched, and says so with a
 * DLOCK_WATCH_RESUMED event for each pattern (what changed while it was
 * disconnected is not known: `holders` tells a name's state now). A
 * server that refuses it then (a users file that changed) gives a
 * DLOCK_WATCH_REFUSED event, and the watch is gone.
 */
#define DLOCK_WATCH_QUEUE_MAX 4096

enum dlock_watch_kind {
	DLOCK_WATCH_GRANTED = 1, /* a new lease (a reentry is none) */
	DLOCK_WATCH_RELEASED,	 /* its last hold was released */
	DLOCK_WATCH_EXPIRED,	 /* it was not refreshed in time */
	DLOCK_WATCH_BROKEN,	 /* BREAK ended it (broken_by) */
	DLOCK_WATCH_WITHDRAWN,	 /* a grant the server's persistence never
				    recorded was taken back */
	DLOCK_WATCH_OVERFLOW,	 /* `missed` events were lost here */
	DLOCK_WATCH_RESUMED,	 /* reconnected: `name` (the pattern) is
				    watched again */
	DLOCK_WATCH_REFUSED,	 /* reconnected: watching `name` (the
				    pattern) again failed with `error` */
	DLOCK_WATCH_VALUE,	 /* the lease's holder gave it a new value
				    (dlock_proclaim) */
};

struct dlock_watch_event {
	enum dlock_watch_kind kind;
	char name[256];	    /* the lock (RESUMED, REFUSED: the pattern) */
	char owner[65];	    /* the lease's owner id */
	char user[33];	    /* its user, "" for the default one */
	char broken_by[33]; /* BROKEN: the user who broke it */
	uint64_t token;	    /* the lease's */
	int64_t holders;    /* the lock's holders after the change;
			       RESUMED: now (-1 for a prefix) */
	uint64_t missed;    /* OVERFLOW */
	int error;	    /* REFUSED: a DLOCK_E* code */
	/* the lease's value (LOCK value=), decoded: "" when none; VALUE: the
	 * new one */
	char value[DLOCK_VALUE_MAX + 1];
};

/* Watch `pattern`. *holders (if not NULL) receives the lock's holders as
 * the watch begins (0: free), or -1 for a prefix. Watching again what is
 * watched changes nothing. DLOCK_ELIMIT: the server's bound of watches
 * per connection (256); DLOCK_EDENIED: a user without the read right on
 * the name, or on the whole prefix.
 *
 * On a partitioned service (see Partitions) a name is watched at its
 * partition, and a prefix at every partition that serves a slot of the
 * map (MAP read again first), each through its own connection: the
 * events of all come to this client's queue, in the order they arrive,
 * and a reconnect of one partition's connection gives a RESUMED event of
 * its own. All or none: a partition that cannot be reached or refuses
 * fails the call with its error, and the partitions this call began to
 * watch stop. A partition the map gains later is watched when the prefix
 * is watched again (watching again adds it, and changes nothing else).
 * dlock_unwatch() of a prefix stops it at every partition. */
int dlock_watch(dlock_client *c, const char *pattern, int64_t *holders);
/* Stop watching `pattern` (as given to dlock_watch): DLOCK_EINVAL if it
 * was not watched. Events of it still waiting in the client are kept. */
int dlock_unwatch(dlock_client *c, const char *pattern);
/* The next event, waiting up to wait_ms for one (0: none waits;
 * DLOCK_WAIT_FOREVER): 0, DLOCK_ETIMEDOUT, or DLOCK_ECANCELED once
 * dlock_close() has begun. */
int dlock_watch_next(dlock_client *c, struct dlock_watch_event *ev,
		     int64_t wait_ms);

/* ---- lease handles (all safe to call from any thread, and from on_lost) -- */

const char *dlock_lease_name(const dlock_lease *l);
uint64_t dlock_lease_token(const dlock_lease *l);
int64_t dlock_lease_ttl(const dlock_lease *l); /* TTL renewals ask for */
/* Local deadline on CLOCK_BOOTTIME (which, unlike CLOCK_MONOTONIC, goes
 * on while the machine is suspended), in ms; renewal moves it. */
int64_t dlock_lease_deadline(const dlock_lease *l);
/* 1 while held and not lost and the local deadline is ahead. */
int dlock_lease_valid(const dlock_lease *l);
/* A lease lost as DLOCK_LOST_EXPIRED because someone ended it with BREAK
 * (dlock break) rather than by its TTL: the user who broke it (the
 * server's user name; "default" without a users file). "" otherwise, and
 * before the loss. */
const char *dlock_lease_broken_by(const dlock_lease *l);
/* How many requests the server last said wait for the lease (asked with
 * dlock_lock_options.notify_waiters; options.on_contended): 0 before it
 * said any. Not lowered when the queue shrinks (the server does not say
 * so). */
uint32_t dlock_lease_waiters(const dlock_lease *l);

/* Milliseconds on CLOCK_BOOTTIME (the clock of dlock_lease_deadline). */
int64_t dlock_now_ms(void);

/* ---- partitions -----------------------------------------------------------
 *
 * A partitioned service (PROTOCOL.md, Partitions) serves each lock name
 * from one partition: a cluster of daemons with its own lock table,
 * tokens and cluster id, chosen by the name's slot (Redis Cluster's hash
 * slot of the name, or of its {tag}: "{order:42}:pay" and
 * "{order:42}:ship" are in one slot). dlock_connect() asks the daemon it
 * reached for the partition map (MAP); a map of epoch > 0 makes the
 * client a router:
 *
 *  - each call about a name -- dlock_lock(), dlock_acquire(),
 *    dlock_trylock(), dlock_check(), dlock_status(), dlock_holders(),
 *    dlock_break_reason(), dlock_unlock_token(), dlock_refresh_token(),
 *    dlock_watch() and dlock_unwatch() of a name -- is sent to the
 *    daemons of its partition, through a connection of the client's
 *    own for that partition (made on first use, from the addresses the
 *    map gives, with the client's options, owner id and key; it renews,
 *    reconnects and fails over as the client would). A multi-lock goes
 *    to the partition of its first name: its names must share one
 *    (DLOCK_EINVAL otherwise, the server's BAD_ARG: put them under one
 *    {tag}). A lease belongs to the connection of its name's partition:
 *    dlock_unlock(), dlock_refresh(), dlock_proclaim() and the renewals
 *    go there. The callbacks get the client the application made.
 *  - when the map changes, a daemon answers a name it no longer serves
 *    with MOVED: the client reads the map again, or goes where it says,
 *    and sends the call there, at most 3 times (then DLOCK_EMOVED). A
 *    daemon the new map names that has not read it yet (it answers
 *    MOVED from the older one), or that is still taking the name's locks
 *    over (DLOCK_EUNAVAILABLE), is asked again after short pauses, while
 *    the request timeout lasts.
 *  - a lease survives a move of its name's slot to another partition
 *    (PARTITION MOVE, dlock_partition()): the locks go along, and the
 *    lease keeps its token (and its proof, value and holds). The first
 *    request about it that the old partition answers MOVED -- a
 *    renewal, or the caller's dlock_unlock(), dlock_refresh(),
 *    dlock_proclaim() -- moves the lease to the connection of the new
 *    partition, where that request and every later one goes; the lease
 *    is renewed there at once. Meanwhile (normally milliseconds; longer
 *    when the old partition's Redis is down) the partitions answer
 *    DLOCK_EUNAVAILABLE about the name: renewals are retried, as after
 *    any refused renewal (on_at_risk may be called, then the lease is
 *    confirmed again); a call that was told MOVED is retried at the new
 *    partition while its request timeout lasts; any other call about
 *    the name may fail with DLOCK_EUNAVAILABLE (try again). The lease is
 *    lost only as ever: the server does not know it (on_lost,
 *    REJECTED), or it could not be renewed before its deadline.
 *  - a LOCK that waits in the queue of a partition that gives the name
 *    away keeps its place: it is sent on to the new partition with the
 *    wait that is left and the same request id, and claims its place
 *    there. A multi-lock that waited is sent again to the new partition,
 *    with the wait that is left.
 *  - what spans partitions is gathered by the client: dlock_locks()
 *    asks every partition and merges their pages, dlock_stats_all()
 *    gives every partition's STATS, and dlock_watch() of a prefix
 *    watches it at every partition (see each). A partition that cannot
 *    be reached fails such a call, as it would a routed call. The other
 *    calls without a name (dlock_ping(), dlock_stats(),
 *    dlock_server_role(), dlock_cluster()) are the first connection's:
 *    they show that partition only.
 *  - a partition whose connection cannot be made fails the call as
 *    dlock_connect() would (DLOCK_ECONNECT, DLOCK_ETLS, ...; a map that
 *    names no daemon of it: DLOCK_EUNAVAILABLE), and has the map read
 *    again (at most once a second) for the next call. A call made while
 *    dlock_close() runs may end with DLOCK_ECANCELED, as ever.
 *
 * A daemon that is not partitioned says epoch 0 (an older one does not
 * know MAP): the client is then exactly what it always was.
 */

/* The epoch of the map the client routes by; 0: it does not route (not
 * partitioned). */
uint64_t dlock_map_epoch(const dlock_client *c);

/* One partition of a map, as dlock_map() gives it (the strings live for
 * the callback). */
struct dlock_map_part {
	const char *id;	   /* the partition's id ([partition] id) */
	const char *addrs; /* its daemons, "host:port,..."; "" while none
			      is known */
	uint64_t floor;	   /* its tokens are above this */
	const char *slots; /* its slots, "0-5460,10923"; "" for none */
};

/* The map as the daemon of the client's first connection knows it
 * (MAP): *epoch (if not NULL; 0: not partitioned, no partition), and cb
 * once per partition, in the server's order, on the calling thread. */
int dlock_map(dlock_client *c, uint64_t *epoch,
	      void (*cb)(const struct dlock_map_part *p, void *arg), void *arg);

/* An administrator's change of the map, sent to the client's first
 * connection (PARTITION <command>, PROTOCOL.md): "INIT", "MOVE <slots>
 * <partition>" (to the active daemon of the partition that has the
 * slots) or "ADDRS <partition> <host:port,...>|-". Needs the admin
 * right. 0 and the server's words ("epoch=3 to=p1") in reply (if not
 * NULL, cut to reply_len), or an error: DLOCK_EINVAL (a command that is
 * not 1 to 3 words, or the server's BAD_ARG: no such partition, slots
 * not its own, locks held in them...), DLOCK_ELIMIT (another change is
 * under way), DLOCK_EUNAVAILABLE, DLOCK_EDENIED, transport errors. The
 * server may take up to 10 s to answer; the command is not sent again
 * after a drop. */
int dlock_partition(dlock_client *c, const char *command, char *reply,
		    size_t reply_len);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
