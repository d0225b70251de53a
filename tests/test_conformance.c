/* SPDX-License-Identifier: MIT */
/*
 * test_conformance.c -- libdlock's runner of the conformance scenarios
 * (tests/conformance/scenarios.txt, which says the language). The Python
 * client runs the same file (tests/python/test_conformance.py): one
 * description of what a client must do on the wire, two libraries held
 * to it.
 *
 * One parameterized test per scenario (its index in the file). Each
 * starts its daemon through the harness (and a redis-server for "daemon
 * redis"), runs the steps in order on dlock_client objects, and fails at
 * the first step whose outcome differs, naming the scenario, the line
 * and what was seen. Background locks ("spawn") run on threads of their
 * own. $DL_CONFORMANCE overrides the file's path.
 *
 * With DL_CONFORMANCE_PARTS=1 (make check's test_conformance.parts) every
 * scenario runs on a partitioned service instead: a redis-server and
 * three daemons of partitions p0, p1 and p2, the map giving p0 the slots
 * below 5461, p1 those below 10923, p2 the rest. The clients know p0's
 * daemon only, and every name of a scenario is put under one tag whose
 * slot is p1's or p2's (by the scenario's index): each of its calls goes
 * through the map and NO MOVED to the partition that serves it, and a
 * multi-lock's names share it. "daemon none" starts the same service
 * (partitions need Redis); "daemon kill9", "restart", "pause" and
 * "resume" act on every daemon.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/lib/dlock.h"
#include "proto/slot.h"
#include "tests/harness.h"

#define SCENARIOS_MAX  64  /* scenarios in the file */
#define LINES_MAX      128 /* steps of one scenario */
#define LINE_LEN       256
#define WORDS_MAX      16
#define CLIENTS_MAX    8
#define LEASES_MAX     16
#define JOBS_MAX       8
#define ALL_MAX	       8    /* names of one lockall step */
#define STATUS_POLL_MS 2000 /* a status step is polled this long */

struct var_lease {
	char id[16];
	dlock_lease *l;
	int client;
	uint64_t token;
	atomic_int lost;
	int why;
	int64_t at, deadline; /* on_lost's moment and the lease's deadline */
};

/* What on_contended said, by handle: it may come before the scenario
 * names the lease (a * WAITING right after a waiter's * GRANTED). */
#define TOLD_MAX 32
struct told {
	const dlock_lease *l;
	uint32_t waiters;
};

struct var_client {
	char id[16];
	dlock_client *c;
};

/* A lockall step's names, in byte order (as its leases are bound). */
struct all {
	char buf[LINE_LEN];
	const char *names[ALL_MAX];
	size_t n;
	struct dlock_lock_all_options o;
	dlock_lease *out[ALL_MAX];
};

struct job {
	char id[16];
	pthread_t th;
	int client;
	char name[64];
	struct dlock_lock_options lo;
	int rc;
	dlock_lease *l;
	int multi; /* a lockall: `all` */
	struct all all;
};

#define PARTS 3 /* the partitioned service's partitions */

static struct {
	struct h_daemon d;	       /* p0's with DL_CONFORMANCE_PARTS */
	struct h_daemon dp[PARTS - 1]; /* p1's and p2's */
	int parts;		       /* DL_CONFORMANCE_PARTS */
	char tag[16];		       /* "{c<k>}": the names' tag, or "" */
	struct h_redis r;
	struct var_client clients[CLIENTS_MAX];
	int nclients;
	struct var_lease leases[LEASES_MAX];
	int nleases;
	struct job jobs[JOBS_MAX];
	int njobs;
	struct told told[TOLD_MAX];
	int ntold;
	pthread_mutex_t mu; /* leases[] and told[], against the callbacks */
	const char *scenario;
	int lineno;
} S = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- the file ----------------------------------------------------------- */

static const char *path(void)
{
	const char *p = getenv("DL_CONFORMANCE");

	return p ? p : "tests/conformance/scenarios.txt";
}

/* The lines of scenario `index` (its "scenario" line first): *n lines
 * into out, their line numbers into nos. 0, or -1 if there is none. */
static int load(int index, char out[][LINE_LEN], int *nos, int *n)
{
	FILE *f = fopen(path(), "r");
	char line[LINE_LEN];
	int k = -1, no = 0;

	*n = 0;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *p = line;

		no++;
		line[strcspn(line, "\r\n")] = '\0';
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '#' || *p == '\0')
			continue;
		if (strncmp(p, "scenario ", 9) == 0)
			k++;
		if (k == index && *n < LINES_MAX) {
			snprintf(out[*n], LINE_LEN, "%s", p);
			nos[(*n)++] = no;
		}
	}
	fclose(f);
	return *n > 0 ? 0 : -1;
}

static int count(void)
{
	char lines[LINES_MAX][LINE_LEN];
	int nos[LINES_MAX], n, k = 0;

	while (k < SCENARIOS_MAX && load(k, lines, nos, &n) == 0)
		k++;
	return k;
}

/* ---- variables ---------------------------------------------------------- */

#define fail(...)                                                              \
	cr_assert_fail("%s, line %d: %s", S.scenario, S.lineno,                \
		       (snprintf(msg, sizeof(msg), __VA_ARGS__), msg))
static char msg[512];

static int client_of(const char *id)
{
	int i;

	for (i = 0; i < S.nclients; i++)
		if (strcmp(S.clients[i].id, id) == 0)
			return i;
	fail("no client %s", id);
	return -1;
}

static struct var_lease *lease_of(const char *id)
{
	int i;

	for (i = 0; i < S.nleases; i++)
		if (strcmp(S.leases[i].id, id) == 0)
			return &S.leases[i];
	fail("no lease %s", id);
	return NULL;
}

static void on_lost(dlock_client *c, const dlock_lease *l,
		    enum dlock_lost_reason why, void *arg)
{
	int i;

	(void)c;
	(void)arg;
	pthread_mutex_lock(&S.mu);
	for (i = 0; i < S.nleases; i++) {
		if (S.leases[i].l != l)
			continue;
		S.leases[i].why = (int)why;
		S.leases[i].at = dlock_now_ms();
		S.leases[i].deadline = dlock_lease_deadline(l);
		atomic_store(&S.leases[i].lost, 1);
	}
	pthread_mutex_unlock(&S.mu);
}

static void on_contended(dlock_client *c, const dlock_lease *l,
			 uint32_t waiters, void *arg)
{
	int i;

	(void)c;
	(void)arg;
	pthread_mutex_lock(&S.mu);
	for (i = 0; i < S.ntold && S.told[i].l != l; i++)
		;
	if (i < TOLD_MAX) {
		S.told[i].l = l;
		S.told[i].waiters = waiters;
		S.ntold += i == S.ntold;
	}
	pthread_mutex_unlock(&S.mu);
}

static uint32_t told_of(const dlock_lease *l)
{
	uint32_t n = 0;
	int i;

	pthread_mutex_lock(&S.mu);
	for (i = 0; i < S.ntold; i++)
		if (S.told[i].l == l)
			n = S.told[i].waiters;
	pthread_mutex_unlock(&S.mu);
	return n;
}

static void bind_lease(const char *id, int client, dlock_lease *l)
{
	struct var_lease *v;

	cr_assert(S.nleases < LEASES_MAX);
	pthread_mutex_lock(&S.mu);
	v = &S.leases[S.nleases++];
	memset(v, 0, sizeof(*v));
	snprintf(v->id, sizeof(v->id), "%s", id);
	v->l = l;
	v->client = client;
	v->token = dlock_lease_token(l);
	pthread_mutex_unlock(&S.mu);
}

/* ---- steps -------------------------------------------------------------- */

static int split(char *line, char **w)
{
	int n = 0;
	char *save = NULL, *t;

	for (t = strtok_r(line, " \t", &save); t && n < WORDS_MAX;
	     t = strtok_r(NULL, " \t", &save))
		w[n++] = t;
	return n;
}

static const char *opt(char **w, int n, const char *key)
{
	size_t k = strlen(key);
	int i;

	for (i = 0; i < n; i++)
		if (strncmp(w[i], key, k) == 0 && w[i][k] == '=')
			return w[i] + k + 1;
	return NULL;
}

static void step_client(char **w, int n)
{
	struct dlock_options o;
	struct var_client *vc;
	const char *v, *expect = opt(w, n, "expect");
	int rc;

	cr_assert(S.nclients < CLIENTS_MAX);
	dlock_options_init(&o);
	o.port = S.d.port;
	o.owner = opt(w, n, "owner");
	o.owner_key = opt(w, n, "key");
	o.on_lost = on_lost;
	o.on_contended = on_contended;
	if ((v = opt(w, n, "renew")))
		o.renew = atoi(v);
	vc = &S.clients[S.nclients];
	snprintf(vc->id, sizeof(vc->id), "%s", w[1]);
	rc = dlock_connect(&o, &vc->c);
	if (expect && strcmp(expect, "denied") == 0) {
		if (rc != DLOCK_EDENIED)
			fail("connect: %s, expected denied",
			     dlock_strerror(rc));
		return;
	}
	if (rc != 0)
		fail("connect: %s (%s)", dlock_strerror(rc),
		     dlock_last_error());
	S.nclients++;
}

static void lock_options(char **w, int n, struct dlock_lock_options *lo)
{
	const char *v;

	dlock_lock_options_init(lo);
	if ((v = opt(w, n, "ttl")))
		lo->ttl_ms = atoll(v);
	if ((v = opt(w, n, "wait")))
		lo->wait_ms =
			strcmp(v, "inf") == 0 ? DLOCK_WAIT_FOREVER : atoll(v);
	if ((v = opt(w, n, "mode")))
		lo->mode = strcmp(v, "shared") == 0 ? DLOCK_SHARED
						    : DLOCK_EXCLUSIVE;
	if ((v = opt(w, n, "limit")))
		lo->limit = (uint32_t)atoi(v);
	if ((v = opt(w, n, "notify")))
		lo->notify_waiters = strcmp(v, "waiters") == 0;
	lo->value = opt(w, n, "value");
}

static const char *lock_word(int rc)
{
	switch (rc) {
	case 0:
		return "granted";
	case DLOCK_EBUSY:
		return "busy";
	case DLOCK_ETIMEDOUT:
		return "timeout";
	case DLOCK_EMISMATCH:
		return "mismatch";
	case DLOCK_EDEADLK:
		return "deadlock";
	case DLOCK_ECYCLE:
		return "cycle";
	case DLOCK_EHELDBYOWNER:
		return "heldbyowner";
	case DLOCK_EDENIED:
		return "denied";
	case DLOCK_EUNAVAILABLE:
		return "unavailable";
	}
	return dlock_strerror(rc);
}

/* The outcome of a lock, against `want` ("granted L1", "busy", ...). */
static void lock_outcome(int client, int rc, dlock_lease *l, char **want,
			 int nwant)
{
	if (strcmp(lock_word(rc), want[0]) != 0)
		fail("lock: %s (%s), expected %s", lock_word(rc),
		     dlock_last_error(), want[0]);
	if (rc == 0) {
		if (nwant < 2)
			fail("granted needs a lease name");
		bind_lease(want[1], client, l);
	}
	if (rc == DLOCK_ECYCLE) {
		/* NO DEADLOCK <name> <n> ...: n owners */
		const char *e = dlock_last_error();
		unsigned n = 0;

		if (nwant < 2 || sscanf(e, "NO DEADLOCK %*s %u", &n) != 1 ||
		    n != (unsigned)atoi(want[1]))
			fail("cycle: \"%s\", expected %s owners", e,
			     nwant < 2 ? "?" : want[1]);
	}
}

static void *job_main(void *arg)
{
	struct job *j = arg;

	if (j->multi)
		j->rc = dlock_acquire_all(S.clients[j->client].c, j->all.names,
					  j->all.n, &j->all.o, j->all.out);
	else
		j->rc = dlock_acquire(S.clients[j->client].c, j->name, &j->lo,
				      &j->l);
	return NULL;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* lockall <name>,<name>,... [ttl=] [wait=]: w[0] is the names. The names
 * are sorted: out[i] is then the lease of the i-th in byte order. */
static void all_options(char **w, int n, struct all *a)
{
	const char *v;
	char *save = NULL, *t;

	memset(a, 0, sizeof(*a));
	snprintf(a->buf, sizeof(a->buf), "%s", w[0]);
	for (t = strtok_r(a->buf, ",", &save); t && a->n < ALL_MAX;
	     t = strtok_r(NULL, ",", &save))
		a->names[a->n++] = t;
	qsort(a->names, a->n, sizeof(a->names[0]), cmp_str);
	dlock_lock_all_options_init(&a->o);
	if ((v = opt(w, n, "ttl")))
		a->o.ttl_ms = atoll(v);
	if ((v = opt(w, n, "wait")))
		a->o.wait_ms =
			strcmp(v, "inf") == 0 ? DLOCK_WAIT_FOREVER : atoll(v);
}

/* The outcome of a lockall, against `want` ("all L1 L2", "busy", ...). */
static void all_outcome(int client, int rc, struct all *a, char **want,
			int nwant)
{
	size_t i;

	if (rc == 0) {
		if (strcmp(want[0], "all") != 0 || nwant != (int)a->n + 1)
			fail("lockall: all granted, expected %s", want[0]);
		for (i = 0; i < a->n; i++) {
			if (!a->out[i] ||
			    strcmp(dlock_lease_name(a->out[i]), a->names[i]))
				fail("lockall: lease %zu is not %s's", i,
				     a->names[i]);
			bind_lease(want[i + 1], client, a->out[i]);
		}
		return;
	}
	for (i = 0; i < a->n; i++)
		if (a->out[i])
			fail("lockall failed but left a lease");
	lock_outcome(client, rc, NULL, want, nwant);
}

static int status_matches(int client, char **want, int nwant, char *seen,
			  size_t len)
{
	struct dlock_status st;
	int i, rc = dlock_status(S.clients[client].c, want[-1], &st);

	if (rc != 0) {
		snprintf(seen, len, "%s", dlock_strerror(rc));
		return 0;
	}
	snprintf(seen, len,
		 "%s token=%llu waiters=%u holders=%u mode=%s limit=%u "
		 "value=%s",
		 st.held ? "held" : "free", (unsigned long long)st.token,
		 st.waiters, st.holders, st.mode, st.limit, st.value);
	if (strcmp(want[0], st.held ? "held" : "free") != 0)
		return 0;
	for (i = 1; i < nwant; i++) {
		const char *eq = strchr(want[i], '=');

		if (!eq) {
			if (st.token != lease_of(want[i])->token)
				return 0;
		} else if (strncmp(want[i], "waiters=", 8) == 0) {
			if (st.waiters != (uint32_t)atoi(eq + 1))
				return 0;
		} else if (strncmp(want[i], "holders=", 8) == 0) {
			if (st.holders != (uint32_t)atoi(eq + 1))
				return 0;
		} else if (strncmp(want[i], "limit=", 6) == 0) {
			if (st.limit != (uint32_t)atoi(eq + 1))
				return 0;
		} else if (strncmp(want[i], "mode=", 5) == 0) {
			if (strcmp(st.mode, eq + 1) != 0)
				return 0;
		} else if (strncmp(want[i], "value=", 6) == 0) {
			if (strcmp(st.value, eq + 1) != 0)
				return 0;
		}
	}
	return 1;
}

static void step_verb(int client, char **w, int n, char **want, int nwant)
{
	dlock_client *c = S.clients[client].c;
	const char *verb = w[1];
	struct var_lease *v;
	dlock_lease *l = NULL;
	char seen[256];
	int rc;

	if (strcmp(verb, "lock") == 0) {
		struct dlock_lock_options lo;

		lock_options(w, n, &lo);
		rc = dlock_acquire(c, w[2], &lo, &l);
		lock_outcome(client, rc, l, want, nwant);
	} else if (strcmp(verb, "lockall") == 0) {
		static struct all a;

		all_options(w + 2, n - 2, &a);
		rc = dlock_acquire_all(c, a.names, a.n, &a.o, a.out);
		all_outcome(client, rc, &a, want, nwant);
	} else if (strcmp(verb, "spawn") == 0) {
		struct job *j = &S.jobs[S.njobs++];

		snprintf(j->id, sizeof(j->id), "%s", w[2]);
		snprintf(j->name, sizeof(j->name), "%s", w[4]);
		j->client = client;
		j->multi = strcmp(w[3], "lockall") == 0;
		if (j->multi)
			all_options(w + 4, n - 4, &j->all);
		lock_options(w + 2, n - 2, &j->lo);
		cr_assert(pthread_create(&j->th, NULL, job_main, j) == 0);
	} else if (strcmp(verb, "release") == 0) {
		v = lease_of(w[2]);
		rc = dlock_unlock(c, v->l);
		v->l = NULL;
		if (strcmp(rc == 0		    ? "ok"
			   : rc == DLOCK_ENOTHOLDER ? "notholder"
						    : dlock_strerror(rc),
			   want[0]) != 0)
			fail("release: %s, expected %s", dlock_strerror(rc),
			     want[0]);
	} else if (strcmp(verb, "refresh") == 0) {
		const char *t = opt(w, n, "ttl");

		v = lease_of(w[2]);
		rc = dlock_refresh(c, v->l, t ? atoll(t) : 0);
		if (strcmp(rc == 0 ? "ok"
			   : rc == DLOCK_ENOTHOLDER || rc == DLOCK_ELOST
				   ? "lost"
				   : dlock_strerror(rc),
			   want[0]) != 0)
			fail("refresh: %s, expected %s", dlock_strerror(rc),
			     want[0]);
	} else if (strcmp(verb, "proclaim") == 0) {
		v = lease_of(w[2]);
		rc = dlock_proclaim(c, v->l, w[3]);
		if (strcmp(rc == 0 ? "ok"
			   : rc == DLOCK_ENOTHOLDER || rc == DLOCK_ELOST
				   ? "lost"
				   : dlock_strerror(rc),
			   want[0]) != 0)
			fail("proclaim: %s, expected %s", dlock_strerror(rc),
			     want[0]);
	} else if (strcmp(verb, "check") == 0 || strcmp(verb, "break") == 0) {
		v = lease_of(w[3]);
		rc = strcmp(verb, "check") == 0
			     ? dlock_check(c, w[2], v->token, NULL, NULL)
			     : dlock_break_reason(c, w[2], v->token,
						  "conformance", NULL);
		if (strcmp(rc == 0 ? (verb[0] == 'c' ? "valid" : "ok")
			   : rc == DLOCK_ESTALE ? "stale"
						: dlock_strerror(rc),
			   want[0]) != 0)
			fail("%s: %s, expected %s", verb, dlock_strerror(rc),
			     want[0]);
	} else if (strcmp(verb, "status") == 0) {
		uint64_t end = h_now_ms() + STATUS_POLL_MS;

		want[-1] = w[2]; /* the name, for status_matches */
		while (!status_matches(client, want, nwant, seen,
				       sizeof(seen))) {
			if (h_now_ms() > end)
				fail("status: %s", seen);
			h_sleep_ms(10);
		}
	} else {
		fail("unknown verb %s", verb);
	}
}

/* The partitioned service (DL_CONFORMANCE_PARTS): Redis, three daemons,
 * the map made, the names' partition told by every daemon's map. */
static void parts_start(int index)
{
	struct h_client *c;
	char conf[160], want[64], *l;
	int i, k, tries;
	unsigned lo = index % 2 ? 10923 : 5461, hi = index % 2 ? 16383 : 10922;

	h_redis_start(&S.r, "always");
	for (i = 0; i < PARTS; i++) {
		struct h_daemon *d = i ? &S.dp[i - 1] : &S.d;

		snprintf(conf, sizeof(conf),
			 "[persistence]\nredis_prefix = c:\n"
			 "[partition]\nid = p%d\n",
			 i);
		h_daemon_start_redis(d, &S.r, conf);
	}
	c = h_connect(S.d.port);
	cr_assert_str_eq(h_call(c, "PARTITION INIT"), "OK PARTITION epoch=1");
	for (i = 1; i < PARTS; i++) {
		/* its daemon puts it in the map within a second */
		snprintf(want, sizeof(want), "part p%d ", i);
		for (tries = 0;; tries++) {
			int n, found = 0;

			l = h_call(c, "MAP");
			n = (int)h_arg_u64(l, 1);
			for (k = 0; k < n; k++)
				found |= h_starts(h_line(c), want);
			if (found)
				break;
			cr_assert(tries < 300, "p%d not in the map", i);
			h_sleep_ms(20);
		}
		l = h_call(c, "PARTITION MOVE %u-%u p%d",
			   i == 1 ? 5461u : 10923u, i == 1 ? 10922u : 16383u,
			   i);
		cr_assert(h_starts(l, "OK PARTITION"), "%s", l);
	}
	h_close(c);
	/* the scenario's tag, on p1 or p2 */
	for (k = 0;; k++) {
		char t[16];

		snprintf(t, sizeof(t), "c%d", k);
		if (dl_key_slot(t, strlen(t)) >= lo &&
		    dl_key_slot(t, strlen(t)) <= hi)
			break;
	}
	snprintf(S.tag, sizeof(S.tag), "{c%d}", k);
	/* every daemon serves from the new map (read every second) */
	for (i = 0; i < PARTS; i++) {
		struct h_daemon *d = i ? &S.dp[i - 1] : &S.d;
		int target = index % 2 ? 2 : 1;

		c = h_connect(d->port);
		for (tries = 0;; tries++) {
			l = h_call(c, "STATUS %sprobe", S.tag);
			if (i == target ? h_starts(l, "OK STATUS")
					: h_starts(l, "NO MOVED"))
				break;
			cr_assert(tries < 300, "p%d: %s", i, l);
			h_sleep_ms(20);
		}
		h_close(c);
	}
}

static void parts_each(void (*fn)(struct h_daemon *d))
{
	int i;

	fn(&S.d);
	for (i = 0; S.parts && i < PARTS - 1; i++)
		fn(&S.dp[i]);
}

static void stop_one(struct h_daemon *d)
{
	h_daemon_signal(d, SIGSTOP);
}

static void cont_one(struct h_daemon *d)
{
	h_daemon_signal(d, SIGCONT);
}

static int scenario_index;

static void step_daemon(const char *what)
{
	if (S.parts && strcmp(what, "kill9") == 0)
		parts_each(h_daemon_kill9);
	else if (S.parts && strcmp(what, "restart") == 0)
		parts_each(h_daemon_restart);
	else if (S.parts && strcmp(what, "pause") == 0)
		parts_each(stop_one);
	else if (S.parts && strcmp(what, "resume") == 0)
		parts_each(cont_one);
	else if (S.parts &&
		 (strcmp(what, "none") == 0 || strcmp(what, "redis") == 0))
		parts_start(scenario_index);
	else if (strcmp(what, "kill9") == 0)
		h_daemon_kill9(&S.d);
	else if (strcmp(what, "restart") == 0)
		h_daemon_restart(&S.d);
	else if (strcmp(what, "pause") == 0)
		h_daemon_signal(&S.d, SIGSTOP);
	else if (strcmp(what, "resume") == 0)
		h_daemon_signal(&S.d, SIGCONT);
	else if (strcmp(what, "none") == 0)
		h_daemon_start(&S.d, "--persist", "none", NULL);
	else if (strcmp(what, "redis") == 0) {
		h_redis_start(&S.r, "always");
		h_daemon_start(&S.d, "--persist", "redis", "--redis", S.r.url,
			       NULL);
	} else
		fail("unknown daemon step %s", what);
}

static void step_lost(char **w, int n)
{
	struct var_lease *v = lease_of(w[1]);
	const char *within = n > 3 && strcmp(w[2], "within") == 0 ? w[3] : "0";
	const char *reason = opt(w, n, "reason");
	static const char *const names[] = {"", "expired", "rejected",
					    "unconfirmed"};
	uint64_t end = h_now_ms() + (uint64_t)atoll(within);

	while (!atomic_load(&v->lost) && h_now_ms() < end)
		h_sleep_ms(5);
	if (!atomic_load(&v->lost))
		fail("%s not lost within %s ms", v->id, within);
	if (reason &&
	    (v->why < 1 || v->why > 3 || strcmp(names[v->why], reason) != 0))
		fail("%s lost with reason %d, expected %s", v->id, v->why,
		     reason);
	if (v->at >= v->deadline)
		fail("%s: on_lost at %lld, not before its deadline %lld", v->id,
		     (long long)v->at, (long long)v->deadline);
}

/* contended <L> <n> within <ms>: on_contended said n for L, and the
 * lease says so too. */
static void step_contended(char **w, int n)
{
	struct var_lease *v = lease_of(w[1]);
	unsigned want = (unsigned)atoi(w[2]);
	const char *within = n > 4 && strcmp(w[3], "within") == 0 ? w[4] : "0";
	uint64_t end = h_now_ms() + (uint64_t)atoll(within);

	while (told_of(v->l) != want && h_now_ms() < end)
		h_sleep_ms(5);
	if (told_of(v->l) != want)
		fail("%s: on_contended said %u, expected %u within %s ms",
		     v->id, told_of(v->l), want, within);
	if (dlock_lease_waiters(v->l) != want)
		fail("%s: dlock_lease_waiters %u, expected %u", v->id,
		     dlock_lease_waiters(v->l), want);
}

/* Under the partitioned service's tag: a name (and each of a lockall's
 * list), in place of the scenario's. */
static char *tagged(const char *name)
{
	static char pool[WORDS_MAX][LINE_LEN];
	static int next;
	char *out = pool[next++ % WORDS_MAX], *o = out;
	const char *p = name, *comma;
	size_t left = LINE_LEN;
	int w;

	do {
		comma = strchr(p, ',');
		w = snprintf(o, left, "%s%s%.*s", o == out ? "" : ",", S.tag,
			     (int)(comma ? (size_t)(comma - p) : strlen(p)), p);
		if (w < 0 || (size_t)w >= left)
			fail("name too long under the tag: %s", name);
		o += w;
		left -= (size_t)w;
		p = comma ? comma + 1 : NULL;
	} while (p);
	return out;
}

/* The words that are names: <c> lock|lockall|status|check|break <name>,
 * <c> spawn <job> lock|lockall <name>. */
static void tag_names(char **w, int n)
{
	static const char *const verbs[] = {"lock", "lockall", "status",
					    "check", "break"};
	size_t i;

	if (n >= 5 && strcmp(w[1], "spawn") == 0) {
		w[4] = tagged(w[4]);
		return;
	}
	for (i = 0; n >= 3 && i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strcmp(w[1], verbs[i]) == 0) {
			w[2] = tagged(w[2]);
			return;
		}
}

static void run_line(char *line)
{
	char *w[WORDS_MAX + 1], **want = NULL, *arrow;
	int n, nwant = 0, i;

	arrow = strstr(line, " -> ");
	if (arrow)
		*arrow = '\0';
	n = split(line, w + 1);
	for (i = 0; i < n; i++)
		w[i] = w[i + 1];
	if (arrow) {
		static char *wv[WORDS_MAX + 1];

		nwant = split(arrow + 4, wv + 1);
		want = wv + 1; /* want[-1] is scratch for status */
	}
	if (n == 0)
		return;
	if (strcmp(w[0], "scenario") == 0)
		return;
	if (S.tag[0])
		tag_names(w, n);
	if (strcmp(w[0], "daemon") == 0)
		step_daemon(w[1]);
	else if (strcmp(w[0], "client") == 0)
		step_client(w, n);
	else if (strcmp(w[0], "sleep") == 0)
		h_sleep_ms(atoi(w[1]));
	else if (strcmp(w[0], "valid") == 0) {
		if (!dlock_lease_valid(lease_of(w[1])->l))
			fail("%s is not valid", w[1]);
	} else if (strcmp(w[0], "lost") == 0)
		step_lost(w, n);
	else if (strcmp(w[0], "contended") == 0)
		step_contended(w, n);
	else if (strcmp(w[0], "order") == 0) {
		if (!(lease_of(w[1])->token < lease_of(w[3])->token))
			fail("%s's token is not below %s's", w[1], w[3]);
	} else if (strcmp(w[0], "join") == 0) {
		struct job *j = NULL;

		for (i = 0; i < S.njobs; i++)
			if (strcmp(S.jobs[i].id, w[1]) == 0)
				j = &S.jobs[i];
		if (!j)
			fail("no job %s", w[1]);
		pthread_join(j->th, NULL);
		if (j->multi)
			all_outcome(j->client, j->rc, &j->all, want, nwant);
		else
			lock_outcome(j->client, j->rc, j->l, want, nwant);
	} else
		step_verb(client_of(w[0]), w, n, want, nwant);
}

static void cleanup(void)
{
	int i;

	for (i = 0; i < S.nclients; i++)
		dlock_close(S.clients[i].c);
	if (S.d.pid > 0)
		kill(S.d.pid, SIGCONT);
	h_daemon_stop(&S.d);
	h_daemon_cleanup(&S.d);
	for (i = 0; i < PARTS - 1; i++) {
		if (S.dp[i].pid > 0)
			kill(S.dp[i].pid, SIGCONT);
		if (S.dp[i].pid > 0)
			h_daemon_stop(&S.dp[i]);
		h_daemon_cleanup(&S.dp[i]);
	}
	if (S.r.pid)
		h_redis_cleanup(&S.r);
}

/* ---- the tests ---------------------------------------------------------- */

ParameterizedTestParameters(conformance, scenario)
{
	static int index[SCENARIOS_MAX];
	int i, n = count();

	for (i = 0; i < n; i++)
		index[i] = i;
	return cr_make_param_array(int, index, (size_t)n);
}

ParameterizedTest(int *index, conformance, scenario, .timeout = 60,
		  .fini = cleanup)
{
	static char lines[LINES_MAX][LINE_LEN];
	static char name[LINE_LEN];
	int nos[LINES_MAX], n, i;

	cr_assert(load(*index, lines, nos, &n) == 0, "no scenario %d in %s",
		  *index, path());
	S.parts = getenv("DL_CONFORMANCE_PARTS") &&
		  strcmp(getenv("DL_CONFORMANCE_PARTS"), "1") == 0;
	scenario_index = *index;
	snprintf(name, sizeof(name), "%.200s", lines[0] + 9);
	S.scenario = name;
	for (i = 0; i < n; i++) {
		S.lineno = nos[i];
		run_line(lines[i]);
	}
	cr_log_info("ok  %s", name);
}
