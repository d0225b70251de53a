/* SPDX-License-Identifier: MIT */
/*
 * clientbench.c -- libdlock's driver of `make bench-clients`
 * (tests/bench/clients.py), which runs the same loops through each client
 * library of the repository on one daemon:
 *
 *   clientbench pairs|handoff <servers> <clients> <seconds>
 *
 *   pairs    each client (a thread with a dlock_client of its own: one
 *            connection, one owner) takes and releases a lock of its own
 *            name, wait 0, one after the other
 *   handoff  every client takes ONE lock, waiting for it, releases it at
 *            once and asks again: the daemon hands it from one to the
 *            next in FIFO order; the wait of each acquisition (from the
 *            call to the grant) is kept
 *
 * Prints one JSON line: {"ops": <pairs or grants>, "secs": <elapsed>,
 * "waits_ms": [<every wait, handoff only>], "errors": <failed calls>}.
 * The TTL (10 s) outlives a run: nothing expires.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/lib/dlock.h"

enum { TTL_MS = 10000, CLIENTS_MAX = 256, WAITS_MAX = 1 << 20 };

static int handoff;
static const char *servers;
static double t_end;
static pthread_barrier_t start_line;

struct worker {
	pthread_t th;
	int i;
	long ops, errors;
	double *waits;
	long nwaits;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
	struct worker *w = arg;
	struct dlock_options o;
	dlock_client *c;
	char name[64];
	int rc;

	dlock_options_init(&o);
	o.servers = servers;
	o.describe = 0;
	rc = dlock_connect(&o, &c);
	pthread_barrier_wait(&start_line); /* connected */
	pthread_barrier_wait(&start_line); /* t_end is set */
	if (rc != DLOCK_OK) {
		fprintf(stderr, "clientbench: connect: %s\n",
			dlock_strerror(rc));
		w->errors++;
		return NULL;
	}
	if (handoff)
		snprintf(name, sizeof(name), "h.%d", (int)getpid());
	else
		snprintf(name, sizeof(name), "b.%d.%d", (int)getpid(), w->i);
	while (now_s() < t_end) {
		dlock_lease *l;
		double t0 = now_s();

		rc = dlock_lock(c, name, TTL_MS,
				handoff ? DLOCK_WAIT_FOREVER : 0, &l);
		if (rc != DLOCK_OK) {
			w->errors++;
			continue;
		}
		if (handoff && w->nwaits < WAITS_MAX)
			w->waits[w->nwaits++] = (now_s() - t0) * 1000;
		if (dlock_unlock(c, l) != DLOCK_OK)
			w->errors++;
		w->ops++;
	}
	dlock_close(c);
	return NULL;
}

int main(int argc, char **argv)
{
	static struct worker ws[CLIENTS_MAX];
	double t0, secs;
	long ops = 0, errors = 0;
	int n, i, first = 1;

	if (argc != 5 ||
	    (strcmp(argv[1], "pairs") && strcmp(argv[1], "handoff"))) {
		fprintf(stderr, "usage: clientbench pairs|handoff <servers> "
				"<clients> <seconds>\n");
		return 64;
	}
	handoff = !strcmp(argv[1], "handoff");
	servers = argv[2];
	n = atoi(argv[3]);
	if (n < 1 || n > CLIENTS_MAX) {
		fprintf(stderr, "clientbench: 1 to %d clients\n", CLIENTS_MAX);
		return 64;
	}
	pthread_barrier_init(&start_line, NULL, (unsigned)n + 1);
	for (i = 0; i < n; i++) {
		ws[i].i = i;
		if (handoff &&
		    !(ws[i].waits = malloc(WAITS_MAX * sizeof(double)))) {
			fprintf(stderr, "clientbench: out of memory\n");
			return 1;
		}
		pthread_create(&ws[i].th, NULL, run, &ws[i]);
	}
	/* once every client is connected; the second wait orders the write
	 * before the clients' reads */
	pthread_barrier_wait(&start_line);
	t0 = now_s();
	t_end = t0 + atof(argv[4]);
	pthread_barrier_wait(&start_line);
	for (i = 0; i < n; i++) {
		pthread_join(ws[i].th, NULL);
		ops += ws[i].ops;
		errors += ws[i].errors;
	}
	secs = now_s() - t0;
	printf("{\"ops\": %ld, \"secs\": %.3f, \"errors\": %ld, \"waits_ms\": [",
	       ops, secs, errors);
	for (i = 0; i < n; i++) {
		for (long k = 0; k < ws[i].nwaits; k++) {
			printf("%s%.3f", first ? "" : ", ", ws[i].waits[k]);
			first = 0;
		}
		free(ws[i].waits);
	}
	printf("]}\n");
	return 0;
}
