/* SPDX-License-Identifier: MIT */
/*
 * limits.h -- the limits of the wire and the configuration's defaults
 * and bounds (the store's own tuning is here too for now; the server's
 * internal constants live beside their code).
 *
 * Two kinds of numbers live here:
 *
 *   - wire limits (DL_*_MAX without DEFAULT): fixed by the protocol, shared by
 *     the server, the client library and the tests; HELLO reports them;
 *   - defaults of the limits an operator may change in dlockd.conf
 *     (DL_DEFAULT_*), with the hard bounds the configuration accepts.
 *
 * Nothing else in the tree may hard-code one of these numbers.
 */
#ifndef DL_PROTO_LIMITS_H
#define DL_PROTO_LIMITS_H

/* ---- wire limits ------------------------------------------------------ */

/* Bytes in one request line, line ending (LF or CRLF) excluded. A longer
 * line is discarded up to its LF and answered ERR LINE_TOO_LONG. */
#define DL_LINE_MAX 1024

/* Bytes a peer may send without any LF before its connection is closed:
 * past this point it is not speaking the protocol. */
#define DL_LINE_DISCARD_MAX (64 * 1024)

/* Bytes in a lock name: 1..255 printable ASCII, no space, no '='. */
#define DL_NAME_MAX 255

/* Bytes in an id=<tag> request tag (printable ASCII, no space). */
#define DL_TAG_MAX 32

/* Bytes in an owner id (HELLO owner=<id>), same alphabet as a name. */
#define DL_OWNER_MAX 64

/* An owner's secret (HELLO owner=<id> key=<secret>): the proof that a client
 * is that owner. The server makes one of DL_OWNER_SECRET_NEW hex digits (128
 * random bits); a client may bring its own of DL_OWNER_SECRET_MIN to
 * DL_OWNER_SECRET_MAX letters, digits, '-' and '_' (a short one could be
 * guessed by anyone who learns the owner id). */
#define DL_OWNER_SECRET_NEW 32
#define DL_OWNER_SECRET_MIN 16
#define DL_OWNER_SECRET_MAX 64
/* A grant's proof (RECLAIM proof=, server/proof.h): hex digits. */
#define DL_PROOF_LEN 32

/* A cluster id (HELLO cluster=<id>): 128 random bits in lower-case hex,
 * one per Redis keyspace, that clients compare across the servers they
 * list. */
#define DL_CLUSTER_ID_LEN 32

/* Bytes in a user name (AUTH <user> <secret>, the users file): letters,
 * digits and . _ - only, so that a name is safe in logs and owner keys. */
#define DL_USER_MAX 32

/* Bytes of a BREAK's reason=<text> (printable ASCII, no space): enough to
 * name a ticket or say why in a word or two; it goes to the audit log. */
#define DL_REASON_MAX 128

/* A client's description of itself (HELLO host=<host> pid=<pid>
 * cmd=<cmd>, proto/desc.h), shown next to its owner id by STATUS, HOLDERS,
 * LOCKS and NO BUSY. Values are bytes as sent (a space is %20): a host
 * name of Linux's HOST_NAME_MAX, a command line cut to what a person reads
 * in one line of a listing, a pid_t's positive range. Longer is BAD_ARG:
 * clients cut their own (dl_desc_encode). */
#define DL_DESC_HOST_MAX 64
#define DL_DESC_CMD_MAX	 128
#define DL_DESC_PID_MAX	 2147483647
/* Names of one multi-lock (LOCK <name> <name> ...): the locks one
 * request takes at once, all or none. */
#define DL_MULTI_MAX 64
/* Words in one request line, verb included. The longest valid requests
 * are multi-locks: LOCK, DL_MULTI_MAX names, ttl= wait= req= id= (69).
 * Otherwise RECLAIM <name> <token> proof= until= ttl= mode= limit= holds=
 * warn= delay= value= id= (thirteen; HELLO with all it takes, seven). */
#define DL_ARGS_MAX (DL_MULTI_MAX + 5)

/* A lease's value (LOCK, REFRESH value=): what its holder says of its
 * lease to whoever looks at the lock -- an elected leader's address --
 * a text value as a description's (proto/desc.h), at most this many bytes
 * as sent. */
#define DL_VALUE_MAX 128

/* The longest lock-delay (LOCK delay=): nobody is granted a lock for that
 * long after a holder's lease ended without a release (an expiry, a
 * BREAK). A minute, as Chubby bounds its own: longer than a paused
 * process is likely to sleep and write on, short enough that a lock a
 * holder died with is not lost for long. */
#define DL_LOCK_DELAY_MAX_MS 60000

/* Holders of one lock at once: the largest semaphore (LOCK limit=<n>),
 * and the most shared holders of a lock; one more shared request waits.
 * A lock's record holds all its holders and is rewritten whole when one
 * comes or goes, and some requests walk its holders: found from outside
 * with 65535, a lock of 38,000 readers made a 2.2 MB record that each
 * batch rewrote (Redis timed out, every client was refused), a restart
 * read it back in 13 s (past the leadership lease), and each request on
 * it cost milliseconds. 1024 holders are a record of ~100 KB and a walk of
 * microseconds; more readers than that are better served by several
 * locks. */
#define DL_LIMIT_MAX  1024
#define DL_SHARED_MAX 1024

/* Largest reentrant hold count of one lease (also RECLAIM holds=). */
#define DL_REENTRY_MAX ((1u << 24) - 1)

/* HOLDERS: the most holders and the most waiters its reply lists (the
 * header gives the full counts; more=<n> says how many were left out). */
#define DL_HOLDERS_LIST_MAX 1000

/* NO DEADLOCK: the most owners of a cycle its reply names, the requester
 * included (the others are counted). Four hops of a 64-byte owner, its
 * 32-byte user and a 255-byte name, after a 255-byte name, the count,
 * more= and a tag, make a line of 1,754 bytes at most, under
 * DL_REPLY_MAX, and 15 words, under DL_REPLY_ARGS_MAX (proto.h). */
#define DL_CYCLE_SHOW_MAX 5

/* Largest duration the codec accepts, in ms (about 31.7 years). A larger
 * number, or one that overflows while scaling by its suffix, is BAD_ARG. */
#define DL_DURATION_MAX_MS 1000000000000ULL

/* Bytes in the longest line the server writes (a STATUS reply with a
 * 255-byte name and a 64-byte owner is about 400). */
#define DL_REPLY_MAX 2048

/* Bytes in the longest multi-line reply body line (STATS), and the most
 * lines a STATS reply has. */
#define DL_STATS_LINE_MAX 128
#define DL_STATS_MAX	  128

/* LOCKS: the most locks one page lists (limit=), and how many it lists
 * when no limit= is given. A line of its body names a lock, its holder and
 * counts: at most DL_REPLY_MAX bytes. */
#define DL_LOCKS_PAGE_MAX     1000
#define DL_LOCKS_PAGE_DEFAULT 100
/* A listing by waiters walks the locks under its prefix on the event loop
 * (by name, the index makes a page cost its own locks). After a listing
 * of T, the next LOCKS of the same user is refused (ERR LIMIT, with the
 * time to wait) for this many times T: one user's walks take at most
 * 1 / (1 + this) of the loop. A walk under DL_LOCKS_GAP_MIN_US (a few
 * thousand locks), or a page by name, spaces nothing. */
#define DL_LOCKS_GAP_FACTOR 2
#define DL_LOCKS_GAP_MIN_US 100

/* ---- WATCH (server/watch.c) ------------------------------------------- */

/* Names and prefixes one connection may watch at once; one more is
 * ERR LIMIT. Enough for a dashboard's prefixes or a service's jobs; a
 * client that wants more watches a prefix. */
#define DL_WATCHES_PER_CONN_MAX 256
/* ... and all connections together: a watch costs at most about 350
 * bytes (its name and two list nodes), so they take at most ~35 MB
 * whatever max_connections is. */
#define DL_WATCHES_MAX 100000
/* A watcher's events are dropped rather than queued while its unread
 * output is at this many bytes, or a quarter of max_output if less (and
 * while all clients' unread output is over max_output_total); it is told
 * how many it missed (* WATCH-OVERFLOW <n>) once it has read half of it.
 * Events about other clients' locks never close a connection that does
 * not read them, nor take more of the server's memory than this. */
#define DL_WATCH_UNREAD_MAX (64 * 1024)

/* ---- tokens ----------------------------------------------------------- */

/* Fencing tokens are unix_ms * DL_TOKEN_PER_MS + sequence: see the comment
 * on dl_token_floor() in server/locktab/locktab.h for why. 10^6 tokens per ms
 * outruns any grant rate, and u64 lasts until the year 2554. */
#define DL_TOKEN_PER_MS 1000000ULL

/* ---- configurable limits: defaults and bounds ------------------------- */

#define DL_DEFAULT_PORT 7420
#define DL_DEFAULT_BIND "127.0.0.1"

/* Concurrent client connections; one more is answered ERR LIMIT and
 * closed. */
#define DL_DEFAULT_MAX_CONNECTIONS 10000
#define DL_MAX_CONNECTIONS_MAX	   1000000

/* Waiters queued on one lock; one more gets ERR LIMIT. */
#define DL_DEFAULT_MAX_WAITERS 10000
#define DL_MAX_WAITERS_MAX     10000000

/* Leases one owner may hold at once (reentries count once). */
#define DL_DEFAULT_MAX_LOCKS_PER_OWNER 100000
#define DL_MAX_LOCKS_PER_OWNER_MAX     100000000

/* Bytes of replies queued for one connection that the peer has not read.
 * Past it the connection is closed: a client that never reads costs at
 * most this much memory. */
#define DL_DEFAULT_MAX_OUTPUT (1024 * 1024)
/* A connection that ends (QUIT, a timeout, a revoked session) sends its
 * last lines first; one whose client does not take them within this is
 * closed at once, its unsent bytes dropped (a reset): found from outside,
 * such connections were kept for ever, each holding a slot of
 * max_connections, and one address that never read filled the daemon. */
#define DL_END_DRAIN_MS	  2000
#define DL_MAX_OUTPUT_MIN (8 * 1024)
#define DL_MAX_OUTPUT_MAX (1024 * 1024 * 1024)
/* ... and of all connections together (server/conn.h): past it, clients
 * with unread output are paused, and an event closes the one with the
 * most. */
#define DL_DEFAULT_MAX_OUTPUT_TOTAL (64 * 1024 * 1024)
#define DL_MAX_OUTPUT_TOTAL_MAX	    (64ULL * 1024 * 1024 * 1024)
/* ... and of one user of the users file's connections (max_output_per_user;
 * 0, the default: this share of max_output_total): past it, that user's
 * connections with unread output wait, and one of its requests or events
 * closes its connection with the most, whatever the others hold. Over
 * the whole budget, the connection closed is one of the user holding the
 * most. So one user's clients that never read cannot take the budget,
 * nor have another user's connections closed for it. */
#define DL_OUTPUT_USER_SHARE 4

/* A request line begun and not ended within request_timeout closes its
 * connection (ERR LIMIT): a client dripping bytes cannot keep a slot
 * forever. 0 turns it off. */
#define DL_DEFAULT_REQUEST_TIMEOUT_MS 10000
#define DL_REQUEST_TIMEOUT_MAX_MS     3600000
/* A connection with no request for idle_timeout is closed (* BYE idle),
 * unless it waits for a lock. Off (0) by default: a holder may have
 * nothing to say for as long as its lease runs. */
#define DL_DEFAULT_IDLE_TIMEOUT_MS 0
#define DL_IDLE_TIMEOUT_MAX_MS	   (7ULL * 24 * 3600000)
/* How often connections are checked against both (one timer for all). */
#define DL_SWEEP_MS 250

/* ---- before AUTH (server/access.c) ------------------------------------ */

/* A connection that has not authenticated within auth_timeout is closed
 * (* BYE auth-timeout). 0 turns it off. */
#define DL_DEFAULT_AUTH_TIMEOUT_MS 10000
#define DL_AUTH_TIMEOUT_MAX_MS	   3600000
/* A failed AUTH is answered this much later (auth_delay), to slow down
 * guessing; at most DL_AUTH_DELAY_MAX_MS. */
#define DL_DEFAULT_AUTH_DELAY_MS 100
#define DL_AUTH_DELAY_MAX_MS	 10000
/* Failed AUTHs a connection may make; the last one's reply is followed by
 * the close. A guesser pays a new connection (and its slot) every few. */
#define DL_AUTH_FAILURES_MAX 3
/* Requests a connection may make before it authenticates (HELLO, HELP,
 * PING, a failed AUTH...): one more is refused and the connection closed.
 * A client logs in with one or two; found from outside, 1,000 connections
 * that never logged in and pipelined PINGs each had a turn of the loop,
 * and another user's PING p50 went from 0.05 to 75 ms. With this bound,
 * and at most DL_ACCEPTS_PER_ITER new connections a loop iteration, they
 * cost at most that many times this many requests an iteration. */
#define DL_UNAUTH_REQUESTS_MAX 32
/* Failed AUTHs are logged as one summary line per this interval. */
#define DL_AUTH_LOG_MS 10000
/* Refused RECLAIMs (a forged or stale proof) are logged one per this
 * interval, with how many were not; STATS reclaims_refused counts all. */
#define DL_RECLAIM_LOG_MS 10000
/* Connections not yet authenticated get at most 1/DL_UNAUTH_SHARE of
 * max_connections when max_unauth_connections is 0 (the default), so
 * that silent sockets cannot take every slot; and at most this many from
 * one address (unix peers excepted), so that one host cannot take those. */
#define DL_UNAUTH_SHARE			  2
#define DL_DEFAULT_MAX_UNAUTH_PER_ADDRESS 8
/* New connections a second that must authenticate, from one address
 * (unix peers excepted): a bucket of this many, refilled at this rate;
 * one more is refused as it is accepted, before any TLS handshake. Found
 * from outside: one address made 1,905 TLS handshakes a second, 44 % of
 * a core, within max_unauth_per_address (it limits connections at once,
 * not their rate). Addresses are remembered while their bucket refills,
 * at most DL_CONNECT_ADDRS_MAX of them (past that, a new one is not
 * limited: max_unauth_connections still is). */
#define DL_DEFAULT_MAX_CONNECTS_PER_ADDRESS 100
#define DL_MAX_CONNECTS_PER_ADDRESS_MAX	    1000000
#define DL_CONNECT_ADDRS_MAX		    65536
/* A password shorter than this on a non-loopback bind is refused, unless
 * allow_short_password = yes: online guessing is slowed down, not made
 * impossible. */
#define DL_PASSWORD_MIN 16

/* ---- quotas (server/access.c) ---------------------------------------- */

/* Locks in the daemon at once (held or waited for); one more new name is
 * ERR LIMIT. Twice the million leases the benchmarks hold. */
#define DL_DEFAULT_MAX_LOCKS 2000000
#define DL_MAX_LOCKS_MAX     1000000000
/* A user's quotas when its line gives none (locks=, waits=, conns=,
 * watches=): its leases plus queued LOCKs, its queued LOCKs, its
 * connections, its connections' watches. The default user (no users
 * file) has none: it is every client at once. A user's watches default
 * to a tenth of the daemon's (DL_WATCHES_MAX), so that one user cannot
 * take them all: an attack filled the table from 400 connections in
 * 0.2 s and every other user's WATCH was refused. */
#define DL_DEFAULT_MAX_LOCKS_PER_USER	    100000
#define DL_DEFAULT_MAX_WAITS_PER_USER	    100000
#define DL_DEFAULT_MAX_CONNECTIONS_PER_USER 1000
#define DL_DEFAULT_MAX_WATCHES_PER_USER	    (DL_WATCHES_MAX / 10)
/* Steps of deadlock checks (server/locktab/locktab.h: the holders, waiters and
 * owners a check looks at) one user of the users file may spend in a
 * second: a bucket of this many, refilled at this rate. A check looks at
 * DL_DEADLOCK_WALK_MAX (4096) at most, in under 50 us, so one user's
 * checks take at most about 3 ms of the loop's second; past it, that
 * user's new waits are not checked (they wait, as when a check gives up:
 * walks_capped) until the bucket refills. Found from outside: a 990-owner
 * wait chain within one user's quotas made each blocked LOCK cost 9.4 us
 * (0.35 us without), and another user's PING p50 went from 0.09 to
 * 55 ms. The default user (no users file) has no budget. */
#define DL_DEFAULT_MAX_DEADLOCK_STEPS_PER_USER (64 * 4096)
#define DL_DEADLOCK_STEPS_MAX		       1000000000
/* Watch events the watchers of one user of the users file may be handed
 * in a second: a bucket of this many, refilled at this rate; past it,
 * that user's watchers miss events (told * WATCH-OVERFLOW, counted in
 * watch_events_capped). Found from outside: one user's UNLOCK granted
 * 990 shared readers, each grant an event to 990 of its watchers --
 * 980,100 events in one request, the daemon deaf for 270 to 500 ms, every
 * 1.1 s. An event handed to a watcher that does not read costs about
 * 1 us there (a durable grant's line held, then written), one dropped
 * about 0.01 us: a user's burst costs the others about 33 ms a second at
 * most, plus the drops (that attack: 52-57 ms, 14 ms of it the grants
 * themselves). The default user (no users file) has no budget. */
#define DL_DEFAULT_MAX_WATCH_EVENTS_PER_USER 32768
#define DL_WATCH_EVENTS_MAX		     1000000000

/* Lease TTL when a request gives none, and the largest one accepted. */
#define DL_DEFAULT_TTL_MS     30000
#define DL_DEFAULT_MAX_TTL_MS (24ULL * 3600 * 1000)

/* Timer wheel tick: lease and wait deadlines fire within one tick. */
#define DL_DEFAULT_TICK_MS 10
#define DL_TICK_MS_MIN	   1
#define DL_TICK_MS_MAX	   1000

/* Connections accepted per loop iteration and listener (server.c); the
 * others wait in the kernel's backlog, of this many (the kernel caps it
 * at net.core.somaxconn): a connect that finds it full is dropped and
 * retried by the client a second later. */
#define DL_ACCEPTS_PER_ITER 64
#define DL_LISTEN_BACKLOG   4096

/* Deadlines reaped per loop iteration before the loop serves I/O again. */
#define DL_REAP_BUDGET 10000

/* How long a waiter restored from Redis keeps its place for its owner. */
#define DL_DEFAULT_RESTORE_GRACE_MS 5000
#define DL_RESTORE_GRACE_MAX_MS	    3600000
/* A Redis command not answered within redis_timeout takes persistence
 * down (the link is dropped and made again). */
#define DL_DEFAULT_REDIS_TIMEOUT_MS 2000
#define DL_REDIS_TIMEOUT_MIN_MS	    10
#define DL_REDIS_TIMEOUT_MAX_MS	    600000

/* ---- persistence (Redis) ----------------------------------------------- */
/* (The store's own tuning -- backoff, batching, re-sync, leadership
 * renewals -- is in server/store/store_tuning.h.) */

/* [cluster] leader_lease (docs/design.md, "Leadership and fencing"): the
 * active daemon's lease in Redis; how it is renewed and counted is the
 * store's (server/store/store_tuning.h). */
#define DL_DEFAULT_LEADER_LEASE_MS 4000
#define DL_LEADER_LEASE_MIN_MS	   1000
#define DL_LEADER_LEASE_MAX_MS	   60000
/* [persistence] min_replicas_ack: at most this many replicas waited for. */
#define DL_MIN_REPLICAS_ACK_MAX 16

/* sentinel:// and redis-cluster:// URLs: at most this many Sentinels
 * (26379 when no port) or cluster nodes (6379). */
#define DL_SEEDS_MAX	      8
#define DL_REDIS_DEFAULT_PORT 6379

/* A Sentinel announced a failover of our primary (+try-failover and the
 * states after it, +odown): the link is dropped and no new one is made
 * until the failover ends (+switch-master, +failover-end, an abort), or
 * at the latest this long after the last such event. */
#define DL_FAILOVER_HOLD_MS 10000
/* A Sentinel whose watch could not be made is tried again after this. */
#define DL_WATCH_RETRY_MS	 1000
#define DL_SENTINEL_DEFAULT_PORT 26379
/* A node id and an advertised address: no spaces, at most these bytes. */
#define DL_NODE_ID_MAX	 64
#define DL_ADVERTISE_MAX 200
/* The partition's record in its keyspace (server/store/store_part.c):
 * a map epoch, an id, a token and the slots given away. */
#define DL_STORE_PART_MAX 65536
/* A PARTITION MOVE carries the locks of its slots: at most this many,
 * in at most this many bytes of records (store_part.c); a move of more
 * is refused (move fewer slots at once). */
#define DL_MOVE_LOCKS_MAX 100000
#define DL_MOVE_TEXT_MAX  (64u * 1024 * 1024)
/* ... and its copy of the partition map (DL_MAP_TEXT_MAX, part/map.h). */
#define DL_MAP_COPY_MAX (256 * 1024)
/* A partitioned daemon reads the partition map this often, and gives up
 * on a change of it asked by an admin command after this long. */
#define DL_MAP_POLL_MS 1000
/* ... and, when it answers NO MOVED (it may not know yet that the map
 * gave it the name), at most this often besides. */
#define DL_MAP_KICK_MS 100
/* PARTITION's positional words. */
#define DL_WORDS_MAX  3
#define DL_MAP_ASK_MS 10000
/* Node ids in [cluster] peers: the other daemons of one keyspace. */
#define DL_PEERS_MAX 8

/* ---- the metrics endpoint --------------------------------------------- */

/* Bytes of an HTTP request head, connections at once, and the time a
 * connection has to send its request. */
#define DL_METRICS_REQUEST_MAX 4096
#define DL_METRICS_CONNS_MAX   16
#define DL_METRICS_TIMEOUT_MS  5000

/* ---- TLS (server/tls.h) ------------------------------------------------ */

/* A TCP connection whose TLS handshake is not done within this is closed:
 * a client that connects and says nothing cannot hold a slot ([tls]
 * handshake_timeout). */
#define DL_DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS 10000
#define DL_TLS_HANDSHAKE_TIMEOUT_MIN_MS	    100
#define DL_TLS_HANDSHAKE_TIMEOUT_MAX_MS	    600000

#endif /* DL_PROTO_LIMITS_H */
