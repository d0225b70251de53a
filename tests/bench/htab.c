/* SPDX-License-Identifier: MIT */
/*
 * htab.c -- make bench: the longest single insert while the lock table's
 * hash grows to N entries, as dlockd does it (server/locktab/htab.c:
 * incremental growth) and as it did before (a one-shot rehash inside the insert
 * that crossed a load of 1, reproduced here with dl_htab_resize()). An insert
 * runs on the daemon's only loop: its longest is the longest pause a
 * growing table imposes on every client.
 *
 *   htab [N]    (default 2000000)
 *
 * Prints one line per way: the longest insert and the total time.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/locktab/htab.h"

struct item {
	struct dl_hnode hn;
	char key[16];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void run(const char *way, struct item *items, size_t n, int oneshot)
{
	struct dl_htab h;
	uint64_t t0, t1, worst = 0, start;
	size_t i, worst_at = 0;

	if (dl_htab_init(&h)) {
		fputs("htab: out of memory\n", stderr);
		exit(1);
	}
	start = now_ns();
	for (i = 0; i < n; i++) {
		t0 = now_ns();
		/* the old insert: a full rehash into twice the buckets when
		 * the load reaches 1, then the insert itself */
		if (oneshot && h.n >= h.mask + 1)
			dl_htab_resize(&h, 2 * (h.mask + 1));
		dl_htab_insert(&h, &items[i].hn);
		t1 = now_ns();
		if (t1 - t0 > worst) {
			worst = t1 - t0;
			worst_at = i;
		}
	}
	printf("htab way=%s entries=%zu worst_insert_us=%.1f at=%zu "
	       "total_ms=%.0f buckets=%zu\n",
	       way, n, (double)worst / 1000.0, worst_at,
	       (double)(now_ns() - start) / 1e6, h.mask + 1);
	dl_htab_free(&h);
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 2000000, i;
	struct item *items = calloc(n, sizeof(*items));

	if (!items || n == 0) {
		fputs("htab: usage: htab [entries]\n", stderr);
		return 1;
	}
	for (i = 0; i < n; i++) {
		items[i].hn.len = (uint8_t)snprintf(
			items[i].key, sizeof(items[i].key), "lease%08zu", i);
		items[i].hn.hash =
			dl_hash_bytes(0x5eed, items[i].key, items[i].hn.len);
	}
	/* each way on fresh nodes' links: the table relinks them */
	run("oneshot", items, n, 1);
	for (i = 0; i < n; i++)
		items[i].hn.next = NULL;
	run("incremental", items, n, 0);
	free(items);
	return 0;
}
