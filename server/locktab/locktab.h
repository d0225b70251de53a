/* SPDX-License-Identifier: MIT */
/*
 * locktab.h -- the lock table: locks, leases, owners, FIFO queues, tokens.
 *
 * This is the whole of dlockd's locking semantics, and nothing else: it
 * knows no sockets, no protocol text and no Redis. The connection layer
 * calls it with parsed requests and turns its results into replies; the
 * store reads the locks it marks dirty and persists them.
 *
 * Objects and ownership (all owned by the table, freed by it):
 *
 *   lock    a name; exists while it has holders or waiters, and until the
 *           store has seen its last change (see dirty set below).
 *   lease   one holder of a lock: owner, fencing token, hold count
 *           (reentrancy), deadline, mode. A lock keeps a list of holders,
 *           each with its own lease and token. Who may hold at once:
 *             - a lock (limit 1): one exclusive holder, or any number of
 *               shared ones (up to DL_SHARED_MAX);
 *             - a semaphore (limit n > 1): up to n holders, each holding
 *               one permit (semaphore holders are not "shared": a permit
 *               is a permit).
 *           The limit is the lock's, set by the request that creates it
 *           (the lock has neither holders nor waiters); a request with
 *           another limit is refused (DL_LIMIT_MISMATCH) while it lives.
 *           So is its delay (LOCK delay=, a side object): set by the
 *           request that finds it free, raised -- never lowered -- by each
 *           later one admitted or queued that asks for more. After a
 *           lease ends without a release (it expires, or is broken), no
 *           new holder is let in until that much time has passed: the
 *           lock is "in its delay", busy with nobody holding it, and
 *           lives (with its record) until the delay is over.
 *   waiter  a queued LOCK request of one session; FIFO per lock. A waiter
 *           without a session is a "placeholder" restored from Redis: it
 *           keeps its place until its owner asks again or its grace ends.
 *   owner   an identity (HELLO owner=<id>, or a connection's default id).
 *           Leases belong to owners and survive disconnects; waiters belong
 *           to sessions and leave with them. Reference-counted by its
 *           sessions, leases and waiters. Its key is its id, or
 *           <account>=<id> for an owner of a named account (below).
 *   account the owners of one user (users.h), by the part of their key
 *           before '=' ("" for a plain id: the default account). The same
 *           id under two accounts is two owners. It counts its owners'
 *           leases and waiters, for the quotas a session brings
 *           (dl_session_set_quota). Reference-counted by its owners.
 *   session embedded by the caller (a connection): its owner and waiters.
 *
 * Invariants:
 *   - tokens strictly increase across every grant (dl_token_floor() makes
 *     that hold across restarts);
 *   - all holders of a lock have one mode: exclusive (at most `limit`
 *     of them) or shared (limit 1);
 *   - strict FIFO across modes: when the head of a queue could be
 *     admitted it has been, unless it is a placeholder, grants are
 *     suspended (persistence down) or the lock is in its delay. A
 *     release, an expiry or the end of a delay grants the head,
 *     and then the new head while it can be admitted: one exclusive
 *     waiter, or a run of consecutive shared waiters in one step, or as
 *     many as there are free permits -- never anyone behind a waiter
 *     that cannot be admitted;
 *   - a lease whose deadline has passed is never reported valid: every
 *     operation on a lock first reaps its overdue holders, so the wheel's
 *     one-tick delay affects only when the * EXPIRED event is sent.
 *
 * Events (grants to waiters, wait timeouts, expiries) are passed to the
 * event hook synchronously, during the call that caused them. The hook
 * must not call back into the table; it may only record the event.
 * Changes of a lock's holders (a lease granted, released, expired, broken
 * or withdrawn), whoever caused them, go to the change hook the same way
 * and under the same rule (observers who hold nothing: WATCH). A lease
 * restored from the store, or a quarantine, is no change.
 *
 * Dirty set: every change to a lock marks it dirty. dl_locktab_drain_dirty()
 * hands each dirty lock, in its final state, to the store once and then
 * frees locks that became empty. This is the one place where state changes
 * leave the table; results and events flagged `durable` must not reach a
 * client before the drain that carries their change has been persisted.
 *
 * Time: monotonic milliseconds from the now() hook. Not thread-safe.
 */
#ifndef DL_SERVER_LOCKTAB_H
#define DL_SERVER_LOCKTAB_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "server/locktab/locktab_desc.h"
#include "server/locktab/htab.h"
#include "server/locktab/wheel.h"

struct dl_locktab;
struct dl_owner;
struct dl_waiter;
struct dl_account;

/* Largest lease TTL the table stores (ms, about 49 days). */
#define DL_TTL_STORE_MAX UINT32_MAX

/* ---- sessions ------------------------------------------------------------ */

/* Embedded in a connection; fields are the table's, read-only outside. */
struct dl_session {
	struct dl_owner *owner;
	struct dl_session *onext, *oprev; /* sessions of the same owner */
	struct dl_waiter *waiters;	  /* this session's queued requests */
	void *data;			  /* the caller's, untouched */
	uint32_t owner_gen;   /* bumped by every change of owner (HELLO) */
	struct dl_desc *desc; /* what the client said of itself (a
				 reference; NULL: nothing): each lease
				 granted to the session takes it */
	/* the account's quotas, set by the caller (0: none): a LOCK that
	 * would take the account's leases plus waiters to max_locks, or its
	 * waiters to max_waits, is refused (DL_ELIMIT) */
	uint32_t max_locks, max_waits;
};

/* ---- owner keys --------------------------------------------------------- */

/* Bytes of an owner's key: <account>=<id>. */
#define DL_OWNER_KEY_MAX (DL_USER_MAX + 1 + DL_OWNER_MAX)

/* 0 if key is an owner id (dl_check_owner) or <account>=<id> with a valid
 * user name (dl_check_user) and id; DL_EBADARG otherwise. */
int dl_owner_key_check(struct dl_str key);
/* The key of id in `account` ("" or NULL: the id itself) into buf
 * (DL_OWNER_KEY_MAX + 1 bytes); *out points into buf. DL_EBADARG if
 * either is invalid. */
int dl_owner_key(char *buf, const char *account, struct dl_str id,
		 struct dl_str *out);
/* The parts of a key: its account ("" for a plain id) and its id. */
struct dl_str dl_owner_key_account(struct dl_str key);
struct dl_str dl_owner_key_id(struct dl_str key);

/* ---- read-only views (for the store and STATUS) ----------------------- */

/*
 * Memory. A held lease costs its lease, its lock and a bucket of the lock
 * hash: 72 + 40 + name bytes, in two malloc chunks (80 and 64 bytes for a
 * name under 16 bytes: glibc adds 8 and rounds to 16). Hence what only
 * some leases have stored after the lease, only when there is one (its
 * holder's description, a pointer to a shared value; its tag), a queue
 * without a tail pointer (its qprev links are circular) and bit-fields:
 * each of them is what keeps a struct in the smaller chunk (make bench
 * measures bytes per lease; its clients describe nothing). A described
 * lease asks 80 bytes, a 96-byte chunk (glibc's malloc_usable_size says
 * 88), and shares its description with the other leases of its
 * connection.
 */
struct dl_lease {
	struct dl_wheel_entry timer; /* fires at the deadline */
	unsigned kind : 2;	     /* DL__TIMED_LEASE */
	unsigned has_req : 1;	     /* extra[] holds a request id */
	unsigned shared : 1;	     /* mode=shared */
	unsigned has_tag : 1;	     /* extra[] holds a tag */
	unsigned has_desc : 1;	     /* extra[] holds a description */
	unsigned has_warn : 1;	     /* it has a warning (a side object) */
	unsigned restored : 1;	     /* restored from a record and not refreshed
					since: a reentry does not extend it */
	unsigned count : 24;	     /* reentrant holds, 1..DL_REENTRY_MAX */
	uint32_t ttl_ms; /* what a restore gives it (R + ttl) and a bare
			    REFRESH's: never less than what remains */
	struct dl_lock *lock;
	struct dl_owner *owner;
	struct dl_lease *next; /* next holder of the same lock */
	uint64_t token;
	uint64_t granted_at; /* monotonic ms: the hold time (STATUS, the
				histogram) */
	/* has_desc: a struct dl_desc * (a reference, its holder's: read it
	 * with dl_lease_desc), then has_req: the req= of the grant or
	 * reentry that last carried one, 8 bytes, unaligned (read it with
	 * dl_lease_req; a reentry overwrites it), then has_tag: the id= of
	 * the granting request, NUL-terminated (read it with dl_lease_tag).
	 * None: no bytes here. */
	char extra[];
};

struct dl_waiter {
	struct dl_wheel_entry timer; /* wait deadline; idle when wait=inf */
	unsigned kind : 2;	     /* DL__TIMED_WAITER */
	unsigned shared : 1;	     /* asks for mode=shared */
	unsigned has_warn : 1;	     /* asks for warn_ms (0: none) */
	unsigned notify : 1;	     /* asks for notify=waiters */
	unsigned tag_len : 8;
	uint32_t ttl_ms;  /* TTL of the lease it asks for */
	uint32_t warn_ms; /* the warning it asks for (has_warn) */
	struct dl_lock *lock;
	struct dl_owner *owner;
	struct dl_session *sess;	 /* NULL: a restored placeholder */
	struct dl_waiter *qnext, *qprev; /* the lock's queue: qnext ends in
					    NULL, qprev is circular (the
					    head's is the tail) */
	struct dl_waiter *snext, *sprev; /* the session's waiters */
	uint64_t wait_deadline;		 /* monotonic ms, UINT64_MAX for inf */
	uint64_t queued_at;	/* monotonic ms, for the wait histogram */
	uint64_t served;	/* put back: the token of its withdrawn grant */
	uint64_t req;		/* its request's req=, 0: none */
	struct dl_value *value; /* the value its lease is to have (its own,
				   given to the lease at the grant); NULL */
	char tag[DL_TAG_MAX];
};

struct dl_lock {
	struct dl_lease *holders; /* grant order */
	struct dl_waiter *qhead;  /* its qprev is the tail */
	uint32_t nwaiters : 24;	  /* <= DL_MAX_WAITERS_MAX */
	uint32_t dirty : 1;	  /* in the dirty set */
	uint32_t urgent : 1;	  /* ... with a change a held reply waits for */
	uint32_t has_delay : 1;	  /* it has a delay (a side object) */
	uint32_t delaying : 1;	  /* ... and is in it: grants nobody new */
	uint32_t notify : 1;	  /* a holder of it may have asked to be told
				     of waiters (a side object): none when it
				     has no holder */
	uint32_t valued : 1;	  /* a holder of it may have a value (a side
				     object): none when it has no holder */
	uint32_t listed : 1;	  /* has a holder or a waiter (LOCKS shows it;
				     counted in the index, locktab_index.c) */
	uint16_t nholders;
	uint16_t limit; /* holders at once: 1 (a lock), n (a semaphore) */
	struct dl_hnode hn;
	char name[]; /* hn.len bytes + NUL */
};

/* Bytes of an owner's proof: what proves a client is that owner, a hash
 * of the key it was given or brought (HELLO key=; cmd.c). */
#define DL_OWNER_PROOF_LEN 16

struct dl_owner {
	struct dl_session *sessions; /* attached sessions */
	struct dl_account *acct;     /* its key's account */
	uint32_t nleases;	     /* leases held */
	uint32_t nwaiters;	     /* waiters, placeholders included */
	uint8_t has_proof;	     /* proof[] binds it (dl_session_prove) */
	uint8_t proof[DL_OWNER_PROOF_LEN];
	uint32_t walk; /* a deadlock check's mark: its node + 1; 0 outside
			  one (in the padding: no byte more) */
	struct dl_hnode hn;
	char id[]; /* the key: hn.len bytes + NUL */
};

struct dl_account {
	uint32_t nleases;  /* leases of its owners */
	uint32_t nwaiters; /* waiters of its owners, placeholders included */
	uint32_t nowners;  /* owners in it */
	uint32_t ndelays;  /* locks kept in their delay after a lease of
			      its ended (LOCK delay=): each holds the
			      account as an owner does, and counts
			      against its max_locks as a lease does */
	struct dl_hnode hn;
	char name[]; /* hn.len bytes + NUL ("" the default account) */
};

/* ---- results ------------------------------------------------------------ */

enum dl_outcome {
	DL_GRANTED,    /* token, value = ttl_ms */
	DL_QUEUED,     /* value = position (1 = first behind the holders) */
	DL_BUSY,       /* value = ms until the lock could free */
	DL_RELEASED,   /* last hold released */
	DL_HELD,       /* value = holds left */
	DL_NOT_HOLDER, /* no lease with that token for this owner */
	DL_REFRESHED,  /* value = ttl_ms */
	DL_VALID,      /* token, value = remaining ms */
	DL_STALE,      /* token = current holder's token, or 0 */
	DL_CANCELLED,
	DL_NOT_QUEUED,
	DL_ALREADY_WAITING,  /* this session already waits for the lock */
	DL_BROKEN,	     /* BREAK: the lease ended; token = its token */
	DL_LIMIT_MISMATCH,   /* value = the lock's limit */
	DL_UPGRADE_DEADLOCK, /* exclusive asked by a shared holder; token =
				its shared lease's */
	DL_DEADLOCK,  /* the wait would close a cycle of owners waiting for
			 each other; value = owners in it (dl_locktab_cycle) */
	DL_RECLAIMED, /* RECLAIM: the lease is the table's again; token,
			 value = ttl_ms */
};

struct dl_result {
	enum dl_outcome outcome;
	unsigned durable : 1; /* reply only once the change is persisted */
	unsigned reentry : 1; /* GRANTED: one more hold of a lease the owner
				 already had (dl_locktab_revoke) */
	unsigned shorten : 1; /* REFRESHED: a shorter lease, not applied yet
				 (dl_locktab_shorten) */
	unsigned known : 1;   /* RECLAIMED: a lease the table knew, refreshed
				 (the fields are a REFRESHED's) */
	unsigned retry : 1;   /* GRANTED: a request granted before (its req=
				 is the lease's): no hold was added */
	unsigned tell : 1;    /* GRANTED: the lease asked to be told of
				 waiters and has some: the caller calls
				 dl_locktab_tell_waiting() once the reply is
				 sent */
	uint64_t token;
	uint64_t value;
	uint64_t deadline; /* GRANTED, REFRESHED: the lease's, monotonic ms */
	uint64_t from_deadline; /* REFRESHED with shorten: the lease's now */
	uint32_t ttl_ms; /* GRANTED: the lease's TTL; REFRESHED: the new one */
	uint32_t holds;	 /* GRANTED: the lease's holds, this one included */
};

enum dl_event_type {
	DL_EVENT_GRANTED, /* token, ttl_ms */
	DL_EVENT_TIMEOUT,
	DL_EVENT_EXPIRED,  /* token */
	DL_EVENT_EXPIRING, /* token, ttl_ms (what remains), deadline: a
			      lease's warning (LOCK warn=) */
	DL_EVENT_WAITING,  /* token, holds = the waiters: others wait for
			      a lease that asked (LOCK notify=waiters) */
	DL_EVENT_MOVED,	   /* a waiter left the queue: its lock went to
			      another partition (dl_locktab_extract) */
};

struct dl_event {
	enum dl_event_type type;
	unsigned durable : 1; /* as in dl_result */
	unsigned shared : 1;  /* GRANTED: the mode the waiter asked for */
	unsigned reentry : 1; /* GRANTED: as in dl_result */
	unsigned notify : 1;  /* GRANTED: the waiter asked notify=waiters */
	uint32_t limit;	      /* GRANTED: the lock's (dl_locktab_revoke) */
	uint64_t req;	      /* GRANTED: the waiter's req= (revoke) */
	struct dl_str value;  /* GRANTED: the new lease's value, len 0: none
				 (said in the event, and given back to the
				 waiter if the grant is withdrawn: revoke) */
	struct dl_str name;   /* borrowed for the duration of the hook */
	uint64_t token;
	uint64_t ttl_ms;
	uint64_t deadline;	 /* GRANTED: the lease's, monotonic ms */
	uint64_t wait_deadline;	 /* GRANTED: the waiter's (dl_locktab_revoke) */
	uint32_t asked_ttl_ms;	 /* GRANTED: the TTL the waiter asked for */
	uint32_t holds;		 /* GRANTED: as in dl_result */
	uint32_t asked_warn_ms;	 /* GRANTED: the warning it asked for */
	unsigned asked_warn : 1; /* ... if it asked for one */
	struct dl_str tag;
	struct dl_str by; /* EXPIRED by BREAK: who broke it (borrowed; len 0
			     for an expiry) */
};

/* A change of a lock's holders, for the change hook. */
enum dl_change_kind {
	DL_CHANGE_GRANTED,   /* a new lease (a reentry is none) */
	DL_CHANGE_RELEASED,  /* its last hold was released (UNLOCK) */
	DL_CHANGE_EXPIRED,   /* it reached its deadline */
	DL_CHANGE_BROKEN,    /* BREAK ended it */
	DL_CHANGE_WITHDRAWN, /* a grant persistence never recorded was taken
				back (dl_locktab_revoke) */
	DL_CHANGE_VALUE,     /* a lease's value changed (a REFRESH or a
				reentry with value=) */
};

struct dl_change {
	enum dl_change_kind kind;
	struct dl_str name;  /* borrowed for the duration of the hook */
	struct dl_str owner; /* the lease's owner key, borrowed as well */
	uint64_t token;	     /* the lease's */
	uint32_t holders;    /* the lock's holders once the change is made
				(before any waiter it lets in is served) */
	struct dl_str by;    /* BROKEN: who broke it (borrowed) */
	struct dl_str value; /* the lease's value, len 0: none (borrowed) */
};

struct dl_lock_status {
	int held;
	const struct dl_desc *desc; /* first holder's description, or NULL
				       (borrowed until the table changes) */
	uint64_t held_ms;	    /* how long the first holder has held */
	int shared;		    /* the holders' mode */
	uint64_t token;		    /* first holder's */
	uint64_t remaining;	    /* ms, first holder's */
	uint32_t count;		    /* first holder's */
	struct dl_str owner;
	uint32_t holders;
	uint32_t waiters;
	uint32_t limit;	     /* 1 for a free lock */
	uint32_t delay_ms;   /* the lock's delay, 0 if none */
	uint64_t delay_left; /* ms left of it, if the lock is in it */
	struct dl_str value; /* first holder's value, len 0: none (borrowed
				until the table changes) */
};

/* Latency histograms: bucket i counts values <= dl_hist_bounds_ms[i]; the
 * last bucket counts the rest (+Inf). */
#define DL_HIST_BUCKETS 12
extern const uint64_t dl_hist_bounds_ms[DL_HIST_BUCKETS - 1];

struct dl_hist {
	uint64_t bucket[DL_HIST_BUCKETS];
	uint64_t count;
	uint64_t sum_ms;
};

/* Contended locks by the length of their queue, kept as waiters come and
 * go (no walk): bucket i holds the locks whose waiters are at most
 * dl_queue_bounds[i] and more than the bound before (1, 2-5, 6-10,
 * 11-100, 101-1000, more). Where the contention is, without a metric
 * label per lock name; LOCKS by=waiters names the locks. */
#define DL_QUEUE_BUCKETS 6
extern const uint32_t dl_queue_bounds[DL_QUEUE_BUCKETS - 1];
extern const char *const dl_queue_labels[DL_QUEUE_BUCKETS];
unsigned dl_queue_bucket(uint32_t waiters);

struct dl_locktab_stats {
	uint64_t locks, leases, waiters, owners; /* gauges */
	uint64_t contended[DL_QUEUE_BUCKETS];	 /* gauges, see above */
	uint64_t grants, reentries, releases, expiries, timeouts, refreshes,
		cancels, revokes, breaks;
	uint64_t reclaims;     /* leases linked again by RECLAIM */
	uint64_t retries;      /* requests sent again (req=) that found their
				  grant or their wait */
	uint64_t deadlocks;    /* waits refused: DL_DEADLOCK */
	uint64_t walks_capped; /* deadlock checks that gave up at the cap */
	struct dl_hist wait;   /* LOCK to grant, per grant (0 if at once) */
	struct dl_hist hold;   /* grant to release or expiry, per lease */
};

struct dl_locktab_hooks {
	uint64_t (*now)(void *ctx); /* monotonic ms */
	void (*event)(struct dl_session *s, const struct dl_event *ev,
		      void *ctx);
	void *ctx;
	/* NULL: nobody observes */
	void (*change)(const struct dl_change *ch, void *ctx);
};

struct dl_locktab_limits {
	uint32_t max_waiters;	      /* per lock */
	uint32_t max_locks_per_owner; /* leases + waiters of one owner */
	/* 1: a release (UNLOCK) is a durable result, its reply waits for
	 * Redis like a grant's; 0: it is acknowledged at once and its write
	 * goes with the next batch (durable_release, dlockd.conf(5)). */
	uint8_t durable_release;
	/* Locks in the table at once (held or waited for); a LOCK that
	 * would make one more is refused (DL_ELIMIT). 0: no bound. */
	uint32_t max_locks;
};

/* ---- life cycle -------------------------------------------------------- */

/* NULL when out of memory. hash_seed randomises the hash tables. */
struct dl_locktab *dl_locktab_new(const struct dl_locktab_hooks *hooks,
				  const struct dl_locktab_limits *limits,
				  uint64_t tick_ms, uint64_t hash_seed);
/* Frees everything, sessions excepted (they are the caller's). */
void dl_locktab_free(struct dl_locktab *t);
void dl_locktab_set_limits(struct dl_locktab *t,
			   const struct dl_locktab_limits *limits);

/* ---- sessions ------------------------------------------------------------ */

/* Attach a new session to owner `id` (created if needed). */
int dl_session_init(struct dl_locktab *t, struct dl_session *s,
		    struct dl_str id, void *data);
/* Set the quotas of the session's account (see struct dl_session). */
void dl_session_set_quota(struct dl_session *s, uint32_t max_locks,
			  uint32_t max_waits);
/* The session's description from now on (d: a new reference is taken;
 * NULL: none), for the leases it is granted from now on and its waits;
 * leases granted before keep theirs. dl_session_close drops it. */
void dl_session_set_desc(struct dl_session *s, struct dl_desc *d);
/* Move the session to another owner. DL_EBADARG while it has waiters. */
int dl_session_set_owner(struct dl_locktab *t, struct dl_session *s,
			 struct dl_str id);
/*
 * Identity. An owner is bound to a proof (a hash of its key) from the
 * first session that proves it on: a session may become that owner only
 * with the same proof, so two clients that do not share the key never
 * act as one owner -- re-enter, release, refresh or cancel each other's
 * locks, or get each other's events -- whatever id they both say. The
 * binding lives as long as the owner (sessions, leases or waiters), and
 * is stored with its leases and waiters (record.h), so a restart or a
 * take-over keeps it. An owner with no proof (restored from a record of
 * a daemon that had none) is bound by the first that proves it.
 *
 * dl_session_prove: dl_session_set_owner with a proof. DL_EDENIED when
 * the owner is bound to another proof (nothing changes).
 */
int dl_session_prove(struct dl_locktab *t, struct dl_session *s,
		     struct dl_str id, const uint8_t proof[DL_OWNER_PROOF_LEN]);
/* Bind owner `id`, which exists, to `proof` if it has none (a loader
 * restoring a record that carries it). 0, DL_EDENIED if bound otherwise,
 * DL_EBADARG if there is no such owner. */
int dl_locktab_bind_proof(struct dl_locktab *t, struct dl_str id,
			  const uint8_t proof[DL_OWNER_PROOF_LEN]);
/* 1 if owner `id` exists and is bound to a proof other than `proof`
 * (dl_locktab_bind_proof would refuse it). */
int dl_locktab_proof_conflicts(struct dl_locktab *t, struct dl_str id,
			       const uint8_t proof[DL_OWNER_PROOF_LEN]);
/* The owner's proof, or NULL if it has none. */
const uint8_t *dl_owner_proof(const struct dl_owner *o);

/* Drop the session's waiters (the queues move on) and detach it. Leases
 * stay with the owner until they expire or are released. */
void dl_session_close(struct dl_locktab *t, struct dl_session *s);
struct dl_str dl_session_owner(const struct dl_session *s);

/* ---- requests ----------------------------------------------------------- */

/* What a LOCK or TRYLOCK asks for. */
struct dl_acquire {
	struct dl_str name;
	uint64_t ttl_ms;
	uint64_t wait_ms; /* 0 tries once, DL_WAIT_INF waits forever */
	struct dl_str tag;
	uint32_t limit;	     /* holders at once; 0 means 1 */
	uint8_t shared;	     /* mode=shared (limit 1 only) */
	uint8_t has_warn;    /* warn= was given: */
	uint32_t warn_ms;    /* the lease's warning, below ttl_ms (0: none) */
	uint32_t delay_ms;   /* the lock's delay (see above): at least this;
				0 asks for none */
	uint64_t req;	     /* a request id (req=), 0: none; see below */
	uint8_t notify;	     /* notify=waiters: tell the holder of waiters */
	struct dl_str value; /* value=: the lease's value (len 0: none; a
				reentry without one keeps the lease's) */
	/* The requester's budget of deadlock-check steps, debited by the
	 * check (below); at 0 its waits are not checked. NULL: none, each
	 * check looks at DL_DEADLOCK_WALK_MAX at most. */
	uint32_t *walk_budget;
};

/*
 * LOCK/TRYLOCK. An owner that holds the lock already gets its own lease
 * again (a reentry: one more hold, same token; a warn= given replaces the
 * lease's warning, none keeps it; notify asks it to be told of waiters
 * from then on), in the mode it holds:
 * an exclusive holder asking for shared re-enters its exclusive lease
 * (there is no downgrade in place); a shared holder asking for exclusive
 * is refused with DL_UPGRADE_DEADLOCK (it would wait for itself).
 * DL_LIMIT_MISMATCH when the lock lives with another limit. A lock in its
 * delay admits nobody new: a TRYLOCK is DL_BUSY (its value counts the
 * delay's rest), a LOCK queues. Errors:
 * DL_EBADARG (ttl 0 or too large, limit too large, shared with a limit,
 * a delay above DL_LOCK_DELAY_MAX_MS),
 * DL_ELIMIT (queue full, owner over its limit, reentry count),
 * DL_EUNAVAILABLE (grants suspended), DL_ENOMEM.
 */
int dl_locktab_acquire(struct dl_locktab *t, struct dl_session *s,
		       const struct dl_acquire *a, struct dl_result *res);

/*
 * Request ids (LOCK ... req=<n>). A client gives each acquire its own id
 * and sends the same one when it sends the request again after a drop or
 * a fail-over, not knowing whether the first was granted. A lease keeps
 * the id of the grant or reentry that last carried one (stored with it,
 * record.h), so that:
 *
 *   - a request whose id is the lease's, from its owner, was granted
 *     already: it gets that grant back (DL_GRANTED with `retry`, the
 *     lease's holds as they are -- no hold added -- and the lease
 *     extended to at least its TTL, as a reentry's; a restored lease
 *     too: the id shows a holder who knows it), not one more hold
 *     that its client would take for another process's;
 *   - a request whose id is that of a wait of its owner on another
 *     session (a connection its client gave up for dead, not closed
 *     yet) takes that wait over, in its place in the queue: the old
 *     session hears nothing more of it.
 *
 * Only the last id is kept: a retry of an earlier reentry of the same
 * lease is a new reentry. A lease granted without an id keeps none, and
 * a reentry with one then cannot store it (the lease has no room for
 * it): its retry is a new reentry too.
 *
 * Told that others wait (LOCK ... notify=waiters, Linux DLM's blocking
 * callback): a lease that asked gets DL_EVENT_WAITING, on every session
 * of its owner, with the number of waiters of its lock, when it is
 * granted while some wait (for a grant made by a reply, once the reply is
 * out: res->tell) and when a request queues behind it -- if it was never
 * told, if the queue has doubled since it was last told, or if that was
 * a second ago or more. So a queue growing to n tells it about log2(n)
 * times, plus once a second at most: one client's queued requests cannot
 * flood another's connection. A reentry with notify asks it for a lease
 * that did not; nothing takes it away but the lease's end.
 */
/*
 * Values (LOCK, REFRESH ... value=<text>): what a holder says of its
 * lease to whoever looks at the lock (STATUS, HOLDERS, WATCH events): an
 * elected leader's address, for its followers. A grant with one gives it
 * to the new lease (a reentry, or a retry, leaves the lease's as it is:
 * it may be another process's of the same owner, refused by its client),
 * REFRESH value= changes it; the change is a DL_CHANGE_VALUE for
 * watchers. Stored with
 * the lease (record.h). dl_locktab_set_value: REFRESH's part; the lease
 * of this owner with this token gets the value. DL_NOT_HOLDER if there
 * is none; DL_EUNAVAILABLE, DL_EBADARG (too long), DL_ENOMEM.
 */
int dl_locktab_set_value(struct dl_locktab *t, struct dl_session *s,
			 struct dl_str name, uint64_t token,
			 struct dl_str value, struct dl_result *res);

/* A lease granted by a reply with res->tell: the reply is out, so its
 * owner may now be told of the waiters (DL_EVENT_WAITING). */
void dl_locktab_tell_waiting(struct dl_locktab *t, struct dl_str name,
			     uint64_t token);

/*
 * Deadlocks. A LOCK that would wait (a new wait, or a restored place its
 * owner claims) is refused with DL_DEADLOCK, and nothing changes, when
 * its wait would close a cycle of owners that wait for each other: its
 * owner would wait, through the cycle, for itself. The model, its rule
 * and why no correct wait is refused are in locktab_cycle.c; in short:
 *
 *   - an owner with a waiting request is taken as blocked: it releases
 *     nothing until its waits are granted (one thread of control per
 *     owner; threads that share an owner hold its locks together);
 *   - a waiter waits for each holder whose mode excludes its own, and
 *     for the nearest live waiter ahead of it whose mode excludes its
 *     own (strict FIFO: that one is served first, and then holds); a
 *     semaphore's waiter only when no permit is free and every holder
 *     is blocked in the cycle (any holder that can still release frees
 *     a permit);
 *   - restored places (placeholders) block nobody and wait for nothing
 *     in the walk, nor do leases or waits past their deadline, nor a
 *     waiter whose owner holds the lock already;
 *   - the walk looks at DL_DEADLOCK_WALK_MAX holders, waiters and owners
 *     at most, and no more than the request's walk_budget has left (the
 *     server gives each user one, refilled every second: one user's
 *     checks cannot take the loop from the others); past that it gives
 *     up and the request waits as before.
 *
 * The cycle found is kept for dl_locktab_cycle() until the next call.
 */

/* Holders, waiters and owners one deadlock check looks at, at most
 * (the walk's budget): it bounds the check's time -- under 50 us for the
 * worst, a ring of 1,024 owners seen whole (make bench-deadlock) -- and
 * its memory, 80 bytes a step (320 KiB), allocated once per table on the
 * first check. A cycle the walk cannot see whole within it is not
 * refused, and counted (walks_capped). */
#define DL_DEADLOCK_WALK_MAX 4096

/* The cycle of the last DL_DEADLOCK: len owners, the requester first.
 * hop[i].owner waits for hop[i].lock, which hop[i + 1].owner (the
 * requester after the last) holds, or is queued ahead for; hop[0] is the
 * requester and the lock it asked for. Only the first DL_CYCLE_SHOW_MAX
 * hops are kept (shown). The strings are borrowed from the table: valid
 * until its next change. */
struct dl_cycle {
	uint32_t len;	/* owners in the cycle, the requester included */
	uint32_t shown; /* hops in hop[]: min(len, DL_CYCLE_SHOW_MAX) */
	struct {
		struct dl_str owner; /* its key (dl_owner_key_account) */
		struct dl_str lock;
	} hop[DL_CYCLE_SHOW_MAX];
};
const struct dl_cycle *dl_locktab_cycle(const struct dl_locktab *t);
/* Turn the check off (0) or on (1, the default): benchmarks measure what
 * it costs a LOCK that waits. */
void dl_locktab_deadlock_check(struct dl_locktab *t, int on);
int dl_locktab_release(struct dl_locktab *t, struct dl_session *s,
		       struct dl_str name, uint64_t token,
		       struct dl_result *res);
/*
 * REFRESH: the lease lasts ttl_ms from now (0: its last TTL). A refresh
 * that moves the deadline later takes effect at once. One that moves it
 * earlier does not: the result says so (`shorten`, with the lease's
 * deadline now in from_deadline) and the caller applies it with
 * dl_locktab_shorten() once the change is durable and the reply goes out.
 * Until then the holder may count on the deadline it was told before, so
 * the lease keeps it: a refresh refused because Redis was lost changes
 * nothing, and no lease can be reaped early (and its lock granted to
 * another owner) on the strength of a shortening its holder was never
 * told of. A restart restores such a lease for its longer TTL (busy
 * longer, never two holders).
 */
int dl_locktab_refresh(struct dl_locktab *t, struct dl_session *s,
		       struct dl_str name, uint64_t token, uint64_t ttl_ms,
		       struct dl_result *res);
/* REFRESH with warn=: the same, and the lease's warning becomes warn_ms
 * (0: none; -1: as it is). DL_EBADARG, changing nothing, when the warning
 * would not be below the lease's TTL (the new one, or the one it keeps);
 * DL_ENOMEM. */
int dl_locktab_refresh_warn(struct dl_locktab *t, struct dl_session *s,
			    struct dl_str name, uint64_t token, uint64_t ttl_ms,
			    int64_t warn_ms, struct dl_result *res);
/* Apply a shortening REFRESH (above): the lease `token` of `name` gets
 * `deadline` and `ttl_ms`, if it is still there with from_deadline (a
 * later refresh or reentry that moved it supersedes the shortening).
 * Returns 1 if applied. It reaps nothing and sends no event (a deadline
 * already past fires at the next run of the timers): safe from the
 * connection layer while it walks its held lines. */
int dl_locktab_shorten(struct dl_locktab *t, struct dl_str name, uint64_t token,
		       uint64_t from_deadline, uint64_t deadline,
		       uint32_t ttl_ms);
/* What remains of lease `token` of `name`, in ms: 0 if it is gone or
 * overdue. Changes nothing (no reaping, no events): safe to call from
 * anywhere, the event hook's callees included. */
uint64_t dl_locktab_remaining(struct dl_locktab *t, struct dl_str name,
			      uint64_t token);
/* BREAK: end the lease `token` of `name` now, whoever holds it (an
 * operator's tool): its owner's connections get * EXPIRED (the event's
 * `by` is `by`, the breaker) as if it had run out, the queue moves on,
 * the change is persisted. DL_BROKEN, and `prev` (if not NULL) receives
 * the key of the owner that held it (NUL-terminated); or DL_STALE with
 * the current holder's token (0 if free) when `token` holds nothing;
 * DL_EUNAVAILABLE while grants are suspended. */
int dl_locktab_break(struct dl_locktab *t, struct dl_str name, uint64_t token,
		     struct dl_str by, char prev[DL_OWNER_KEY_MAX + 1],
		     struct dl_result *res);
/* Any owner may check any token. */
int dl_locktab_check(struct dl_locktab *t, struct dl_str name, uint64_t token,
		     struct dl_result *res);
int dl_locktab_cancel(struct dl_locktab *t, struct dl_session *s,
		      struct dl_str name, struct dl_result *res);
void dl_locktab_status(struct dl_locktab *t, struct dl_str name,
		       struct dl_lock_status *st);
/* The status of a lock found by dl_locktab_list (no lookup, no reaping: a
 * lease past its deadline that the wheel has not reaped yet shows
 * remaining 0). */
void dl_locktab_lock_status(struct dl_locktab *t, const struct dl_lock *lk,
			    struct dl_lock_status *st);

/* A page of the locks for LOCKS: the locks with a holder or a waiter.
 * Order DL_LIST_BY_NAME: the names that start with `prefix` and sort
 * after `after` (byte order; len 0: from the first), the first `limit` of
 * them. DL_LIST_BY_WAITERS: the `limit` locks with the prefix that have
 * the most waiters (at least one), most first, ties by name; `after` is
 * not used. page[] receives them in order (room for limit); returns how
 * many, and *more how many more match after the page.
 *
 * Cost: by name, the page's locks and a path down the index per prefix
 * walked, O(limit + name length) whatever the table holds (the index,
 * locktab_index.c); by waiters, one pass over the locks under the prefix
 * with a heap of `limit` entries. 0 and *more 0 if out of memory. */
enum dl_list_order { DL_LIST_BY_NAME, DL_LIST_BY_WAITERS };
/* Only the names under one of `prefixes` are listed, and counted in *more
 * (a user's listing shows only what it may read). NULL: all. */
struct dl_list_filter {
	const struct dl_str *prefixes;
	size_t n;
};
size_t dl_locktab_list(struct dl_locktab *t, enum dl_list_order order,
		       struct dl_str prefix, struct dl_str after, size_t limit,
		       const struct dl_list_filter *filter,
		       const struct dl_lock **page, uint64_t *more);

/* ---- time --------------------------------------------------------------- */

/* Fire due deadlines, at most `budget`; returns how many fired. */
size_t dl_locktab_run_timers(struct dl_locktab *t, size_t budget);
/* ms until dl_locktab_run_timers() has work, -1 if none is scheduled. */
int64_t dl_locktab_timeout(struct dl_locktab *t);

/* ---- persistence hooks -------------------------------------------------- */

typedef void (*dl_lock_cb)(const struct dl_lock *lk, void *arg);

/* Hand every dirty lock to cb once, in its final state (a lock with no
 * holders and no waiters is to be deleted), clear the set and free empty
 * locks. Returns the number of locks handed over. */
size_t dl_locktab_drain_dirty(struct dl_locktab *t, dl_lock_cb cb, void *arg);
size_t dl_locktab_dirty_count(const struct dl_locktab *t);
/* Urgent locks: dirty with a change whose result or event is `durable`
 * (a grant, reentry, refresh, break; a release if durable_release). The
 * others -- releases, expiries, queue changes -- wait for nobody, so the
 * store may let them ride with a later batch (store.c, lazy writes).
 * dl_locktab_drain_urgent() hands over the urgent locks only (in their
 * final state, lazy changes included) and keeps the rest dirty. */
size_t dl_locktab_drain_urgent(struct dl_locktab *t, dl_lock_cb cb, void *arg);
size_t dl_locktab_urgent_count(const struct dl_locktab *t);
/* Every lock, in no particular order (a full re-sync of the store). */
void dl_locktab_foreach(struct dl_locktab *t, dl_lock_cb cb, void *arg);
/* Pinning (a count): while pinned, no lock that has had a holder or a
 * waiter at any time since the pin was taken (or had one then) leaves the
 * table, and none changes its place in
 * the lock hash, so a caller may keep pointers to locks, and walk the
 * table, across requests (a re-sync indexes the table in steps and
 * formats a bucket some round trips later). That holds because such a
 * lock leaves only through a drain of the dirty set, or a reset, both of
 * which assert that the table is not pinned, and because the pin freezes
 * the hash (dl_htab_freeze). A new lock that changed nothing may still
 * come and go. */
void dl_locktab_pin(struct dl_locktab *t, int on);
/* One step of a walk of a pinned table: cb for every lock in up to
 * `slots` hash slots from *cursor on (about as many locks: the load is
 * about 1), *cursor moved past them. A predicate, not a status: nonzero
 * once the walk is done.
 * Every lock in the table from the first step to the last is handed over
 * exactly once; one that came or went meanwhile, at most once. */
int dl_locktab_walk(struct dl_locktab *t, size_t *cursor, size_t slots,
		    dl_lock_cb cb, void *arg);

/* While suspended (persistence down) the table grants nothing: acquire
 * fails with DL_EUNAVAILABLE and freed locks keep their queues. Resuming
 * serves every queue that can move. */
void dl_locktab_suspend_grants(struct dl_locktab *t, int suspended);

/*
 * Locks leaving for another partition (locktab_move.c). While `slots`
 * (DL_SLOTS bytes, non-zero for a frozen slot; kept by the caller, NULL:
 * none) is set, no waiter of a lock in a frozen slot is served; whatever
 * lessens a lock (an expiry, a wait's end, a withdrawal) still happens.
 * Thawing serves the queues that can move.
 */
void dl_locktab_freeze(struct dl_locktab *t, const uint8_t *slots);
/* Lock `name` leaves the table: its leases go silently, each waiter of a
 * connection is told DL_EVENT_MOVED, placeholders and its delay go; the
 * lock is left empty and dirty (its record is deleted by the next
 * drain). 1 if there was such a lock, else 0. */
int dl_locktab_extract(struct dl_locktab *t, struct dl_str name);

/*
 * Close grants until `until` (monotonic ms; a later call may only move it
 * later), or reopen them (0). While closed no new lease is granted: every
 * lock counts as busy until then (TRYLOCK: DL_BUSY with the time left; a
 * LOCK that waits queues, and is served when grants reopen), as if held
 * by an owner nobody knows. Leases already held go on as usual: reentry,
 * refresh, release. For a Redis that went back (store_lead.c): any lease
 * granted before may still be held by a client this table has never
 * heard of. Reopening serves every queue that can move.
 */
void dl_locktab_close_grants(struct dl_locktab *t, uint64_t until);

/*
 * The lease horizon: the latest monotonic ms at which a lease this table
 * granted, refreshed, re-entered or restored may still be believed by its
 * holder, with the lock's delay after it (a lock in its delay is busy
 * too): the largest deadline + delay ever set. It only grows, also across
 * dl_locktab_reset (what a table granted may outlive it). The store makes
 * a reservation above it durable before a reply that needs it is released
 * (store_horizon.c), and after Redis lost writes, grants stay closed until
 * the horizon (docs/design.md, "A Redis that forgets").
 */
uint64_t dl_locktab_horizon(const struct dl_locktab *t);

/*
 * RECLAIM (docs/design.md, "Reclaim"): the session's owner still holds
 * lease `token` of a->name, which the table does not know (Redis forgot
 * it; the caller checked its proof). While grants are closed it is linked
 * again with its token, for a->ttl_ms from now, in its mode and limit
 * (a->shared, a->limit), with `holds` holds, a->warn_ms, and at least the
 * lock delay a->delay_ms -- DL_RECLAIMED, durable -- unless the lock
 * cannot take it: DL_NOT_HOLDER.
 * A holder that cannot hold beside it (another mode or limit, or an
 * exclusive lease on either side) with a lower token ended before this
 * lease was granted (a lock is granted only when that is consistent), so
 * it was reclaimed by an owner that had let it go: it ends, its owner told
 * (* EXPIRED broken_by=reclaimed); one with a higher token refuses the
 * claim, as do waiters of another limit and a full lock of its mode.
 * A lease the table knows (this owner, this token) is refreshed (res->known:
 * its reply is a refresh's, dl_locktab_shorten included). Grants
 * open: DL_NOT_HOLDER (whatever was not reclaimed while they were closed
 * has ended). *why says why a claim is DL_NOT_HOLDER (for the log).
 * DL_EBADARG, DL_ENOMEM, DL_ELIMIT (quotas), DL_EUNAVAILABLE.
 */
int dl_locktab_reclaim(struct dl_locktab *t, struct dl_session *s,
		       const struct dl_acquire *a, uint64_t token,
		       uint32_t holds, struct dl_result *res, const char **why);
/* The mode and limit of lease `token` of `name`: 0, or -1 if no such
 * lease. */
int dl_locktab_lease_mode(const struct dl_locktab *t, struct dl_str name,
			  uint64_t token, int *shared, uint32_t *limit);

/*
 * Fencing tokens. A grant takes last_token + 1. At start the daemon raises
 * last_token with dl_token_floor(): the larger of the last token stored in
 * Redis and unix_ms * DL_TOKEN_PER_MS. The time part is what makes tokens
 * survive the loss of Redis's last writes (appendfsync everysec): tokens
 * grow by one per grant from a floor set at start, so at any moment they
 * stay below (now_ms * 10^6) unless the daemon granted more than a million
 * locks per millisecond, which it cannot. Whatever Redis forgot, a restart
 * at a later wall-clock time starts above every token ever issued. The
 * stored value protects against a wall clock that was set back.
 */
uint64_t dl_token_floor(uint64_t stored_last, uint64_t unix_ms);
void dl_locktab_raise_token(struct dl_locktab *t, uint64_t last);
/* From now on every token this table gives is = res modulo mod (mod 0:
 * any, the default). A partitioned namespace's tables give disjoint
 * tokens this way (mod DL_PARTS_MAX, res the partition's place in the
 * map): a token names one lease of the whole namespace. */
void dl_locktab_token_stride(struct dl_locktab *t, uint64_t mod, uint64_t res);
uint64_t dl_locktab_last_token(const struct dl_locktab *t);

/* A hint before restoring `name` (dl_htab_prefetch): a loader that knows
 * the names ahead calls it with deep = 0 some 16 names before restoring
 * one, and with deep = 1 some 8 names before. */
void dl_locktab_prefetch(const struct dl_locktab *t, struct dl_str name,
			 int deep);

/* Rebuild state loaded from the store, before serving. Deadlines are
 * monotonic ms. A lease is linked with its stored token (the counter is
 * raised past it); a restored waiter is a placeholder that keeps its place
 * until its owner asks for the lock again (dl_locktab_acquire claims it) or
 * min(wait_deadline, grace_deadline) passes. `limit` is the lock's (every
 * item of one lock carries the same), `shared` the item's mode. Errors:
 * DL_EBADARG for a bad name, owner, ttl or limit, a second lease of one
 * owner on one lock, holders the lock cannot have at once (modes mixed,
 * more than its limit), a limit unlike the lock's; DL_ENOMEM. A lease's
 * `desc` (NULL: none) is its holder's description, of which the lease
 * takes a reference, and `held_ms` how long it had been held when its
 * record was read (its hold time goes on from there).
 *
 * A restored lease may be a grant whose reply was lost with the daemon
 * that made it: nobody knows its token, and only its TTL ends it. A LOCK
 * of its owner re-enters it (one more hold), but does not extend it until
 * a REFRESH of its token shows a holder who knows it: found by test_ha's
 * concurrency run, where a worker that was told "held by your owner in
 * another process" and asked again every 20 ms kept such a lease alive,
 * and the lock busy, for as long as it went on. */
int dl_locktab_restore_lease(struct dl_locktab *t, struct dl_str name,
			     struct dl_str owner, uint64_t token,
			     uint32_t count, uint32_t ttl_ms, uint64_t deadline,
			     struct dl_str tag, int shared, uint32_t limit,
			     struct dl_desc *desc, uint64_t held_ms,
			     uint64_t req);
/* The restored lease `token` of `name` has the value `value` (a valid
 * text value, proto/desc.h). DL_EBADARG if there is no such lease or the
 * value is not valid; DL_ENOMEM. */
int dl_locktab_restore_value(struct dl_locktab *t, struct dl_str name,
			     uint64_t token, struct dl_str value);
/* The restored lease `token` of `name` asked to be told of waiters
 * (notify=waiters). DL_EBADARG if there is no such lease; DL_ENOMEM. */
int dl_locktab_restore_notify(struct dl_locktab *t, struct dl_str name,
			      uint64_t token);
/* The restored lock `name` has a delay of delay_ms (at most
 * DL_LOCK_DELAY_MAX_MS), and with `running` is in it for that long from
 * now (its record said a delay was running: it is honoured whole from
 * the restore, as a lease is its TTL). Before its holders and waiters,
 * whose `limit` must agree. DL_EBADARG, DL_ENOMEM. */
int dl_locktab_restore_delay(struct dl_locktab *t, struct dl_str name,
			     uint32_t delay_ms, int running, uint32_t limit);
/* The restored lease `token` of `name` warns warn_ms before its deadline
 * (below its TTL): DL_EBADARG otherwise, or if there is no such lease;
 * DL_ENOMEM. */
int dl_locktab_restore_warn(struct dl_locktab *t, struct dl_str name,
			    uint64_t token, uint32_t warn_ms);
int dl_locktab_restore_waiter(struct dl_locktab *t, struct dl_str name,
			      struct dl_str owner, uint32_t ttl_ms,
			      uint64_t wait_deadline, uint64_t grace_deadline,
			      struct dl_str tag, int shared, uint32_t limit);

/*
 * Withdraw a grant whose reply or event never reached its client because
 * persistence went down before the grant was durable (the reply is then
 * answered ERR UNAVAILABLE, the event not sent), `reentry` as the grant's
 * result or event said:
 *   - a new lease (not a reentry) ends, without * EXPIRED (its owner never
 *     learned of it), whatever its hold count: every other hold of it was
 *     taken on top of that unacknowledged grant, after it, so none of
 *     them was acknowledged either (a reply is sent only once the epoch
 *     of its change commits, and epochs commit in order);
 *   - a reentry gives back one hold but never the lease: the lease was
 *     granted, and told, before it, and a reply sent since may count on
 *     the withdrawn hold (a pipelined UNLOCK answered "OK HELD x 1" after
 *     the reentry: ending the lease then would leave its owner believing
 *     in a lock another owner is granted). At worst the lease keeps one
 *     hold its owner does not count: it ends at its next UNLOCK or TTL.
 * With `requeue` (a
 * withdrawn * GRANTED event), the session waits again at the head of the
 * queue, where it was when it was served, with the TTL `ttl_ms`, the tag,
 * the mode and the wait deadline it had (and the lock's limit, should the
 * lock have to be made again). Grants are suspended meanwhile, so nobody
 * else is served. A closed session is not put back (its client left).
 * Returns 0, or DL_ENOMEM when the waiter could not be
 * re-queued, DL_ELIMIT when the lock is now in use with another limit
 * (freed and taken again meanwhile), DL_EBADARG when the session has
 * changed owner since the grant: the caller then reports a timeout.
 * The lease is found by its token alone: the held line proves it was
 * granted to this session, under the owner it had then.
 */
struct dl_requeue {
	uint32_t owner_gen;  /* s->owner_gen when it was granted */
	uint64_t req;	     /* its req=, 0: none */
	uint8_t notify;	     /* it asked notify=waiters */
	struct dl_str value; /* the value it gave its lease (len 0: none):
				the waiter waits with it again, also when
				the lease has ended meanwhile */
	uint32_t ttl_ms;
	uint32_t warn_ms; /* the warning asked for, if has_warn */
	uint8_t has_warn;
	uint64_t wait_deadline;
	struct dl_str tag;
	uint8_t shared;
	uint32_t limit;
};
#define DL_REVOKE_NEW	  0 /* the grant made the lease */
#define DL_REVOKE_REENTRY 1 /* it added a hold to a lease */
#define DL_REVOKE_RETRY                                                        \
	2 /* it gave a request its grant back (req=): no                       \
	     hold to give back */
int dl_locktab_revoke(struct dl_locktab *t, struct dl_session *s,
		      struct dl_str name, uint64_t token, int reentry,
		      const struct dl_requeue *requeue);

/* Drop every lock, lease, waiter and owner, and the token counter: a
 * restore that failed half-way starts again from nothing. Only before
 * serving (no session may exist). */
void dl_locktab_reset(struct dl_locktab *t);

/*
 * A lock whose stored record cannot be read is held, not freed: a lease
 * of the reserved owner DL_QUARANTINE_OWNER (which no client can name: it
 * has an '=') with the next token, until `deadline`. Nobody can release
 * it; it only expires. Call after the token counter has been raised.
 */
#define DL_QUARANTINE_OWNER "dlockd=unreadable"
int dl_locktab_quarantine(struct dl_locktab *t, struct dl_str name,
			  uint32_t ttl_ms, uint64_t deadline);

/* Size the lock table for n locks ahead of a bulk restore (a hint: on
 * failure the table still grows as needed). */
void dl_locktab_reserve(struct dl_locktab *t, size_t n);

/* Check every invariant above over the whole table (tests and fuzzers;
 * it walks everything). 0, or -1 with `why` saying which one broke. */
int dl_locktab_verify(const struct dl_locktab *t, char *why, size_t whylen);

/* The holders and waiters of a lock, for HOLDERS; cb is called for
 * each holder in grant order, then each waiter in queue order (the lock's
 * overdue holders are reaped first). Returns 0, or -1 if there is no such
 * lock. Nothing may change the table during the walk. */
struct dl_member {
	int waiter;	 /* 0: a holder */
	int shared;	 /* its mode */
	int placeholder; /* a waiter restored from Redis, not yet claimed */
	struct dl_str owner;
	uint64_t token;	    /* holder */
	uint64_t remaining; /* holder: ms of lease left; waiter: ms of wait
			       left, UINT64_MAX for inf */
	uint32_t count;	    /* holder: holds */
	uint32_t position;  /* waiter: 1 = first */
	uint64_t held_ms;   /* holder: how long it has held */
	const struct dl_desc *desc; /* holder: its lease's description;
				       waiter: its session's (none for a
				       placeholder); NULL: none */
	struct dl_str value;	    /* holder: its value, len 0: none */
};
int dl_locktab_members(struct dl_locktab *t, struct dl_str name,
		       void (*cb)(const struct dl_member *m, void *arg),
		       void *arg);

/* Lookups for the store and tests. */
const struct dl_lock *dl_locktab_find(struct dl_locktab *t, struct dl_str name);
struct dl_str dl_lock_name(const struct dl_lock *lk);
/* No holder, no waiter, no delay running: the lock has no record (it is
 * to be deleted) and leaves the table at the next drain. */
int dl_lock_empty(const struct dl_lock *lk);
struct dl_str dl_owner_id(const struct dl_owner *o);
/* The id= tag a lease was granted with (empty: none). */
struct dl_str dl_lease_tag(const struct dl_lease *l);
/* The req= of its last grant or reentry that carried one (0: none). */
uint64_t dl_lease_req(const struct dl_lease *l);
/* The value of a lease of t (LOCK, REFRESH value=), len 0: none. */
struct dl_str dl_locktab_lease_value(const struct dl_locktab *t,
				     const struct dl_lease *l);
/* 1 if a lease of t asked to be told of waiters (notify=waiters). */
int dl_locktab_lease_notify(const struct dl_locktab *t,
			    const struct dl_lease *l);
/* The warning of a lease of t (LOCK warn=), 0 if none. */
uint32_t dl_locktab_lease_warn(const struct dl_locktab *t,
			       const struct dl_lease *l);
/* The delay of a lock of t (LOCK delay=), 0 if none; *end (if not NULL)
 * receives the monotonic end of the delay it is in, 0 if none. */
uint32_t dl_locktab_lock_delay(const struct dl_locktab *t,
			       const struct dl_lock *lk, uint64_t *end);
/* Its holder's description (NULL: none), borrowed from the lease. */
struct dl_desc *dl_lease_desc(const struct dl_lease *l);
/* How long it has been held at `now` (monotonic ms). */
uint64_t dl_lease_held_ms(const struct dl_lease *l, uint64_t now);
const struct dl_locktab_stats *dl_locktab_stats(const struct dl_locktab *t);

#endif /* DL_SERVER_LOCKTAB_H */
