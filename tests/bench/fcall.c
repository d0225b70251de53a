/* SPDX-License-Identifier: MIT */
/*
 * fcall.c -- what the fence costs in Redis: the same batches of lock
 * changes applied by dlockd's function (FCALL dlock_apply_v11: the writer
 * fence and the leadership record checked, then the records, fields of their
 * bucket hashes in store layout 2) and by the MULTI/EXEC transaction of the
 * same writes without a fence (HSET/HDEL of each record in its bucket, SET of
 * the token), one after the other against one redis-server, in one run.
 *
 *   fcall <port> <locks per batch> <seconds> <reps>
 *
 * The function runs twice: as dlockd calls it, with the token mark only
 * when due (once per DL_TOKEN_RESERVE grants, so not in a run), and with
 * a token in every batch (GET and SET of the token key, what version 3
 * of the function did), to show what reserving the mark ahead saves.
 * Lock names are L0, L1, ...; their buckets are server/store/bucket.h's, so a
 * batch shares buckets as dlockd's would.
 *
 * The function library must be loaded (run.sh lets a dlockd load it). A
 * batch is one round trip either way (a pipeline of MULTI, the writes and
 * EXEC, or one FCALL); DL_DEPTH batches are kept in flight, as dlockd
 * overlaps the batches of successive loop iterations. Locks alternate
 * between grant (record set) and release (record deleted), the two kinds
 * of change a lock sees most.
 *
 * Reported per method: batches/s, lock changes/s, and the Redis main
 * thread's CPU (INFO cpu: used_cpu_sys + used_cpu_user) per lock change,
 * the median of `reps` runs, runs alternating between the methods.
 */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/store/bucket.h"

#define DL_DEPTH   4
#define MAX_LOCKS  10000
#define RECORD_LEN 80

enum method { FCALL, FCALL_TOK, MULTI, NMETHODS };

static const char *const method_name[] = {"fcall", "fcall_tok", "multi"};

static redisContext *c;
static int nlocks;
static char keys[MAX_LOCKS][32]; /* each lock's bucket */
static char names[MAX_LOCKS][16];
static char record[RECORD_LEN + 1];
static unsigned long long token = 1000000000000000000ULL;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void check(redisReply *r, const char *what)
{
	if (!r) {
		fprintf(stderr, "fcall: %s: %s\n", what, c->errstr);
		exit(1);
	}
	if (r->type == REDIS_REPLY_ERROR) {
		fprintf(stderr, "fcall: %s: %s\n", what, r->str);
		exit(1);
	}
}

/* Redis's main-thread CPU, seconds. */
static double redis_cpu(void)
{
	redisReply *r = redisCommand(c, "INFO cpu");
	double sys = 0, user = 0;
	const char *p;

	check(r, "INFO cpu");
	if ((p = strstr(r->str, "used_cpu_sys_main_thread:")))
		sys = atof(p + 25);
	if ((p = strstr(r->str, "used_cpu_user_main_thread:")))
		user = atof(p + 26);
	freeReplyObject(r);
	return sys + user;
}

/* Queue batch number `b` (its changes: grant on even b, release on odd). */
static void append_batch(enum method m, unsigned long long b)
{
	static const char *argv[9 + 4 * MAX_LOCKS];
	static size_t lens[9 + 4 * MAX_LOCKS];
	char nk[16], tok[24];
	int i, k = 0, grant = (b % 2) == 0;

	token++;
	snprintf(tok, sizeof(tok), "%llu", token);
	if (m == FCALL || m == FCALL_TOK) {
		snprintf(nk, sizeof(nk), "%d", 4 + nlocks);
#define ARG(s, n) (argv[k] = (s), lens[k] = (n), k++)
		ARG("FCALL", 5);
		ARG("dlock_apply_v11", 15);
		ARG(nk, strlen(nk));
		ARG("bench:fence", 11);
		ARG("bench:token", 11);
		ARG("bench:gen", 9);
		ARG("bench:leader", 12); /* none: the fence decides */
		for (i = 0; i < nlocks; i++)
			ARG(keys[i], strlen(keys[i]));
		ARG("1", 1);
		if (m == FCALL_TOK)
			ARG(tok, strlen(tok));
		else
			ARG("", 0);
		ARG("bench", 5); /* the instance */
		for (i = 0; i < nlocks; i++) {
			ARG(grant ? "S" : "D", 1);
			ARG(names[i], strlen(names[i]));
			ARG(grant ? record : "", grant ? RECORD_LEN : 0);
		}
		redisAppendCommandArgv(c, k, argv, lens);
		return;
	}
	redisAppendCommand(c, "MULTI");
	for (i = 0; i < nlocks; i++) {
		if (grant)
			redisAppendCommand(c, "HSET %s %s %b", keys[i],
					   names[i], record,
					   (size_t)RECORD_LEN);
		else
			redisAppendCommand(c, "HDEL %s %s", keys[i], names[i]);
	}
	redisAppendCommand(c, "SET bench:token %s", tok);
	redisAppendCommand(c, "EXEC");
}

/* Read the replies of one batch. */
static void read_batch(enum method m)
{
	redisReply *r;
	int i, n = m == MULTI ? nlocks + 3 : 1;

	for (i = 0; i < n; i++) {
		if (redisGetReply(c, (void **)&r) != REDIS_OK)
			check(NULL, "reply");
		check(r, method_name[m]);
		freeReplyObject(r);
	}
}

struct result {
	double batches_s, changes_s, cpu_us_per_change;
};

static struct result run(enum method m, double secs)
{
	unsigned long long sent = 0, got = 0;
	double t0, t1, cpu0, cpu1;
	struct result res;

	cpu0 = redis_cpu();
	t0 = now();
	while (1) {
		while (sent - got < DL_DEPTH) {
			append_batch(m, sent++);
		}
		read_batch(m);
		got++;
		if ((got & 63) == 0 && now() - t0 >= secs)
			break;
	}
	while (got < sent) {
		read_batch(m);
		got++;
	}
	t1 = now();
	cpu1 = redis_cpu();
	res.batches_s = (double)got / (t1 - t0);
	res.changes_s = res.batches_s * nlocks;
	res.cpu_us_per_change = (cpu1 - cpu0) * 1e6 / ((double)got * nlocks);
	return res;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return v[n / 2];
}

int main(int argc, char **argv)
{
	double secs, bs[NMETHODS][32], cs[NMETHODS][32], cpu[NMETHODS][32];
	int reps, i, m;
	redisReply *r;

	if (argc != 5) {
		fprintf(stderr,
			"usage: fcall <port> <locks per batch> <seconds> <reps>\n");
		return 2;
	}
	nlocks = atoi(argv[2]);
	secs = atof(argv[3]);
	reps = atoi(argv[4]);
	if (nlocks < 1 || nlocks > MAX_LOCKS || reps < 1 || reps > 32)
		return 2;
	c = redisConnect("127.0.0.1", atoi(argv[1]));
	if (!c || c->err) {
		fprintf(stderr, "fcall: cannot connect\n");
		return 1;
	}
	for (i = 0; i < nlocks; i++) {
		snprintf(names[i], sizeof(names[i]), "L%d", i);
		snprintf(keys[i], sizeof(keys[i]), "bench:rec:%u",
			 (unsigned)dl_store_bucket(names[i], strlen(names[i])));
	}
	memset(record, 'x', RECORD_LEN);
	r = redisCommand(c, "SET bench:fence 1");
	check(r, "SET fence");
	freeReplyObject(r);
	for (i = 0; i < reps; i++)
		for (m = 0; m < NMETHODS; m++) {
			/* rotate which goes first */
			int mm = (m + i) % NMETHODS;
			struct result res = run((enum method)mm, secs);

			bs[mm][i] = res.batches_s;
			cs[mm][i] = res.changes_s;
			cpu[mm][i] = res.cpu_us_per_change;
		}
	for (m = 0; m < NMETHODS; m++)
		printf("%s locks=%d batches_s=%.0f changes_s=%.0f redis_cpu_us_per_change=%.3f round_trips_per_batch=1\n",
		       method_name[m], nlocks, median(bs[m], reps),
		       median(cs[m], reps), median(cpu[m], reps));
	redisFree(c);
	return 0;
}
