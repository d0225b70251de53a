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
 *       file <hist>. <locks> is "<l>[:<s>:<p>]": exclusive locks
 *       L0..L<l-1>; read/write locks S0..S<s-1>, taken shared two times
 *       in three, else exclusive; semaphores P0..P<p-1> of PERMITS;
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
 *
 * Every worker is its own owner (a distinct id), holding one lease at a
 * time; the checker takes the file name as the owner.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/dlock.h"

/* The limit of the semaphores P0..: every worker asks the same. */
#define PERMITS 2

static int hist = -1;
static volatile sig_atomic_t stop;

static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void record(const char *fmt, ...)
{
	char line[256];
	int n = snprintf(line, sizeof(line), "%" PRId64 " ", dlock_now_ms());
	va_list ap;

	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';
	(void)!write(hist, line, (size_t)n);
}

static void on_term(int sig)
{
	(void)sig;
	stop = 1;
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

static int64_t pick(const int64_t *v, size_t n)
{
	return v[(size_t)rand() % n];
}

/* Hold the lease for about `ms`, noting each renewal; returns 1 if it is
 * still valid at the end. */
static int hold(dlock_lease *l, int64_t ms)
{
	int64_t end = dlock_now_ms() + ms, seen = dlock_lease_deadline(l), d;

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
	dlock_lease *l2 = NULL;
	int64_t before = dlock_lease_deadline(l);

	*changed = 0;
	switch (rand() % 4) {
	case 0:
		lo->ttl_ms = pick(ttls, 6);
		lo->wait_ms = 0;
		if (dlock_acquire(c, name, lo, &l2) != 0)
			l2 = NULL;
		break;
	case 1:
		dlock_refresh(c, l, pick(ttls, 6));
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
	int l, s, p; /* exclusive, read/write, semaphores */
};

/* The history's path and the owner id: the file name is the owner
 * (check.c), "<path>.hist" and "<owner>", then "<path>~<n>.hist" and
 * "<owner>~<n>" after each lease left held. */
static char hist_base[4096], owner_base[64], owner_now[80];
static int owner_n;

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

static void one_lock(dlock_client **cp, const struct dlock_options *o,
		     const struct names *nm)
{
	dlock_client *c = *cp;
	static const int64_t ttls[] = {300, 800, 2000};
	static const int64_t waits[] = {0, 500, 3000, DLOCK_WAIT_FOREVER};
	static const int quarters[] = {0, 1, 2, 6}; /* hold, in ttl/4 */
	int64_t ttl = pick(ttls, 3), wait = pick(waits, 4);
	struct dlock_lock_options lo;
	dlock_lease *l = NULL, *l2;
	char name[16], mode[16] = "x";
	int changed, rc, k = rand() % (nm->l + nm->s + nm->p);

	dlock_lock_options_init(&lo);
	lo.ttl_ms = ttl;
	lo.wait_ms = wait;
	if (k < nm->l) {
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
	if (k < nm->l && changed && rand() % 3 == 0) {
		/* Leave it held, as `dlock lock` does: the client goes and
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
	if (hold(l, ttl * quarters[(size_t)rand() % 4] / 4))
		record("U %s %" PRIu64, name, dlock_lease_token(l));
	if (l2)
		dlock_unlock(c, l2);
	dlock_unlock(c, l);
}

static int run_locks(char **argv)
{
	struct dlock_options o;
	dlock_client *c = NULL;
	struct names nm = {0, 0, 0};
	int64_t end;

	if (sscanf(argv[4], "%d:%d:%d", &nm.l, &nm.s, &nm.p) < 1 ||
	    nm.l < 0 || nm.s < 0 || nm.p < 0 || nm.l + nm.s + nm.p < 1) {
		fprintf(stderr, "worker: <locks> is <l>[:<s>:<p>]\n");
		return 64;
	}
	dlock_options_init(&o);
	if (strchr(argv[1], ':'))
		o.servers = argv[1]; /* a cluster: h:p,h:p */
	else
		o.host = argv[1];
	o.port = atoi(argv[2]);
	o.owner = argv[3];
	snprintf(owner_base, sizeof(owner_base), "%s", argv[3]);
	snprintf(hist_base, sizeof(hist_base), "%.*s",
		 (int)(strlen(argv[0]) > 5 ? strlen(argv[0]) - 5 : 0), argv[0]);
	o.on_lost = on_lost;
	o.request_timeout_ms = 3000;
	srand((unsigned)strtoul(argv[5], NULL, 10));
	end = dlock_now_ms() + atoll(argv[6]);
	connect_retry(&o, &c);
	while (!stop && c && dlock_now_ms() < end)
		one_lock(&c, &o, &nm);
	dlock_close(c);
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
	if (argc < 3 || (strcmp(argv[1], "lock") == 0 && argc != 9) ||
	    (strcmp(argv[1], "child") == 0 && argc != 4)) {
		fprintf(stderr, "usage: worker lock <hist> <host> <port> "
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
	return run_locks(argv + 2);
}
