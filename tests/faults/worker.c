/* SPDX-License-Identifier: MIT */
/*
 * worker.c -- a client of the fault campaign (docs/testing.md,
 * tests/faults/campaign.sh).
 *
 *   worker lock  <hist> <host> <port> <owner> <locks> <seed> <ms>
 *       takes random locks through libdlock for <ms> (or until SIGTERM),
 *       with random TTLs, waits and hold times (some longer than the TTL,
 *       so the library renews), re-enters or refreshes some with another
 *       TTL (shorter or longer), leaves some held as `dlock lock` does
 *       (the client goes; the same owner comes back as a new client),
 *       and writes what it sees to the history
 *       file <hist>. <locks> is "<l>[:<s>:<p>[:<e>]]": exclusive locks
 *       L0..L<l-1>; read/write locks S0..S<s-1>, taken shared two times
 *       in three, else exclusive; semaphores P0..P<p-1> of PERMITS;
 *       elections E0..E<e-1> (PROTOCOL.md, LOCK value=), one
 *       acquisition in four when there are some: taken exclusive with a
 *       value of their own ("<file>-<n>", <file> the history's name:
 *       unique to the acquisition), and while it leads the worker
 *       proclaims new ones (dlock_proclaim), and re-enters with new ones
 *       (which must not change the lease's).
 *       One acquisition in three, of any lock, asks to be told of
 *       waiters (notify_waiters; options.on_contended records them);
 *   worker observe <hist> <host> <port> <owner> <locks> <seed> <ms>
 *       a follower of the elections of <locks>: watches E* (dlock_watch,
 *       watched again by the library after each reconnect, and by the
 *       observer after a refusal) and records every lease and value it
 *       is told of (O), and reads a random election's STATUS every
 *       ~200 ms (O too); it takes no lock;
 *   worker raw   <hist> <host> <port> <owner> <locks> <seed> <ms>
 *       the same on the exclusive locks, speaking the protocol itself as
 *       a client in another language or `nc` would: TRYLOCK, hold for a
 *       part of the TTL, UNLOCK; no renewals, and it believes every
 *       grant, holds= or not (libdlock gives back a grant that another
 *       process of its owner id holds, which would hide an id the server
 *       let two processes share: the campaign's copycats). One
 *       acquisition in three is a multi-lock of two or three of them
 *       and of M0..M3, locks only multi-locks take (LOCK a b [c],
 *       PROTOCOL.md), tried or waited for up to 4 s: its block is
 *       recorded (M, then a G per lock), held, and each lease released;
 *   worker multi <hist> <host> <port> <owner> <locks> <seed> <ms>
 *       the same, a multi-lock every time;
 *   worker now
 *       prints dlock_now_ms(), the histories' clock (for the campaign's
 *       notes of when Redis was made to forget);
 *   worker child <hist> <ms>
 *       the command of a `dlock run`: writes an "alive" record with the
 *       DLOCK_NAME and DLOCK_TOKEN it was given every ~10 ms for <ms>.
 *
 * The history is what the checker (check.c) reads: one record per line,
 * "<time> <kind> <lock> <token> [fields]", the time from dlock_now_ms(),
 * the clock of the library's local deadlines, shared by every process of
 * the machine. Every record is written with one write(2) on an O_APPEND
 * descriptor *before* the worker acts on what it records, so a worker
 * killed at any moment leaves a true history:
 *
 *   G lock token deadline mode   a grant received (its local deadline);
 *                                mode x (exclusive), s (shared) or p<n>
 *                                (one of n permits)
 *   R lock token deadline        the library renewed: a new deadline
 *   U lock token                 about to send UNLOCK: no longer holding
 *   L lock token reason deadline the library says the lease is lost
 *                                (1 expired, 2 rejected, 3 unconfirmed)
 *   A lock token                 a dlock run command is running
 *   E lock rc                    a LOCK that did not grant (rc: DLOCK_E*)
 *   V lock token value [r]       about to say `value` for the lease:
 *                                token 0 before a LOCK value= (the
 *                                token is the next G's of that lock in
 *                                the file; after an E, or none, never
 *                                learnt), else before a dlock_proclaim;
 *                                with r, before a reentry of lease
 *                                `token` with that value, which must
 *                                leave the lease's as it is (only a new
 *                                lease, granted where the server had
 *                                lost this one, may show it)
 *   W lock token n               the library says n requests wait for
 *                                the lease (on_contended, on the
 *                                library's thread: it may come before
 *                                its G)
 *   M first n                    a multi-lock's block: the n G
 *                                that follow are its leases (an event
 *                                block's, each refreshed first: its
 *                                deadline counted from that send)
 *   B first i                    a multi-lock's block that was not
 *                                whole: line i was missing or not a
 *                                grant (the checker's violation)
 *   O lock token value how owner an observer was told that the lease
 *                                `token` of `owner` says `value` ("-":
 *                                none); how: g (* WATCH granted), v
 *                                (value), e (released, expired, broken,
 *                                withdrawn: only with a value), s (a
 *                                STATUS read)
 *
 * Every worker is its own owner (a distinct id), holding one lease at a
 * time; the checker takes the file name as the owner.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/dlock.h"

/* The limit of the semaphores P0..: every worker asks the same. */
#define PERMITS 2

static int hist = -1;
static volatile sig_atomic_t stop;
static int multi_every = 3; /* worker raw: a multi-lock one time in so
			       many (worker multi: 1) */
/* Locks only multi-locks take, M0..M<n-1>, beside L0.. */
#define MULTI_NAMES 4

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
	char line[512];
	int n = snprintf(line, sizeof(line), "%" PRId64 " ", dlock_now_ms());
	va_list ap;

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2) /* cut (an O record's long value) */
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!write(hist, line, (size_t)n);
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
}

/* Past its run and a grace, a worker still blocked -- a LOCK that waits
 * forever on a lock whose grants are closed for max_ttl, a day -- ends:
 * the campaign waited for it (two-daemon campaigns never finished). What
 * it was doing left no record, so its history stays true. */
static void on_alarm(int sig)
{
	(void)sig;
	_exit(0);
}

static void sleep_ms(int64_t ms)
{
	struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR && !stop)
		;
}

/* On the library's thread: write down the loss at once. */
static void on_lost(dlock_client *c, const dlock_lease *l,
		    enum dlock_lost_reason why, void *arg)
{
	(void)c;
	(void)arg;
	record("L %s %" PRIu64 " %d %" PRId64, dlock_lease_name(l),
	       dlock_lease_token(l), (int)why, dlock_lease_deadline(l));
}

/* On the library's thread too: news of waiters for a lease that asked
 * (notify_waiters). record() is one write(2) of a line built on the
 * stack, as on_lost's; the worker changes `hist` only after dlock_close()
 * has joined this thread (next_owner). */
static void on_contended(dlock_client *c, const dlock_lease *l,
			 uint32_t waiters, void *arg)
{
	(void)c;
	(void)arg;
	record("W %s %" PRIu64 " %" PRIu32, dlock_lease_name(l),
	       dlock_lease_token(l), waiters);
}

/* The history's path and the owner id: the file name is the owner
 * (check.c), "<path>.hist" and "<owner>", then "<path>~<n>.hist" and
 * "<owner>~<n>" after each lease left held. */
static char hist_base[4096], owner_base[64], owner_now[80];
static int owner_n;

/* A value no one else says: "<file>-<n>", <file> the history's name (the
 * owner's, but a copycat's is its own) and n counted by this process. */
static void new_value(char *v, size_t cap)
{
	static unsigned said;
	const char *b = strrchr(hist_base, '/');

	b = b ? b + 1 : hist_base;
	if (owner_n)
		snprintf(v, cap, "%.60s~%d-%u", b, owner_n, ++said);
	else
		snprintf(v, cap, "%.60s-%u", b, ++said);
}

static int64_t pick(const int64_t *v, size_t n)
{
	return v[(size_t)rand() % n];
}

/* The draws of elections and news of waiters, 0..n-1: a generator of
 * their own (seeded from <seed> too), so that a spec without elections
 * draws the rest as it did before them (the planted shared owner id of
 * make faults-selftest is caught on its seed's schedule). */
static unsigned new_seed;

static int draw(int n)
{
	return (int)(rand_r(&new_seed) % (unsigned)n);
}

/* The leader says a new value: recorded (V) before it is sent. The
 * proclaim is a REFRESH with the lease's TTL, which may end the lease
 * earlier than the deadline the library counts on now (a reentry's
 * longer TTL): that end is recorded first, as change_ttl's REFRESH. */
static void proclaim(dlock_client *c, dlock_lease *l)
{
	char v[DLOCK_VALUE_MAX + 1];
	int64_t at = dlock_now_ms() + dlock_lease_ttl(l);

	new_value(v, sizeof(v));
	if (at < dlock_lease_deadline(l))
		record("R %s %" PRIu64 " %" PRId64, dlock_lease_name(l),
		       dlock_lease_token(l), at);
	record("V %s %" PRIu64 " %s", dlock_lease_name(l), dlock_lease_token(l),
	       v);
	dlock_proclaim(c, l, v);
}

/* Hold the lease for about `ms`, noting each renewal, and proclaiming
 * `proclaims` new values at even steps (an election's leader); returns 1
 * if it is still valid at the end. */
static int hold(dlock_client *c, dlock_lease *l, int64_t ms, int proclaims)
{
	int64_t start = dlock_now_ms(), end = start + ms,
		seen = dlock_lease_deadline(l), d;
	int done = 0;

	while (!stop && dlock_now_ms() < end) {
		/* the deadline first, also of a lease that just ended: the
		 * checker holds it that long otherwise (see change_ttl) */
		d = dlock_lease_deadline(l);
		if (d != seen) {
			record("R %s %" PRIu64 " %" PRId64, dlock_lease_name(l),
			       dlock_lease_token(l), d);
			seen = d;
		}
		if (!dlock_lease_valid(l))
			return 0;
		if (done < proclaims &&
		    dlock_now_ms() >=
			    start + ms * (done + 1) / (proclaims + 1)) {
			done++;
			proclaim(c, l);
			continue; /* its deadline, at once */
		}
		sleep_ms(10);
	}
	return dlock_lease_valid(l);
}

/* Change the lease's TTL the ways a client may, one time in two: a
 * reentry (a second hold, same token) with a TTL of its own, shorter or
 * longer than the lease's, or a REFRESH with one (which may shorten the
 * lease). The deadline the library then counts on is recorded (R) as a
 * renewal's is. Returns the reentry's handle, to unlock, or NULL. */
static dlock_lease *change_ttl(dlock_client *c, const char *name,
			       struct dlock_lock_options *lo, dlock_lease *l,
			       int *changed)
{
	static const int64_t ttls[] = {20, 150, 300, 800, 2000, 3000};
	static char value[DLOCK_VALUE_MAX + 1];
	dlock_lease *l2 = NULL;
	int64_t before = dlock_lease_deadline(l), ttl;

	*changed = 0;
	switch (rand() % 4) {
	case 0:
		lo->ttl_ms = pick(ttls, 6);
		lo->wait_ms = 0;
		if (lo->value) {
			/* an election's reentry with a value of its own,
			 * which must leave the lease's as it is (PROTOCOL.md,
			 * LOCK value=): only a new lease may show it, one the
			 * reentry was granted where the server no longer had
			 * this one */
			new_value(value, sizeof(value));
			lo->value = value;
			record("V %s %" PRIu64 " %s r", name,
			       dlock_lease_token(l), value);
		}
		if (dlock_acquire(c, name, lo, &l2) != 0)
			l2 = NULL;
		break;
	case 1:
		ttl = pick(ttls, 6);
		/* Recorded before it is sent, as every act: a REFRESH that
		 * shortens the lease ends it at the server from its receipt,
		 * and the library counts on the shorter end from the moment
		 * it sends it. A worker killed before the reply's record left
		 * a history holding the lease to its first deadline, and the
		 * checker saw two holders where the server had freed the lock
		 * 20 ms after the REFRESH (two-daemon campaign, seed
		 * 20261129). dlock_now_ms() + ttl, read before the send, is
		 * no later than the server's end, and the record after the
		 * reply brings the library's own deadline. */
		if (dlock_now_ms() + ttl < before)
			record("R %s %" PRIu64 " %" PRId64, name,
			       dlock_lease_token(l), dlock_now_ms() + ttl);
		dlock_refresh(c, l, ttl);
		break;
	default:
		return NULL;
	}
	*changed = 1;
	/* Also when the lease is no longer valid: a REFRESH to 20 ms leaves
	 * a deadline that may have passed by now, and the lease may end by
	 * its UNLOCK before the library reports it lost (L). Unrecorded, the
	 * checker held it to its first deadline, and a Sentinel campaign
	 * reported 3 holders of a semaphore of 2 (the server had freed the
	 * permit at the shortened deadline). */
	if (dlock_lease_deadline(l) != before)
		record("R %s %" PRIu64 " %" PRId64, name, dlock_lease_token(l),
		       dlock_lease_deadline(l));
	return l2;
}

struct names {
	int l, s, p, e; /* exclusive, read/write, semaphores, elections */
};

/* <locks>: "<l>[:<s>:<p>[:<e>]]"; 0 and a message if it is not one. */
static int read_names(const char *spec, struct names *nm)
{
	nm->l = nm->s = nm->p = nm->e = 0;
	if (sscanf(spec, "%d:%d:%d:%d", &nm->l, &nm->s, &nm->p, &nm->e) < 1 ||
	    nm->l < 0 || nm->s < 0 || nm->p < 0 || nm->e < 0 ||
	    nm->l + nm->s + nm->p + nm->e < 1) {
		fprintf(stderr, "worker: <locks> is <l>[:<s>:<p>[:<e>]]\n");
		return 0;
	}
	return 1;
}

static void next_owner(struct dlock_options *o)
{
	char path[4200];
	int fd;

	owner_n++;
	snprintf(owner_now, sizeof(owner_now), "%s~%d", owner_base, owner_n);
	snprintf(path, sizeof(path), "%s~%d.hist", hist_base, owner_n);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd >= 0) {
		close(hist);
		hist = fd;
	}
	o->owner = owner_now;
}

static int connect_retry(const struct dlock_options *o, dlock_client **c)
{
	int rc;

	while (!stop && (rc = dlock_connect(o, c)) != 0) {
		record("E - %d", rc);
		sleep_ms(200);
	}
	return stop ? -1 : 0;
}

/* The TTLs of grants: $WORKER_TTLS ("300,800,2000", ms) if set, for a
 * campaign that needs leases to outlive its faults (the planted shrinking
 * reentry shows only on a lease left held across a restart). */
static int64_t grant_ttls[8] = {300, 800, 2000};
static size_t ngrant_ttls = 3;

static void read_ttls(void)
{
	const char *e = getenv("WORKER_TTLS");
	char *end;
	size_t n = 0;
	long long v;

	while (e && *e && n < sizeof(grant_ttls) / sizeof(grant_ttls[0])) {
		v = strtoll(e, &end, 10);
		if (end == e || v < 1)
			break;
		grant_ttls[n++] = v;
		e = *end == ',' ? end + 1 : end;
	}
	if (n > 0)
		ngrant_ttls = n;
}

static void one_lock(dlock_client **cp, const struct dlock_options *o,
		     const struct names *nm)
{
	dlock_client *c = *cp;
	static const int64_t waits[] = {0, 500, 3000, DLOCK_WAIT_FOREVER};
	static const int quarters[] = {0, 1, 2, 6}; /* hold, in ttl/4 */
	int64_t ttl = pick(grant_ttls, ngrant_ttls), wait = pick(waits, 4);
	struct dlock_lock_options lo;
	dlock_lease *l = NULL, *l2;
	char name[16], mode[16] = "x", value[DLOCK_VALUE_MAX + 1];
	int changed, rc, k, others = nm->l + nm->s + nm->p, proclaims = 0;
	/* an election one time in four, when there are some */
	int election = nm->e > 0 && (others == 0 || draw(4) == 0);

	k = election ? 0 : rand() % others;
	dlock_lock_options_init(&lo);
	lo.ttl_ms = ttl;
	lo.wait_ms = wait;
	lo.notify_waiters = draw(3) == 0; /* news of waiters (W) */
	if (election) {
		snprintf(name, sizeof(name), "E%d", draw(nm->e));
		new_value(value, sizeof(value));
		lo.value = value;
		proclaims = draw(3);
	} else if (k < nm->l) {
		snprintf(name, sizeof(name), "L%d", k);
	} else if (k < nm->l + nm->s) {
		snprintf(name, sizeof(name), "S%d", k - nm->l);
		if (rand() % 3) {
			lo.mode = DLOCK_SHARED;
			mode[0] = 's';
		}
	} else {
		snprintf(name, sizeof(name), "P%d", k - nm->l - nm->s);
		lo.limit = PERMITS;
		snprintf(mode, sizeof(mode), "p%d", PERMITS);
	}
	/* the value before the LOCK that says it: its token is the next G's
	 * of this lock in this file (check.c) */
	if (election)
		record("V %s 0 %s", name, value);
	rc = dlock_acquire(c, name, &lo, &l);
	if (rc != 0) {
		record("E %s %d", name, rc);
		if (rc != DLOCK_EBUSY && rc != DLOCK_ETIMEDOUT)
			sleep_ms(50); /* the server is away: do not spin */
		return;
	}
	record("G %s %" PRIu64 " %" PRId64 " %s", name, dlock_lease_token(l),
	       dlock_lease_deadline(l), mode);
	l2 = change_ttl(c, name, &lo, l, &changed);
	if ((election || k < nm->l) && changed && rand() % 3 == 0) {
		/* Leave it held, as `dlock lock` does (a leader that goes
		 * without resigning): the client goes and
		 * nobody renews; the lease lasts its TTL at the server, and
		 * its interval stays open until the deadline it was told.
		 * The worker goes on as another owner, with a history of its
		 * own: the same owner would be granted the lock again as a
		 * reentry, and its release would end the left lease too. */
		dlock_close(c);
		*cp = NULL;
		next_owner((struct dlock_options *)o);
		connect_retry(o, cp);
		return;
	}
	if (l2 && rand() % 2) {
		/* the reentry's hold given back first: the lease goes on
		 * with the other, also when the server has forgotten it */
		dlock_unlock(c, l2);
		l2 = NULL;
	}
	/* U before the release, held to the end or not: a lease no longer
	 * valid is given back too, and its loss's L record, written by the
	 * library's thread, may come after the release let the next holder
	 * in (found with the Java worker: a violation of the records, not
	 * of the lock) */
	hold(c, l, ttl * quarters[(size_t)rand() % 4] / 4, proclaims);
	record("U %s %" PRIu64, name, dlock_lease_token(l));
	if (l2)
		dlock_unlock(c, l2);
	dlock_unlock(c, l);
}

/* The client's options of `worker lock` and `worker observe` (argv from
 * <hist>), its seed, and the end of its run, with an alarm past it. */
static int64_t client_setup(char **argv, struct dlock_options *o)
{
	dlock_options_init(o);
	if (strchr(argv[1], ':'))
		o->servers = argv[1]; /* a cluster: h:p,h:p */
	else
		o->host = argv[1];
	o->port = atoi(argv[2]);
	o->owner = argv[3];
	snprintf(owner_base, sizeof(owner_base), "%s", argv[3]);
	snprintf(hist_base, sizeof(hist_base), "%.*s",
		 (int)(strlen(argv[0]) > 5 ? strlen(argv[0]) - 5 : 0), argv[0]);
	o->request_timeout_ms = 3000;
	srand((unsigned)strtoul(argv[5], NULL, 10));
	new_seed = (unsigned)strtoul(argv[5], NULL, 10) ^ 0x5eed;
	signal(SIGALRM, on_alarm);
	alarm((unsigned)(atoll(argv[6]) / 1000 + 30));
	return dlock_now_ms() + atoll(argv[6]);
}

static int run_locks(char **argv)
{
	struct dlock_options o;
	dlock_client *c = NULL;
	struct names nm;
	int64_t end;

	if (!read_names(argv[4], &nm))
		return 64;
	end = client_setup(argv, &o);
	o.on_lost = on_lost;
	o.on_contended = on_contended;
	read_ttls();
	connect_retry(&o, &c);
	while (!stop && c && dlock_now_ms() < end)
		one_lock(&c, &o, &nm);
	dlock_close(c);
	return 0;
}

/* ---- worker observe: a follower of the elections ---------------------------
 */

/* What the observer was told of lease `token` of `lock`: an O record. */
static void observed(const char *lock, uint64_t token, const char *value,
		     char how, const char *owner)
{
	record("O %s %" PRIu64 " %s %c %s", lock, token, value[0] ? value : "-",
	       how, owner[0] ? owner : "-");
}

static int run_observe(char **argv)
{
	struct dlock_options o;
	struct dlock_watch_event ev;
	struct dlock_status st;
	dlock_client *c = NULL;
	struct names nm;
	int64_t end, next_status = 0;
	int watching = 0, rc;
	char name[16];

	if (!read_names(argv[4], &nm))
		return 64;
	if (nm.e < 1) {
		fprintf(stderr, "worker observe: <locks> has no elections\n");
		return 64;
	}
	end = client_setup(argv, &o);
	connect_retry(&o, &c);
	while (!stop && c && dlock_now_ms() < end) {
		/* the first watch, or again after a reconnect refused it;
		 * the library watches again after every other reconnect */
		if (!watching) {
			rc = dlock_watch(c, "E*", NULL);
			if (rc != 0) {
				record("E E* %d", rc);
				sleep_ms(200);
				continue;
			}
			watching = 1;
		}
		rc = dlock_watch_next(c, &ev, 50);
		if (rc == DLOCK_ECANCELED)
			break;
		if (rc == 0 && ev.name[0] == 'E') {
			switch (ev.kind) {
			case DLOCK_WATCH_GRANTED:
				observed(ev.name, ev.token, ev.value, 'g',
					 ev.owner);
				break;
			case DLOCK_WATCH_VALUE:
				observed(ev.name, ev.token, ev.value, 'v',
					 ev.owner);
				break;
			case DLOCK_WATCH_RELEASED:
			case DLOCK_WATCH_EXPIRED:
			case DLOCK_WATCH_BROKEN:
			case DLOCK_WATCH_WITHDRAWN:
				if (ev.value[0])
					observed(ev.name, ev.token, ev.value,
						 'e', ev.owner);
				break;
			case DLOCK_WATCH_REFUSED:
				record("E E* %d", ev.error);
				watching = 0;
				break;
			case DLOCK_WATCH_OVERFLOW:
				fprintf(stderr,
					"worker observe: %" PRIu64
					" watch events missed\n",
					ev.missed);
				break;
			default:
				break;
			}
		}
		if (dlock_now_ms() >= next_status) {
			/* a follower that asks rather than listens */
			snprintf(name, sizeof(name), "E%d", rand() % nm.e);
			if (dlock_status(c, name, &st) == 0 && st.held)
				observed(name, st.token, st.value, 's',
					 st.owner);
			next_status = dlock_now_ms() + 100 + rand() % 200;
		}
	}
	dlock_close(c);
	return 0;
}

/* ---- worker raw: the protocol by hand -------------------------------------
 */

struct raw {
	int fd;
	char buf[4096];
	size_t len;
};

/* Connect to host:port (host may be "h:p,h:p": the n-th, round robin). */
static int raw_connect(struct raw *r, const char *hosts, const char *port,
		       int n)
{
	char list[512], h[256], p[16], *save = NULL, *tok, *colon;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	struct timeval limit = {.tv_sec = 3};
	int k = 0, count = 0, fd;

	snprintf(list, sizeof(list), "%s", hosts);
	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save))
		count++;
	snprintf(list, sizeof(list), "%s", hosts);
	save = NULL;
	for (tok = strtok_r(list, ",", &save); tok && k != n % count;
	     tok = strtok_r(NULL, ",", &save))
		k++;
	snprintf(h, sizeof(h), "%s", tok);
	snprintf(p, sizeof(p), "%s", port);
	if ((colon = strrchr(h, ':')) != NULL) {
		*colon = '\0';
		snprintf(p, sizeof(p), "%s", colon + 1);
	}
	if (getaddrinfo(h, p, &hints, &ai) != 0)
		return -1;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	/* Linux bounds connect() by the send timeout: a server that never
	 * answers the SYN costs 3 s, as a silent reply does (raw_line),
	 * not the kernel's two minutes. */
	if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit,
				   sizeof(limit)) != 0 ||
			connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(ai);
	r->fd = fd;
	r->len = 0;
	return fd < 0 ? -1 : 0;
}

/* The next reply line (events, "* ...", skipped) within 3 s, without its
 * CRLF; -1 when the connection failed or said nothing. */
static int raw_line(struct raw *r, char *out, size_t cap)
{
	int64_t end = dlock_now_ms() + 3000, left;
	struct pollfd pf = {.fd = r->fd, .events = POLLIN};
	char *nl;
	ssize_t n;
	size_t k;
	int event;

	for (;;) {
		while ((nl = memchr(r->buf, '\n', r->len)) != NULL) {
			k = (size_t)(nl - r->buf);
			event = r->buf[0] == '*';
			if (!event) {
				size_t m =
					k && r->buf[k - 1] == '\r' ? k - 1 : k;

				if (m >= cap)
					m = cap - 1;
				memcpy(out, r->buf, m);
				out[m] = '\0';
			}
			memmove(r->buf, nl + 1, r->len - k - 1);
			r->len -= k + 1;
			if (!event)
				return 0;
		}
		left = end - dlock_now_ms();
		if (r->len == sizeof(r->buf) || stop || left <= 0 ||
		    poll(&pf, 1, (int)left) <= 0)
			return -1;
		n = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
		if (n <= 0)
			return -1;
		r->len += (size_t)n;
	}
}

static int raw_ask(struct raw *r, char *reply, size_t cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int raw_ask(struct raw *r, char *reply, size_t cap, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (write(r->fd, line, (size_t)n) != n)
		return -1;
	return raw_line(r, reply, cap);
}

static int raw_multi(struct raw *r, int locks, int64_t ttl);

/* One session: HELLO as <owner> with no key, then TRYLOCK, hold, UNLOCK
 * until the end or a failure. */
static void raw_session(struct raw *r, const char *owner, int locks,
			int64_t end)
{
	char reply[1024], name[16], got[64];
	uint64_t token;
	int64_t ttl, sent, ms;

	if (raw_ask(r, reply, sizeof(reply), "HELLO owner=%s\r\n", owner) < 0)
		return;
	if (strncmp(reply, "OK HELLO", 8) != 0) {
		/* NO DENIED: the id is someone else's, as it should be */
		if (strncmp(reply, "NO DENIED", 9) == 0)
			record("E - %d", DLOCK_EDENIED);
		return;
	}
	while (!stop && dlock_now_ms() < end) {
		ttl = pick(grant_ttls, ngrant_ttls);
		if (rand() % multi_every == 0) {
			if (raw_multi(r, locks, ttl) < 0)
				return;
			continue;
		}
		snprintf(name, sizeof(name), "L%d", rand() % locks);
		sent = dlock_now_ms();
		if (raw_ask(r, reply, sizeof(reply),
			    "TRYLOCK %s ttl=%" PRId64 "\r\n", name, ttl) < 0)
			return;
		if (sscanf(reply, "OK GRANTED %63s %" SCNu64 " %" SCNd64, got,
			   &token, &ms) != 3) {
			if (strncmp(reply, "NO ", 3) != 0)
				return; /* a standby, Redis away: another server
					 */
			sleep_ms(rand() % 50);
			continue;
		}
		/* the deadline libdlock would count: from the send time, less
		 * its slack for the server's rounding */
		record("G %s %" PRIu64 " %" PRId64 " x", name, token,
		       sent + ms - 2 - ms / 1000);
		sleep_ms(ttl * (rand() % 3) / 4);
		record("U %s %" PRIu64, name, token);
		if (raw_ask(r, reply, sizeof(reply),
			    "UNLOCK %s %" PRIu64 "\r\n", name, token) < 0)
			return;
	}
}

/* The next line, events included, within ms; -1 on a failure. */
static int raw_any(struct raw *r, char *out, size_t cap, int64_t ms)
{
	int64_t end = dlock_now_ms() + ms, left;
	struct pollfd pf = {.fd = r->fd, .events = POLLIN};
	char *nl;
	ssize_t n;
	size_t k, m;

	for (;;) {
		if ((nl = memchr(r->buf, '\n', r->len)) != NULL) {
			k = (size_t)(nl - r->buf);
			m = k && r->buf[k - 1] == '\r' ? k - 1 : k;
			if (m >= cap)
				m = cap - 1;
			memcpy(out, r->buf, m);
			out[m] = '\0';
			memmove(r->buf, nl + 1, r->len - k - 1);
			r->len -= k + 1;
			return 0;
		}
		left = end - dlock_now_ms();
		if (r->len == sizeof(r->buf) || stop || left <= 0 ||
		    poll(&pf, 1, (int)left) <= 0)
			return -1;
		n = read(r->fd, r->buf + r->len, sizeof(r->buf) - r->len);
		if (n <= 0)
			return -1;
		r->len += (size_t)n;
	}
}

/* A multi-lock of 2 or 3 of L0..L<locks-1>: -1 when the connection is
 * to be given up. */
static int raw_multi(struct raw *r, int locks, int64_t ttl)
{
	char reply[1024], first[16], got[64], names[3][64];
	char line[128];
	uint64_t token[3];
	int64_t sent, ms, deadline[3],
		wait = rand() % 4 == 0 ? 0 : 1000 + rand() % 3000;
	int k = rand() % 2 ? 3 : 2, n, i, j, event = 0, pick;

	/* from the exclusive locks the other workers take too, and a few
	 * only multi-locks take (M0..): the lock workers keep L0.. queued
	 * (found: in the campaign every multi-lock of L names alone timed
	 * out) */
	for (i = 0; i < k; i++) {
	again:
		pick = rand() % (locks + MULTI_NAMES);
		if (pick < locks)
			snprintf(names[i], sizeof(names[i]), "L%d", pick);
		else
			snprintf(names[i], sizeof(names[i]), "M%d",
				 pick - locks);
		for (j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				goto again;
	}
	n = snprintf(line, sizeof(line), "LOCK");
	for (i = 0; i < k; i++)
		n += snprintf(line + n, sizeof(line) - (size_t)n, " %s",
			      names[i]);
	sent = dlock_now_ms();
	if (raw_ask(r, reply, sizeof(reply),
		    "%s ttl=%" PRId64 " wait=%" PRId64 "ms\r\n", line, ttl,
		    wait) < 0)
		return -1;
	if (strncmp(reply, "OK QUEUED ", 10) == 0) {
		/* its end: * LOCKED, * TIMEOUT or * FAILED (no other event
		 * comes to this connection) */
		if (raw_any(r, reply, sizeof(reply), wait + 3000) < 0)
			return -1;
		event = 1;
	}
	if (sscanf(reply, event ? "* LOCKED %15s %d" : "OK LOCKED %15s %d",
		   first, &n) != 2) {
		if (strncmp(reply, "NO ", 3) != 0 && strncmp(reply, "* ", 2))
			return -1; /* a standby, Redis away: another server */
		record("E %s %d", names[0], DLOCK_EBUSY);
		return 0;
	}
	if (n != k) {
		record("B %s %d", first, n);
		return -1;
	}
	for (i = 0; i < n; i++) {
		if (raw_any(r, reply, sizeof(reply), 3000) < 0 ||
		    sscanf(reply, "granted %63s %" SCNu64 " %" SCNd64, got,
			   &token[i], &ms) != 3) {
			record("B %s %d", first, i);
			return -1;
		}
		snprintf(names[i], sizeof(names[i]), "%s", got);
		deadline[i] = sent + ms - 2 - ms / 1000;
	}
	/* an event's grants: counted from a refresh's send, as libdlock
	 * confirms a * GRANTED */
	for (i = 0; event && i < n; i++) {
		sent = dlock_now_ms();
		if (raw_ask(r, reply, sizeof(reply),
			    "REFRESH %s %" PRIu64 " ttl=%" PRId64 "\r\n",
			    names[i], token[i], ttl) < 0)
			return -1;
		if (sscanf(reply, "OK REFRESHED %63s %" SCNd64, got, &ms) !=
		    2) {
			deadline[i] = 0; /* lost meanwhile: never believed */
			continue;
		}
		deadline[i] = sent + ms - 2 - ms / 1000;
	}
	record("M %s %d", first, n);
	for (i = 0; i < n; i++)
		if (deadline[i])
			record("G %s %" PRIu64 " %" PRId64 " x", names[i],
			       token[i], deadline[i]);
	sleep_ms(ttl * (rand() % 3) / 4);
	for (i = 0; i < n; i++) {
		if (!deadline[i])
			continue;
		record("U %s %" PRIu64, names[i], token[i]);
		if (raw_ask(r, reply, sizeof(reply),
			    "UNLOCK %s %" PRIu64 "\r\n", names[i],
			    token[i]) < 0)
			return -1;
	}
	return 0;
}

static int run_raw(char **argv)
{
	struct raw r;
	int64_t end;
	int locks = atoi(argv[4]), n = 0;

	if (locks < 1) {
		fprintf(stderr, "worker raw: <locks> needs exclusive locks\n");
		return 64;
	}
	signal(SIGPIPE, SIG_IGN); /* a closed connection: write fails */
	srand((unsigned)strtoul(argv[5], NULL, 10));
	read_ttls();
	end = dlock_now_ms() + atoll(argv[6]);
	while (!stop && dlock_now_ms() < end) {
		if (raw_connect(&r, argv[1], argv[2], n++) < 0) {
			record("E - %d", DLOCK_ECONNECT);
			sleep_ms(200);
			continue;
		}
		raw_session(&r, argv[3], locks, end);
		close(r.fd);
		/* refused, or the server is away: as libdlock's reconnects
		 * do, not a storm of connections */
		sleep_ms(100 + rand() % 200);
	}
	return 0;
}

static int run_child(int64_t ms)
{
	const char *name = getenv("DLOCK_NAME"), *token = getenv("DLOCK_TOKEN");
	int64_t end = dlock_now_ms() + ms;

	if (!name || !token)
		return 2;
	while (dlock_now_ms() < end) {
		record("A %s %s", name, token);
		sleep_ms(10);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = on_term};

	if (argc == 2 && strcmp(argv[1], "now") == 0) {
		printf("%" PRId64 "\n", dlock_now_ms());
		return 0;
	}
	if (argc < 3 ||
	    ((strcmp(argv[1], "lock") == 0 || strcmp(argv[1], "raw") == 0 ||
	      strcmp(argv[1], "multi") == 0 ||
	      strcmp(argv[1], "observe") == 0) &&
	     argc != 9) ||
	    (strcmp(argv[1], "child") == 0 && argc != 4)) {
		fprintf(stderr, "usage: worker lock <hist> <host> <port> "
				"<owner> <locks> <seed> <ms>\n"
				"       worker raw <hist> <host> <port> "
				"<owner> <locks> <seed> <ms>\n"
				"       worker multi <hist> <host> <port> "
				"<owner> <locks> <seed> <ms>\n"
				"       worker observe <hist> <host> <port> "
				"<owner> <locks> <seed> <ms>\n"
				"       worker child <hist> <ms>\n"
				"       worker now\n");
		return 64;
	}
	hist = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (hist < 0) {
		perror(argv[2]);
		return 1;
	}
	if (strcmp(argv[1], "child") == 0)
		return run_child(atoll(argv[3]));
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	if (strcmp(argv[1], "multi") == 0)
		multi_every = 1;
	if (strcmp(argv[1], "raw") == 0 || strcmp(argv[1], "multi") == 0)
		return run_raw(argv + 2);
	if (strcmp(argv[1], "observe") == 0)
		return run_observe(argv + 2);
	return run_locks(argv + 2);
}
