/* SPDX-License-Identifier: MIT */
/*
 * dlock_private.h -- libdlock's internals, shared by its four modules:
 *
 *   dlock.c      the public calls (dlock.h): argument checks, local
 *                exclusion between threads, waiting for results;
 *   dlock_req.c  requests (format, send, wait, give up, complete), the
 *                error mapping, and lease records;
 *   dlock_io.c   the background thread: connect and reconnect, the socket
 *                reader, renewal and lost-lease guards;
 *   dlock_reply.c  what the thread does with each line: replies, events;
 *   dlock_tls.c  the transport: plaintext, or TLS over memory BIOs;
 *   dlock_watch.c  watches: their events, and watching again after a
 *                reconnect.
 *   dlock_desc.c who the client says it is, and who a holder said it is.
 *   dlock_route.c  a partitioned service: the map, a leg (an ordinary
 *                client) per partition, calls routed by name, MOVED.
 *   dlock_follow.c a lease follows its slot: moved from one partition's
 *                leg to another's on NO MOVED (the mover thread).
 *   dlock_span.c what spans partitions: LOCKS merged, every partition's
 *                STATS, a prefix watched on every partition.
 *
 * Everything below is protected by dlock_client.mu, except what is marked
 * atomic (read by the lease accessors without the lock, also from on_lost)
 * and what is immutable after creation (options, owner, a lease's name and
 * token). See dlock.c for the design as a whole.
 */
#ifndef DL_CLIENT_DLOCK_PRIVATE_H
#define DL_CLIENT_DLOCK_PRIVATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "client/lib/dlock.h"
#include "proto/limits.h"
#include "proto/proto.h"

/* ---- limits and timings -------------------------------------------------- */

/* A failed renewal is retried after max(TTL/10, DLOCK__RENEW_RETRY_MIN_MS). */
#define DLOCK__RENEW_RETRY_MIN_MS 10
/* Waits on a condition variable last at most this (dlock__cond_wait): after
 * a suspend, a request's timeout is seen this late at most. */
#define DLOCK__CLOCK_STEP_MS 250
#define DLOCK__NEVER	     INT64_MAX /* a deadline that never comes */
/* Reads of the socket per wake of the thread (dlock_io.c input). */
#define DLOCK__READ_TURN       16
#define DLOCK__BACKOFF_MIN_MS  50   /* first pause between reconnects */
#define DLOCK__BACKOFF_MAX_MS  1000 /* the pause doubles up to this */
#define DLOCK__GUARD_MIN_MS    20   /* default lost guard: max(TTL/10, this) */
#define DLOCK__ADDRS_MAX       16   /* resolved addresses kept for reconnects */
#define DLOCK__SERVER_NAME_MAX 262  /* "host:port" of one of options.servers */
/* A standby said where the active is, and it is where the client just
 * was (or nowhere known), or no server of options.servers serves: try
 * again after this, doubled each time up to DLOCK__REDIRECT_MAX_MS (a
 * take-over is under way; asking in a tight loop only loads the
 * daemons). */
#define DLOCK__REDIRECT_MS     100
#define DLOCK__REDIRECT_MAX_MS 500
#define DLOCK__TAG_SIZE	       24	     /* "r" + 20 digits + NUL */
#define DLOCK__STATS_MAX       (256 * 1024)  /* bytes of a STATS body kept */
#define DLOCK__MAP_MAX	       (1024 * 1024) /* of a MAP body: every slot */
/* Lines a reply body may announce: the most any server sends (HOLDERS:
 * DL_HOLDERS_LIST_MAX holders and as many waiters; LOCKS a page; STATS)
 * with room. More is a server that would keep the client reading: it is
 * dropped. */
#define DLOCK__BODY_LINES_MAX                                                  \
	(2 * DL_HOLDERS_LIST_MAX + DL_LOCKS_PAGE_MAX + DL_STATS_MAX)
#define DLOCK__ERR_MAX DL_REPLY_MAX /* text of a NO/ERR line */
#define DLOCK__WHY_MAX                                                         \
	400 /* why one address could not be used:                              \
	       two names and two cluster ids fit */
#define DLOCK__DEFAULT_HOST "127.0.0.1"

/* ---- requests ------------------------------------------------------------ */

/*
 * Every operation of libdlock, in one table: its name (DLOCK__<op>), the
 * verb it sends, the function that writes its arguments (dlock_req.c)
 * and the one that reads its reply (dlock_reply.c). Each file expands
 * the columns it owns. Adding a client call: a row here and those two
 * functions (HACKING.md, "Adding a client call").
 *
 *   LOCK           LOCK, or TRYLOCK when wait is 0
 *   CONFIRM        REFRESH after a "* GRANTED": starts the deadline
 *   REFRESH        dlock_refresh()
 *   UNLOCK_TOKEN   dlock_unlock_token(): no lease record
 *   REFRESH_TOKEN  dlock_refresh_token(): no lease record; ttl 0 is sent
 *                  as no ttl= (the server's last TTL)
 *   RENEW          the background renewal of a lease
 *   LOCKS          name: the prefix; after, limit, by_waiters
 *   HOLDERS        the body is kept like LOCKS's; status from the header
 *   WATCH          name: the pattern; internal: again, after a reconnect
 *                  (dlock_watch.c)
 *   DESCRIBE       HELLO host= pid= cmd= after the HELLO of the owner: its
 *                  refusal (a server that does not know them) fails
 *                  nothing
 *   RECLAIM        a renewal refused NOT_HOLDER, asked again with the
 *                  lease's proof: Redis forgot it (dlock_reply.c)
 *   LOCKALL        LOCK of several names (dlock_acquire_all), or TRYLOCK
 *                  when wait is 0: q->multi; q->name is the first name in
 *                  byte order, the multi-lock's name in replies and
 *                  events; its grants come as a body (OK LOCKED n, or
 *                  * LOCKED n)
 *   MCONFIRM       REFRESH of each grant of a "* LOCKED", one after the
 *                  other (q->multi->ci): starts each lease's deadline, as
 *                  CONFIRM does for a "* GRANTED"
 *   MAP            the partition map: its body lines kept whole in
 *                  q->stats, the epoch in r_value (dlock_route.c)
 *   PARTITION      an admin's change of the map: its words in q->stats
 *                  ("w\0w\0", stats_n of them); the reply's words after
 *                  OK PARTITION into q->after
 */
#define DLOCK__OPS(X)                                                          \
	X(AUTH, AUTH, args_auth, on_ok)                                        \
	X(HELLO, HELLO, args_hello, on_hello)                                  \
	X(LOCK, LOCK, args_lock, reply_lock)                                   \
	X(CONFIRM, REFRESH, args_refresh, reply_confirm)                       \
	X(UNLOCK, UNLOCK, args_token, reply_unlock)                            \
	X(REFRESH, REFRESH, args_refresh, reply_refresh)                       \
	X(UNLOCK_TOKEN, UNLOCK, args_token, on_unlock_token)                   \
	X(REFRESH_TOKEN, REFRESH, args_refresh_token, on_refresh_token)        \
	X(RENEW, REFRESH, args_refresh, reply_refresh)                         \
	X(CHECK, CHECK, args_token, on_check)                                  \
	X(CANCEL, CANCEL, args_name, on_ok)                                    \
	X(STATUS, STATUS, args_name, on_status)                                \
	X(STATS, STATS, args_none, on_stats)                                   \
	X(PING, PING, args_none, on_ok)                                        \
	X(LOCKS, LOCKS, args_locks, on_locks)                                  \
	X(BREAK, BREAK, args_break, on_break)                                  \
	X(HOLDERS, HOLDERS, args_name, on_holders)                             \
	X(WATCH, WATCH, args_name, dlock__watch_reply)                         \
	X(UNWATCH, UNWATCH, args_name, dlock__watch_reply)                     \
	X(DESCRIBE, HELLO, args_describe, on_describe)                         \
	X(RECLAIM, RECLAIM, args_reclaim, reply_refresh)                       \
	X(LOCKALL, LOCK, args_lockall, reply_lockall)                          \
	X(MCONFIRM, REFRESH, args_mconfirm, reply_mconfirm)                    \
	X(MAP, MAP, args_none, on_map)                                         \
	X(PARTITION, PARTITION, args_partition, on_partition)

enum dlock__op {
#define DLOCK__OP_ENUM(op, verb, args, reply) DLOCK__##op,
	DLOCK__OPS(DLOCK__OP_ENUM)
#undef DLOCK__OP_ENUM
};

/* Where a request is; it is on at most one list. */
enum dlock__where {
	DLOCK__NOWHERE,
	DLOCK__UNSENT,	/* c->unsent: waits for a connection */
	DLOCK__SENT,	/* c->fifo (or c->stats_req): waits for its reply */
	DLOCK__WAITING, /* c->waiting: a LOCK answered QUEUED, waits for its
			event */
};

struct dlock__lease;
struct dlock__router; /* dlock_route.c */

/*
 * What a multi-lock (LOCKALL) asks and gets: its names in byte order, and
 * for each its grant once the body of OK LOCKED / * LOCKED is read. The
 * grants are the request's until `handed` (lease records and handles
 * made for the caller): a request that ends otherwise gives them back
 * (dlock__req_finish).
 */
struct dlock__multi {
	int n;
	int ngrants;		 /* grants read (0: none held) */
	int ci;			 /* MCONFIRM: the grant being confirmed */
	unsigned from_event : 1; /* * LOCKED: the grants need confirming */
	unsigned absorb : 1;	 /* a * LOCKED nobody waits for: give back */
	unsigned handed : 1;	 /* handles made: the caller's */
	int idx[DL_MULTI_MAX];	 /* the caller's index of each name */
	char names[DL_MULTI_MAX][DL_NAME_MAX + 1];
	uint64_t tokens[DL_MULTI_MAX];
	int64_t ms[DL_MULTI_MAX];   /* what the grant (or confirm) left */
	int64_t sent[DL_MULTI_MAX]; /* counted from (monotonic ms) */
	char proof[DL_MULTI_MAX][DL_PROOF_LEN + 1];
	uint64_t until[DL_MULTI_MAX];
	dlock_lease *handles[DL_MULTI_MAX];
};

/*
 * One request, from the call that makes it until its outcome is known.
 * A caller's request belongs to the caller until it is written, then to
 * whichever list holds it; the caller frees it once `done`. A request the
 * caller gave up on (`abandoned`) or an internal one (`internal`: renewals,
 * handshakes, clean-ups) is freed by the background thread when its reply
 * comes, or by a disconnect.
 */
struct dlock__req {
	struct dlock__req *next;	  /* on its list (see where) */
	struct dlock__req *anext, *aprev; /* c->acquiring (LOCK calls) */
	enum dlock__op op;
	enum dlock__where where;
	unsigned internal : 1;	   /* nobody waits for it */
	unsigned abandoned : 1;	   /* the caller gave up; outcome to clean up */
	unsigned in_acq : 1;	   /* on c->acquiring */
	unsigned resent : 1;	   /* written again after a reconnect */
	unsigned last_hold : 1;	   /* UNLOCK of a lease's last handle: a HELD
				      reply means holds we lost track of */
	unsigned done : 1;	   /* rc is final */
	unsigned retries : 2;	   /* LOCK: ALREADY_WAITING answers; UNLOCK:
				      sent again for holds lost track of */
	char tag[DLOCK__TAG_SIZE]; /* id= of the last write */
	char name[DL_NAME_MAX + 1];
	uint64_t token;	  /* of UNLOCK REFRESH CHECK CONFIRM; LOCK's result */
	int64_t ttl;	  /* ms, explicit (0 resolved to the server default) */
	int64_t wait;	  /* LOCK: ms as asked, -1 forever */
	int64_t warn;	  /* LOCK: warn= ms, 0 for none */
	int64_t delay;	  /* LOCK: delay= ms, 0 for none */
	uint64_t reqid;	  /* LOCK: req=, the same on every write */
	uint32_t waiters; /* CONFIRM: * WAITING said so before the lease
			     was made (dlock__lease_waiting) */
	char value[DL_VALUE_MAX + 1]; /* LOCK, REFRESH: value=, as sent
					 (encoded); "" for none */
	int64_t wait_end;  /* LOCK: monotonic end of the wait, from the first
			      write; DLOCK__NEVER for forever */
	int64_t sent_at;   /* monotonic ms of the last write */
	int64_t deadline;  /* the caller gives up then (DLOCK__NEVER: never) */
	pthread_t thread;  /* LOCK: the calling thread */
	pthread_cond_t cv; /* signalled when done or deadline changes */
	struct dlock__lease *lease; /* UNLOCK REFRESH RENEW: a reference */
	int rc;
	uint64_t r_value;    /* CHECK remaining, STALE current, UNLOCK_TOKEN
				holds left, REFRESH_TOKEN granted ttl */
	dlock_lease *handle; /* LOCK: the new handle */
	struct dlock_status status;
	char *stats; /* STATS: "key\0value\0" pairs; LOCKS: "line\0"s */
	size_t stats_len, stats_cap;
	uint64_t stats_n; /* pairs (lines) in stats */
	/* LOCKS: the page asked for; r_value receives more= (HOLDERS too).
	 * LOCK: limit is the holders at once asked for (0, 1: a lock).
	 * BREAK: `after` holds the reason. */
	char after[DL_NAME_MAX + 1];
	uint32_t limit;
	unsigned by_waiters : 1;
	unsigned shared : 1;	    /* LOCK: mode=shared */
	unsigned notify : 1;	    /* LOCK: notify=waiters */
	char err[DLOCK__ERR_MAX];   /* the NO/ERR line, "" if none */
	struct dlock__multi *multi; /* LOCKALL, MCONFIRM; freed with q */
};

/* ---- leases -------------------------------------------------------------- */

/*
 * One lease at the server: (name, token) of this client's owner. Reentrant
 * holds share it: each hold is a dlock_lease handle on its `handles` list.
 * Freed when unlinked from c->leases and `refs` drops to 0 (refs counts
 * the list, handles and requests pointing at it).
 */
struct dlock__lease {
	struct dlock__lease *next, *prev; /* c->leases */
	/* the client that holds it: a router's leases live in its legs, and
	 * dlock_unlock() on the router goes to this one. It changes only
	 * when the name's slot moves to another partition: under the mu of
	 * both clients (dlock__lease_move), so that whoever holds the mu of
	 * the client it names may use the lease's fields */
	struct dlock_client *_Atomic c;
	char name[DL_NAME_MAX + 1];
	uint64_t token;
	_Atomic int64_t deadline; /* local deadline, monotonic ms */
	_Atomic int64_t ttl;	  /* last granted TTL, ms */
	int64_t renew_at;	  /* next renewal, monotonic ms */
	pthread_t holder;	  /* thread that acquired it */
	dlock_lease *handles;	  /* its holds */
	int nhandles;
	atomic_int refs;	 /* atomic: a request of the client it left may
				    drop its reference under that client's mu */
	unsigned linked : 1;	 /* on c->leases */
	unsigned dead : 1;	 /* lost: not renewed nor guarded */
	unsigned unlocking : 1;	 /* its last handle is being unlocked */
	unsigned refreshing : 1; /* a renewal is in flight */
	unsigned at_risk : 1;	 /* on_at_risk said, not confirmed since */
	unsigned shared : 1;	 /* its mode, for a RECLAIM */
	unsigned moving : 1;	 /* a renewal was told MOVED: the router
				    moves it to its new partition's
				    connection (dlock__move_later); not
				    renewed here meanwhile */
	uint32_t limit;		 /* its lock's limit, for a RECLAIM */
	int64_t warn, delay;	 /* its warn= and the most delay= asked, for
				    a RECLAIM (0: none) */
	/* the proof and end its last grant or refresh stated: what lets it
	 * be reclaimed should Redis forget it ("" : none) */
	char proof[DL_PROOF_LEN + 1];
	uint64_t until;
	/* the user whose BREAK ended it ("": none), written by the client's
	 * thread before the handles are marked lost, read after */
	char broken_by[DL_USER_MAX + 1];
	/* the waiters the server last said (* WAITING), 0: none said */
	_Atomic uint32_t waiters;
	/* its value as sent (LOCK, REFRESH value=), for a RECLAIM; "" */
	char value[DL_VALUE_MAX + 1];
};

/* The public handle: one hold of a lease. */
struct dlock_lease {
	struct dlock__lease *l; /* immutable */
	dlock_lease *next;	/* on l->handles */
	atomic_int lost;	/* on_lost was (or is about to be) called */
	enum dlock_lost_reason why;
	unsigned notify : 1;	       /* on_lost still to be called */
	unsigned risk_notify : 1;      /* on_at_risk still to be called */
	unsigned contended_notify : 1; /* on_contended still to be called */
};

/* A thread waiting for a name that another thread of the client holds or
 * is acquiring (on c->lwait, in arrival order; on its caller's stack). */
struct dlock__lwait {
	struct dlock__lwait *next;
	const char *name;
	pthread_cond_t cv; /* signalled when it may be its turn */
};

/* ---- the client ---------------------------------------------------------- */

/* The daemon's role= in HELLO. */
enum dlock__role {
	DLOCK__ROLE_UNKNOWN,
	DLOCK__ROLE_ACTIVE,
	DLOCK__ROLE_STANDBY
};

enum dlock__state {
	DLOCK__DOWN,	   /* not connected; next attempt at reconnect_at */
	DLOCK__CONNECTING, /* a non-blocking connect is in progress */
	DLOCK__HANDSHAKE,  /* connected; the TLS handshake is in progress */
	DLOCK__GREETING,   /* a reconnect: AUTH and HELLO sent, the rest waits
		      (unsent) until HELLO is answered OK */
	DLOCK__UP,	   /* connected: requests are written at once */
	DLOCK__DEAD,	   /* closed for good (reconnect off, or closing) */
};

/*
 * The client, in parts (each a struct below, named by the member that
 * holds it): where it connects (addr), what the current connection is
 * (conn), what the server said in HELLO (hello), what the client says of
 * itself (desc), the requests (rq), the leases (ls) and the watches (w).
 * The thread and the callers share all of it under mu.
 */

/* Where to connect: the addresses, and fail-over among them. */
struct dlock__addrs {
	struct sockaddr_storage addrs[DLOCK__ADDRS_MAX];
	socklen_t addrlens[DLOCK__ADDRS_MAX];
	/* options.servers: the entry each address came from ("" without) */
	char names[DLOCK__ADDRS_MAX][DLOCK__SERVER_NAME_MAX];
	char *servers;
	int naddrs;
	int addr_i; /* the address to try next */
	/* Fail-over (options.servers): the connection is to a standby (its
	 * requests were not executed), and where to go next (-1: the next
	 * address in turn). */
	int standby;
	int hint_i;
	int64_t redirect_pause; /* dlock_connect: the next pause before
				   asking again (0: the first redirect) */
	int failed_i; /* the address whose connect failed last, or -1 */
	/* Why dlock_connect could not use each address ("" when it was
	 * not tried, or served), and the names that did not resolve: the
	 * thread's dlock_last_error() when it fails (dlock__why_report). */
	char why[DLOCK__ADDRS_MAX][DLOCK__WHY_MAX];
	char unresolved[DLOCK__WHY_MAX];
};

/* The connection (the thread's, under mu). */
struct dlock__conn {
	int fd;
	struct dlock__tls *tls; /* NULL: plaintext (dlock_tls.c) */
	enum dlock__state state;
	int initial; /* dlock_connect's own handshake is running */
	int wfail;   /* a write failed: the thread must disconnect */
	int refused; /* a reconnect's HELLO was refused: pause first */
	int64_t reconnect_at, connect_deadline, backoff;
	struct dl_linebuf lb;
	char *out; /* bytes written but not yet taken by the kernel */
	size_t out_off, out_len, out_cap;
	/* the server granted or confirmed what no server may (token 0, a
	 * lease longer than asked, holds past DL_REENTRY_MAX): the line's
	 * request failed with DLOCK_EPROTO and the connection is dropped
	 * (dlock_reply.c, insane) */
	int insane;
	/* waits of this connection given up (their CANCEL sent) whose grant
	 * may still cross it: a "* GRANTED" nobody waits for is given back
	 * only while some may; past that the server grants what nobody
	 * asked, and is dropped (found from outside: a server streaming
	 * unsolicited grants had the client queue an UNLOCK for each, 77 MB
	 * in seconds). Zeroed by each new connection. */
	uint64_t crossing;
	/* input() stopped at DLOCK__READ_TURN with more to read: the thread
	 * reads again before it sleeps */
	int input_more;
};

/* Learnt from HELLO. */
struct dlock__hello {
	int64_t default_ttl;
	int auth_required;
	atomic_int role; /* enum dlock__role: dlock_server_role() */
	/* The cluster id the client holds to (options.cluster, or the
	 * first a server named: "" until then), the server it came from
	 * ("" for the option), and how many HELLOs in a row named
	 * another: at naddrs, requests fail with DLOCK_ECLUSTER. */
	char cluster[DL_CLUSTER_ID_LEN + 1];
	char cluster_from[DLOCK__SERVER_NAME_MAX];
	int cluster_refused;
	/* the server takes request ids (LOCK req=): 0.4.0 or later, as its
	 * HELLO on this connection said */
	int takes_req;
};

/* What the client says of itself (options.describe), as sent
 * (dlock_desc.c); nothing when all are empty, or once a server refused
 * it. */
struct dlock__describe {
	char host[DL_DESC_HOST_MAX + 1];
	char cmd[DL_DESC_CMD_MAX + 1];
	uint32_t pid;
	int refused;
};

/* The requests, each on at most one list (enum dlock__where). */
struct dlock__reqs {
	struct dlock__req *fifo, *fifo_tail;	 /* sent, in order */
	struct dlock__req *unsent, *unsent_tail; /* to write on connect */
	struct dlock__req *waiting;		 /* QUEUED LOCKs */
	struct dlock__req *acquiring;		 /* LOCK calls in flight */
	struct dlock__req *stats_req;		 /* reading a STATS body */
	uint64_t stats_left;			 /* its lines still to come */
	uint64_t seq;				 /* tags: "r<seq>" */
};

/* The leases (dlock_req.c). */
struct dlock__leases {
	struct dlock__lease *leases;
	int notify_count;	      /* handles with notify set */
	int risk_count;		      /* handles with risk_notify set */
	int contended_count;	      /* handles with contended_notify set */
	const dlock_lease *cb_handle; /* in on_lost or on_at_risk now */
};

/* The watches (dlock_watch.c). */
struct dlock__watches {
	struct dlock__watch *watches;	 /* what the server was asked */
	struct dlock__wev *wq, *wq_tail; /* events not yet taken */
	size_t wq_n;			 /* how many */
	uint64_t missed;		 /* dropped since the last notice */
	pthread_cond_t cv;		 /* an event came; closing */
};

struct dlock_client {
	pthread_mutex_t mu;
	struct dlock__lwait *lwait; /* threads waiting for a name, FIFO */
	pthread_cond_t idle_cv;	    /* callers left; a callback returned */
	pthread_t thread;
	int thread_started;
	int wake[2];  /* self-pipe: [0] polled by the thread */
	int timer;    /* the thread's CLOCK_BOOTTIME timerfd, or -1 */
	int closing;  /* dlock_close has begun */
	int ncallers; /* threads inside public calls */

	/* options (immutable after dlock_connect) */
	struct dlock_options opt; /* strings point to the copies below */
	char *host, *unix_path, *password, *user;
	char owner[DL_OWNER_MAX + 1];
	char owner_key[DL_OWNER_SECRET_MAX + 1]; /* "" until the server says */

	struct dlock__addrs addr;
	struct dlock__conn conn;
	struct dlock__hello hello;
	struct dlock__describe desc;
	struct dlock__reqs rq;
	struct dlock__leases ls;
	struct dlock__watches w;

	/* Partitions (dlock_route.c). A client whose first connection read
	 * a map (MAP epoch > 0) routes each call about a name to a leg: an
	 * ordinary client of that name's partition, made by it (parent set;
	 * on the router's list of legs through leg_next). rt is set once
	 * (NULL: not partitioned, every call is this client's own) and read
	 * without mu. The legs' options that dlock_connect() only borrowed:
	 * copies (a leg is made later). */
	struct dlock__router *_Atomic rt;
	struct dlock_client *parent;
	struct dlock_client *leg_next;
	char *tls_ca, *tls_cert, *tls_key, *tls_server_name;
};

/* ---- dlock_req.c --------------------------------------------------------- */

int64_t dlock__now(void);
/* The margin taken off a granted TTL: the server's ms rounding and the
 * difference of clock rates (2 ms + 1 per mille). */
int64_t dlock__slack(int64_t ttl_ms);
/* The lost guard of a lease of this TTL. */
int64_t dlock__guard(const struct dlock_client *c, int64_t ttl_ms);
void dlock__wake(struct dlock_client *c);
void dlock__cond_init(pthread_cond_t *cv);
/* Wait on cv until deadline (DLOCK__NEVER: no limit); 0, or ETIMEDOUT. */
int dlock__cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline);

struct dlock__req *dlock__req_new(enum dlock__op op, const char *name,
				  int internal);
void dlock__req_free(struct dlock__req *q);

/* Request lists (c->fifo, c->unsent, c->waiting, a disconnect's): singly
 * linked through next, with a tail pointer where the list keeps one
 * (NULL for c->waiting's, in pop and remove). */
void dlock__list_append(struct dlock__req **head, struct dlock__req **tail,
			struct dlock__req *q);
/* The first request, unlinked, or NULL. */
struct dlock__req *dlock__list_pop(struct dlock__req **head,
				   struct dlock__req **tail);
/* Put the linked run first..last in front of the list. */
void dlock__list_prepend(struct dlock__req **head, struct dlock__req **tail,
			 struct dlock__req *first, struct dlock__req *last);
/* Unlink q if it is on the list. */
void dlock__list_remove(struct dlock__req **head, struct dlock__req **tail,
			struct dlock__req *q);
/* Forget the thread's last server error (at the start of each call). */
void dlock__last_error_clear(void);
/* Set it (a client-side failure the caller should read about: TLS). */
void dlock__last_error_set(const char *text);
/* Format q, queue its bytes and put it on the FIFO (connection UP). */
int dlock__req_write(struct dlock_client *c, struct dlock__req *q);
/* Write if UP, else keep for the reconnect; a caller's call: errors
 * DLOCK_ECANCELED, DLOCK_ECLOSED, DLOCK_ENOMEM. */
int dlock__req_submit(struct dlock_client *c, struct dlock__req *q);
/* Submit and wait for the outcome. On timeout the request is given up
 * and *qp set to NULL (no longer the caller's). The NO/ERR text goes to
 * the thread's dlock_last_error(). */
int dlock__call(struct dlock_client *c, struct dlock__req **qp);
/* The outcome is known: wake the caller, or free an orphan. */
void dlock__req_finish(struct dlock_client *c, struct dlock__req *q, int rc);
/* Fire and forget (clean-ups): UNLOCK of a grant nobody wants, CANCEL. */
void dlock__internal(struct dlock_client *c, enum dlock__op op,
		     const char *name, uint64_t token, int last_hold);
void dlock__acq_remove(struct dlock_client *c, struct dlock__req *q);
/* `name` may be free now: wake the first thread waiting for it. */
void dlock__name_wake(struct dlock_client *c, const char *name);
int dlock__name_acquiring(const struct dlock_client *c, const char *name);
void dlock__flush(struct dlock_client *c);

/* key=<u64> of a reply or body line: 1 with *out set when it is there, a
 * number and at most max; else 0. */
int dlock__kv_u64(const struct dl_reply *r, const char *key, uint64_t max,
		  uint64_t *out);
/* Keep the proof= and until= a reply gave lease l (none: kept as was). */
void dlock__lease_proof(struct dlock__lease *l, const struct dl_reply *r);

/* STATUS and HOLDERS fields mode= limit= holders= waiters=. */
void dlock__status_extra(const struct dl_reply *r, struct dlock_status *st);
/* The DLOCK_E* code of a NO/ERR reply (and its text kept in q->err). */
int dlock__reply_error(struct dlock__req *q, const struct dl_reply *r);

struct dlock__lease *dlock__lease_find(struct dlock_client *c, const char *name,
				       uint64_t token);
/* A grant of (q->name, token) confirmed by a request sent at sent_at with
 * `ms` of lease left: a new handle for q's caller (q->handle). */
int dlock__lease_grant(struct dlock_client *c, struct dlock__req *q,
		       uint64_t token, int64_t ms, int64_t sent_at);
/* The server confirmed the lease for ms from sent_at. */
void dlock__lease_confirm(struct dlock_client *c, struct dlock__lease *l,
			  const struct dlock__req *q, int64_t sent_at,
			  int64_t ms);
/* Mark at risk (once until confirmed again: dlock__lease_confirm); on_at_risk
 * is called by the thread for each handle not lost yet, before any
 * on_lost of it. */
/* Write a renewal of l now (an internal REFRESH with its TTL; the reply
 * confirms, reclaims or loses it): 0, or an error when it could not be
 * written. l->refreshing is set until its reply. */
int dlock__lease_renew(struct dlock_client *c, struct dlock__lease *l);
void dlock__lease_risk(struct dlock_client *c, struct dlock__lease *l);
/* A new acquire's request id (LOCK req=): 64 random bits, never 0. */
uint64_t dlock__request_id(const void *salt);
/* The server said `waiters` wait for l (* WAITING): note it, and have
 * on_contended called for each of its handles. */
void dlock__lease_waiting(struct dlock_client *c, struct dlock__lease *l,
			  uint32_t waiters);
/* Mark lost; on_lost is called by the thread for each handle. */
void dlock__lease_lose(struct dlock_client *c, struct dlock__lease *l,
		       enum dlock_lost_reason why);
void dlock__lease_unlink(struct dlock_client *c, struct dlock__lease *l);
void dlock__lease_unref(struct dlock__lease *l);
/* Lease l goes from client `from` to client `to` (another partition's
 * connection of the same router, or the router's own): off from's list,
 * onto to's, its pending callbacks with it, renewed by `to` at once.
 * Takes both clients' mu (no other lock held; legs by address, a
 * router's own client last) and waits for a callback of from's about one
 * of its handles to return. Nothing is done when l is no longer from's
 * (moved or released meanwhile), nor, unless `unlocking` (the caller is
 * unlocking its last handle), when it is lost or being unlocked. */
void dlock__lease_move(struct dlock__lease *l, struct dlock_client *from,
		       struct dlock_client *to, int unlocking);
/* Release a grant nobody wants: undo one hold, or the whole lease. */
void dlock__cleanup_grant(struct dlock_client *c, const char *name,
			  uint64_t token);
/* Give back the grants a multi-lock holds and no handle stands for (an
 * UNLOCK each); none are left. */
void dlock__multi_giveback(struct dlock_client *c, struct dlock__req *q);
/* The DLOCK_E* code of "* FAILED <first> <WORD> <rest...>", and in q->err
 * the line a single LOCK of the failing name would have got ("NO
 * DEADLOCK c 2 bob b"). */
int dlock__failed_error(struct dlock__req *q, const struct dl_reply *r);

/* ---- dlock_io.c ---------------------------------------------------------- */

/* Resolve the options' address into c->addrs. */
int dlock__resolve(struct dlock_client *c);
/* Blocking connect for dlock_connect(), bounded by deadline, trying the
 * addresses from c->addr_i on; sets c->fd and c->addr_i. */
int dlock__connect_sync(struct dlock_client *c, int64_t deadline);
/* The address to go to for "active=<host:port>" (a standby's word):
 * c->hint_i. */
void dlock__hint(struct dlock_client *c, struct dl_str active);
/* Why address i could not be used (c->why[i]). */
void dlock__why(struct dlock_client *c, int i, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* dlock_connect failed with DLOCK_ECONNECT: the thread's
 * dlock_last_error() says why, address by address (with options.servers,
 * each prefixed by its entry). */
void dlock__why_report(const struct dlock_client *c);
void *dlock__thread_main(void *arg);
/* A reconnect's HELLO was answered OK (state DLOCK__GREETING): the connection
 * is UP, and what waited for it is sent (dlock_io.c). */
void dlock__io_hello_ok(struct dlock_client *c);

/* ---- dlock_reply.c ------------------------------------------------------- */

/* One line from the server; -1 when the stream is not what we expect
 * (the caller drops the connection). */
int dlock__line_in(struct dlock_client *c, char *line, size_t len);

/* ---- dlock.c ------------------------------------------------------------- */

/* A public call begins (takes c->mu; DLOCK_ECANCELED once closing) and
 * ends (gives it back). */
int dlock__enter(struct dlock_client *c);
void dlock__leave(struct dlock_client *c);

/* A call's arguments: a lock name the server would refuse, a duration
 * out of the protocol's range. */
static inline int dlock__bad_name(const char *name)
{
	return !name || dl_check_name(name, strlen(name)) < 0;
}

static inline int dlock__bad_ms(int64_t ms)
{
	return ms < 0 || (uint64_t)ms > DL_DURATION_MAX_MS;
}

/* dlock_close's first step: closing set, every call waiting in c woken
 * with DLOCK_ECANCELED, nothing freed (again: no effect). */
void dlock__cancel(struct dlock_client *c);
/* A thread inside a call of c that is not in c->mu (a call routed to a
 * leg): dlock_close() waits for it. DLOCK_ECANCELED once closing. */
int dlock__hold(struct dlock_client *c);
void dlock__unhold(struct dlock_client *c);
/* A leg of router c: an ordinary client of `servers` with c's options,
 * owner and key, its description, and c as its parent. */
int dlock__leg_connect(struct dlock_client *c, const char *servers,
		       struct dlock_client **out);
/* The client a call about lease handle h goes to: the leg that holds it
 * when c is its router, else c. */
struct dlock_client *dlock__lease_client(struct dlock_client *c,
					 const dlock_lease *h);

/* ---- dlock_route.c ------------------------------------------------------- */

/*
 * A routed call is a loop (dlock.c, dlock_ask.c, dlock_watch.c):
 *
 *     struct dlock__hop hop = {0};
 *     while (dlock__route(c, name, &hop, &err))
 *             err = call_at(hop.leg, ...);
 *     return err;
 *
 * dlock__route picks the client to send to (c itself when it is not
 * partitioned, or for a name no partition of its map serves), follows a
 * MOVED the last try got (reading MAP again, or going to the partition it
 * names; at most DLOCK__MOVES_MAX), and returns 0 with *err final.
 */
#define DLOCK__MOVES_MAX   3
#define DLOCK__PARTS_MAX   64 /* partitions a map may have */
#define DLOCK__PART_ID_MAX 32 /* bytes of a partition's id */
struct dlock__hop {
	struct dlock_client *leg; /* the client of this try; NULL: none yet */
	int to;			  /* partition a MOVED named, -1: the map's */
	int moves;		  /* MOVED answers followed */
	int held;		  /* dlock__hold(c) was taken */
	int counted;		  /* leg is a leg, counted in the router's
				     users until the next dlock__route */
	int64_t settle_end;	  /* the name's new partition settling: no
				     pause after this (0: none yet) */
	int64_t pause;		  /* the next pause */
};
int dlock__route(struct dlock_client *c, const char *name,
		 struct dlock__hop *hop, int *err);
/* The name's new partition settling after a move (DLOCK__SETTLE_MS,
 * dlock_route.c): 1 after a pause, while the request timeout since the
 * first pause lasts; else 0. For dlock__route and dlock__lease_follow. */
int dlock__settle(struct dlock_client *c, struct dlock__hop *hop);
/* A call about a lease (dlock_unlock, dlock_refresh) counts itself on the
 * router's users while it may go from one leg to another: no leg is
 * closed under it. *used: 1 when counted (c routes), to give to
 * dlock__router_unuse. DLOCK_ECANCELED once closing. */
int dlock__router_use(struct dlock_client *c, int *used);
void dlock__router_unuse(struct dlock_client *c, int used);
/* Where lease `name`, whose request through client `from` was told
 * `moved` (NO MOVED), goes now (dlock_follow.c moves it there): 0 with
 * *to the client of its name's partition by the map, read again first if
 * need be (a leg, made if need be, or c for a name no partition serves)
 * -- or of the partition the MOVED named, when the map could not be read
 * -- and *used to give to dlock__router_unuse (the leg is counted on the
 * router's users until then); 1 when the map names `from` still (its
 * daemon has not read the newest map yet); DLOCK_EMOVED when c routes
 * nothing or the partition named cannot be added; or why no connection
 * could be had. Blocks; no lock held. c is the router. */
int dlock__lease_home(struct dlock_client *c, const char *name,
		      struct dlock_client *from, const char *moved,
		      struct dlock_client **to, int *used);
/* The mover of router c (a part of the router, dlock_follow.c's); NULL
 * when c routes nothing. */
struct dlock__mover *dlock__router_mover(struct dlock_client *c);
/* dlock_connect: read MAP on c's first connection; a map of epoch > 0
 * makes c a router (an error, or epoch 0, leaves it as it is). */
void dlock__router_start(struct dlock_client *c);
/* dlock_close: no new leg, every leg closed (before c's own thread
 * stops); then, once no caller is left, the router freed. */
void dlock__router_close(struct dlock_client *c);
void dlock__router_free(struct dlock_client *c);

/*
 * What spans partitions (dlock_span.c): a call made on every partition.
 * dlock__span_parts reads MAP again on c's first connection (taken if
 * newer) and lists into out (DLOCK__PARTS_MAX of room) the partitions
 * that serve a slot of the map, in the router's order -- with `every`,
 * every partition it knows, served or not; with a `prefix` (NULL: none)
 * that holds a whole {tag}, the partition of its slot only (every name
 * under it is in that slot) -- and says how many: 0 when c routes
 * nothing. dlock__span_leg gives
 * partition `i`'s leg -- made if need be when `make`, else NULL with *err
 * 0 when none was made -- counted on the router's users until
 * dlock__router_unuse(c, 1). The caller holds c (dlock__hold).
 */
struct dlock__span_part {
	int i; /* the partition's index in the router */
	char id[DLOCK__PART_ID_MAX + 1];
};
int dlock__span_parts(struct dlock_client *c, const char *prefix, int every,
		      struct dlock__span_part *out);
struct dlock_client *dlock__span_leg(struct dlock_client *c, int i, int make,
				     int *err);
/* dlock_locks() (dlock_ask.c) on a router: every partition's page,
 * merged; the arguments checked. */
int dlock__span_locks(struct dlock_client *c, const char *prefix,
		      const char *after, unsigned limit, int by_waiters,
		      void (*cb)(const char *name,
				 const struct dlock_status *st, void *arg),
		      void *arg, uint64_t *more);
/* dlock_watch() or dlock_unwatch() (op) of a prefix on a router: on every
 * partition's leg. */
int dlock__span_watch(struct dlock_client *c, enum dlock__op op,
		      const char *pat, int64_t *holders);

/* ---- dlock_follow.c ------------------------------------------------------ */

/*
 * A router's mover: the leases whose renewal was told MOVED, moved to
 * their new partition's connection by a thread of its own (dlock_follow.c
 * says why, and the lock order). A part of struct dlock__router
 * (dlock_route.c), which calls dlock__mover_init when it is made,
 * dlock__mover_halt then dlock__mover_stop when it closes, and
 * dlock__mover_destroy when it is freed; only dlock_follow.c touches its
 * fields.
 */
struct dlock__move; /* one lease to move (dlock_follow.c) */
struct dlock__mover {
	/* its own lock, the last in the library's order (a leg's thread
	 * takes it under its mu) */
	pthread_mutex_t mu;
	pthread_cond_t cv;	   /* a move to make; stop */
	struct dlock__move *moves; /* to make, in order */
	struct dlock__move *tail;
	int started; /* its thread was started */
	int stop;    /* closing: no more moves */
	pthread_t thread;
};
void dlock__mover_init(struct dlock__mover *mv);
void dlock__mover_destroy(struct dlock__mover *mv);
/* dlock_close, first: no more moves, the thread woken to stop. */
void dlock__mover_halt(struct dlock__mover *mv);
/* dlock_close, once the legs are canceled: the mover stops (its calls in
 * the legs end, canceled), and the moves it did not make are dropped. */
void dlock__mover_stop(struct dlock__mover *mv);

/*
 * A lease follows its name (dlock_follow.c).
 * A call about lease l (dlock_unlock, dlock_refresh), sent through its
 * client `from`, ended with *err: 1 to send it again through the
 * lease's client (dlock__lease_client) -- after NO MOVED the lease went
 * to the connection of the partition that serves its name now (MAP read
 * again if newer, the connection made if need be), and after a move the
 * partition may be settling (a pause); 0 with *err final. Blocks; no
 * lock held. c is the router; `hop` (zeroed by the caller) counts the
 * moves; `unlocking`: as for dlock__lease_move.
 */
int dlock__lease_follow(struct dlock_client *c, struct dlock__lease *l,
			struct dlock_client *from, struct dlock__hop *hop,
			int *err, int unlocking);
/* A renewal of lease l through `from` was told `moved` (NO MOVED): its
 * thread holds from->mu and may not block, so the move is the router's
 * mover thread's; l->moving is set until it is made (its new client
 * renews it at once) or given up (from renews it again after the usual
 * pause). 0, or an error (the renewal is then retried as after any
 * failure). */
int dlock__move_later(struct dlock_client *from, struct dlock__lease *l,
		      const char *moved);

/* ---- dlock_io.c (legs) --------------------------------------------------- */

/* Give leg c a new server list (the map changed its partition's
 * addresses): resolved first, then swapped in; the connection stays. */
int dlock__readdress(struct dlock_client *c, const char *servers);

/* ---- dlock_watch.c ------------------------------------------------------ */

/* The reply to a DLOCK__WATCH or DLOCK__UNWATCH request (a reply handler of
 * dlock_reply.c: it takes every reply, returns 1). */
int dlock__watch_reply(struct dlock_client *c, struct dlock__req *q,
		       const struct dl_reply *r);
/* A "* WATCH" or "* WATCH-OVERFLOW" event; 0 if r is neither. */
int dlock__watch_event(struct dlock_client *c, const struct dl_reply *r);
/* A new connection: watch again (an internal DLOCK__WATCH for each). */
void dlock__watch_resume(struct dlock_client *c);
/* Free the watches and the events (client_free). */
void dlock__watch_free(struct dlock_client *c);

/* WATCH or UNWATCH (op) of `pat` on c itself, routing nothing. */
int dlock__watch_at(struct dlock_client *c, enum dlock__op op, const char *pat,
		    int64_t *holders);
/* c asked its server to watch `pat` (takes c->mu). */
int dlock__watching(struct dlock_client *c, const char *pat);

/* ---- dlock_ask.c --------------------------------------------------------- */

/* dlock_locks() on c itself, routing nothing. */
int dlock__locks_at(struct dlock_client *c, const char *prefix,
		    const char *after, unsigned limit, int by_waiters,
		    void (*cb)(const char *name, const struct dlock_status *st,
			       void *arg),
		    void *arg, uint64_t *more);

/* ---- dlock_desc.c -------------------------------------------------------- */

/* The client's description from the options (options.describe): into
 * c->desc_*, encoded as sent; the options' strings are not kept. */
void dlock__describe(struct dlock_client *c, const struct dlock_options *o);
/* 1 when there is something to say (and no server refused it). */
int dlock__describing(const struct dlock_client *c);
/* A word of a holder line or a NO BUSY, key=value, that describes a
 * holder (host=, pid=, cmd=, held_ms=, user=): into h, decoded in place
 * in `value` (it points into a line the caller keeps). 1 if it was one. */
int dlock__holder_word(struct dlock_holder *h, const char *key, char *value);

/* ---- dlock_tls.c --------------------------------------------------------- */

struct dlock__tls;
/* c->tls from the options: NULL when no TLS is asked for (options.tls,
 * tls_ca, tls_cert) or a unix socket is used. DLOCK_ETLS (a file that does
 * not load; why in the thread's dlock_last_error()), DLOCK_ENOMEM. */
int dlock__tls_new(struct dlock_client *c, const struct dlock_options *o);
void dlock__tls_free(struct dlock__tls *t); /* NULL is a no-op */
/* TLS on the new connection c->fd to address i: the name to verify is
 * set. DLOCK_ENOMEM, DLOCK_ETLS. */
int dlock__tls_begin(struct dlock_client *c, int i);
/* Advance the handshake: 0 done, 1 not yet (poll for dlock__io_events()),
 * DLOCK_ETLS (why: dlock__tls_error()). */
int dlock__tls_handshake(struct dlock_client *c);
/* 1 once TLS broke the connection (handshake, certificate, a bad record);
 * dlock__tls_error() says why until the next dlock__tls_begin(). */
int dlock__tls_failed(const struct dlock_client *c);
const char *dlock__tls_error(const struct dlock_client *c);

/* The transport, plain or TLS. Plaintext in, like read(2): -1 with errno
 * EAGAIN when nothing more now, EPROTO on a TLS error. */
ssize_t dlock__io_read(struct dlock_client *c, char *buf, size_t n);
/* dlock__flush() with TLS: c->out sealed, the ciphertext sent. */
void dlock__tls_flush(struct dlock_client *c);
/* 1 while bytes wait for the socket (plaintext, or TLS records). */
int dlock__io_pending(const struct dlock_client *c);
/* Close c->fd (after a TLS goodbye, if the kernel takes it at once). */
void dlock__io_close(struct dlock_client *c);

#endif /* DL_CLIENT_DLOCK_PRIVATE_H */
