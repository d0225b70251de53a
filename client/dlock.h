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
 * (options.renew) and keeps a local deadline on the monotonic clock,
 * counted from the moment the request was sent, so the application never
 * believes in a lease longer than the server grants it. When the lease is
 * lost -- the server says so (* EXPIRED, NO NOT_HOLDER), or it cannot be
 * confirmed until at least now + options.lost_guard_ms -- the on_lost
 * callback is called, before the local deadline, and dlock_lease_valid()
 * turns false. The handle stays allocated until dlock_unlock().
 *
 * Reconnects. If the connection drops, the background thread reconnects
 * with backoff (options.reconnect), says HELLO with the same owner id and
 * AUTH, refreshes the leases still within their local deadline, and sends
 * again the LOCKs still waiting (a daemon that restarted gives a waiter
 * back its place in the queue). Calls made while disconnected wait for the
 * reconnect up to their timeout.
 *
 * Errors are negative DLOCK_E* codes; dlock_strerror() describes them, and
 * dlock_last_error() gives the server's text of the last ERR reply seen by
 * the calling thread.
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

#define DLOCK_VERSION "0.1.0"

/* ---- errors --------------------------------------------------------------- */

enum {
	DLOCK_OK = 0,
	DLOCK_EBUSY = -1,        /* TRYLOCK: held by another owner */
	DLOCK_ETIMEDOUT = -2,    /* the wait ran out (* TIMEOUT), or no reply
				    within request_timeout_ms */
	DLOCK_ENOTHOLDER = -3,   /* UNLOCK/REFRESH: not this owner's lease */
	DLOCK_ESTALE = -4,       /* CHECK: the token does not hold the lock */
	DLOCK_ELOST = -5,        /* the lease was lost before the call */
	DLOCK_ECONNECT = -6,     /* cannot connect */
	DLOCK_ECLOSED = -7,      /* the connection closed and could not be
				    re-established in time */
	DLOCK_EAUTH = -8,        /* AUTH failed, or required and missing */
	DLOCK_EUNAVAILABLE = -9, /* server: persistence down, try later */
	DLOCK_ELIMIT = -10,      /* server: a limit was reached */
	DLOCK_EINVAL = -11,      /* bad argument (also server BAD_ARG) */
	DLOCK_EPROTO = -12,      /* the server said something unexpected */
	DLOCK_ENOMEM = -13,
	DLOCK_ESERVER = -14,     /* any other ERR from the server */
	DLOCK_ECANCELED = -15,   /* the client is closing */
};

const char *dlock_strerror(int err);
/* The text of the last ERR/NO line the calling thread received, or "". */
const char *dlock_last_error(void);

/* ---- options --------------------------------------------------------------- */

typedef struct dlock_client dlock_client;
typedef struct dlock_lease dlock_lease;

/* Why a lease was lost. */
enum dlock_lost_reason {
	DLOCK_LOST_EXPIRED = 1,   /* the server reaped it (* EXPIRED) */
	DLOCK_LOST_REJECTED = 2,  /* a refresh was answered NO NOT_HOLDER */
	DLOCK_LOST_UNCONFIRMED = 3, /* no confirmation in time (server or
				       network unreachable) */
};

/*
 * Called on the library's thread when a lease is lost, at most once per
 * lease, before its local deadline. It must return quickly and must not
 * call libdlock functions on the same client (signal the application
 * instead: set a flag, write to a pipe, kill a child process). `lease`
 * stays valid until the application calls dlock_unlock() on it.
 */
typedef void (*dlock_lost_cb)(dlock_client *c, const dlock_lease *lease,
			      enum dlock_lost_reason why, void *arg);

struct dlock_options {
	const char *host;       /* "127.0.0.1" */
	int port;               /* 7420 */
	const char *unix_path;  /* used instead of host/port when set */
	const char *password;   /* NULL: no AUTH */
	const char *owner;      /* NULL: random, fixed for the client's life */
	int connect_timeout_ms; /* 2000 */
	int request_timeout_ms; /* 5000: a reply later than this is
				   DLOCK_ETIMEDOUT (the lock wait itself is
				   not counted) */
	int reconnect;          /* 1: reconnect after a drop (backoff up to
				   1 s); 0: fail with DLOCK_ECLOSED */
	int renew;              /* 1: refresh held leases every TTL/3 */
	int lost_guard_ms;      /* 0: max(TTL/10, 20 ms). A lease not
				   confirmed until now + this is lost */
	dlock_lost_cb on_lost;  /* NULL: none */
	void *arg;              /* passed to on_lost */
};

/* Fill o with the defaults above. The strings are borrowed only during
 * dlock_connect() (the client copies them). */
void dlock_options_init(struct dlock_options *o);

/* ---- the client --------------------------------------------------------------- */

/* Connect, AUTH, HELLO owner=...; start the background thread. On success
 * *out is a client to free with dlock_close(). */
int dlock_connect(const struct dlock_options *o, dlock_client **out);

/* Stop renewing, close the connection, join the thread, free the client.
 * Leases still held are not released (they expire at the server); their
 * handles are freed: the application must not use them afterwards.
 * dlock_close(NULL) is a no-op. Not to be called from on_lost. */
void dlock_close(dlock_client *c);

/* The owner id (valid for the client's life). */
const char *dlock_owner(const dlock_client *c);

/* ---- locking -------------------------------------------------------------------- */

#define DLOCK_WAIT_FOREVER (-1)

/* Acquire `name` with a lease of ttl_ms (0: the server's default), waiting
 * up to wait_ms (0: try once; DLOCK_WAIT_FOREVER). On success *out is a
 * lease handle owned by the caller, to give back with dlock_unlock().
 * Errors: DLOCK_EBUSY (wait_ms 0), DLOCK_ETIMEDOUT, DLOCK_ELIMIT,
 * DLOCK_EUNAVAILABLE, DLOCK_EINVAL, transport errors. */
int dlock_lock(dlock_client *c, const char *name, int64_t ttl_ms,
	       int64_t wait_ms, dlock_lease **out);
int dlock_trylock(dlock_client *c, const char *name, int64_t ttl_ms,
		  dlock_lease **out);

/* Release one hold and free the handle -- always, whatever the outcome,
 * like free(). 0 when the server released it (or one reentrant hold of
 * it), DLOCK_ENOTHOLDER if the lease was already gone, or a transport
 * error (the lease then simply expires at the server). NULL is a no-op. */
int dlock_unlock(dlock_client *c, dlock_lease *l);

/* Refresh now, with a new TTL (0: the lease's TTL). DLOCK_ENOTHOLDER if
 * the server no longer has it (on_lost is called too). */
int dlock_refresh(dlock_client *c, dlock_lease *l, int64_t ttl_ms);

/* Ask the server whether `token` holds `name`: 0 (and *remaining_ms, if
 * not NULL) or DLOCK_ESTALE (and *current, if not NULL: the holder's
 * token, 0 if free). */
int dlock_check(dlock_client *c, const char *name, uint64_t token,
		int64_t *remaining_ms, uint64_t *current);

struct dlock_status {
	int held;
	uint64_t token;
	int64_t ttl_ms;   /* remaining */
	uint32_t count;   /* reentrant holds */
	uint32_t waiters;
	char owner[65];   /* "" when free */
};
int dlock_status(dlock_client *c, const char *name, struct dlock_status *st);

int dlock_ping(dlock_client *c);

/* The server's STATS: cb is called once per "key value" line, in order,
 * on the calling thread; the strings live for the duration of the call. */
int dlock_stats(dlock_client *c,
		void (*cb)(const char *key, const char *value, void *arg),
		void *arg);

/* ---- lease handles (all safe to call from any thread, and from on_lost) --- */

const char *dlock_lease_name(const dlock_lease *l);
uint64_t dlock_lease_token(const dlock_lease *l);
int64_t dlock_lease_ttl(const dlock_lease *l);      /* last granted TTL */
/* Local deadline on CLOCK_MONOTONIC, in ms; renewal moves it. */
int64_t dlock_lease_deadline(const dlock_lease *l);
/* 1 while held and not lost and the local deadline is ahead. */
int dlock_lease_valid(const dlock_lease *l);

/* Milliseconds on CLOCK_MONOTONIC (the clock of dlock_lease_deadline). */
int64_t dlock_now_ms(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_H */
