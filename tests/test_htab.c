/* SPDX-License-Identifier: MIT */
/*
 * test_htab.c -- unit tests of the intrusive hash table
 * (server/locktab/htab.c), above all of its incremental growth: lookups,
 * inserts and removes stay right while two bucket arrays coexist, no insert
 * moves more than its share of buckets, and a walk sees every node exactly
 * once.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/locktab/htab.h"

/* A node with its key right after it, as locks and owners have it. */
struct item {
	struct dl_hnode hn;
	char key[16];
	int present;
	int seen;
};

#define N 200000

static struct item *items;
static struct dl_htab h;

static struct dl_str key_of(const struct item *it)
{
	return (struct dl_str){it->key, it->hn.len};
}

static void setup(void)
{
	size_t i;

	items = calloc(N, sizeof(*items));
	cr_assert(items != NULL);
	for (i = 0; i < N; i++) {
		items[i].hn.len = (uint8_t)snprintf(
			items[i].key, sizeof(items[i].key), "k%zu", i);
		items[i].hn.hash =
			dl_hash_bytes(42, items[i].key, items[i].hn.len);
	}
	cr_assert(eq(int, dl_htab_init(&h), 0));
}

static void teardown(void)
{
	dl_htab_free(&h);
	free(items);
}

TestSuite(htab, .init = setup, .fini = teardown);

static void check_all(size_t upto)
{
	size_t i;
	struct dl_hnode *n;

	for (i = 0; i < upto; i++) {
		n = dl_htab_find(&h, items[i].hn.hash, key_of(&items[i]));
		if (items[i].present)
			cr_assert(eq(ptr, n, &items[i].hn), "%s lost",
				  items[i].key);
		else
			cr_assert(eq(ptr, n, NULL), "%s still found",
				  items[i].key);
	}
}

/* Counts nodes by walking every slot; each present item once. */
static size_t walk(void)
{
	size_t i, count = 0;
	struct dl_hnode *n;
	struct item *it;

	for (i = 0; i < N; i++)
		items[i].seen = 0;
	for (i = 0; i < dl_htab_slots(&h); i++)
		for (n = *dl_htab_slot(&h, i); n; n = n->next) {
			it = (struct item *)n;
			cr_assert(it->present, "walk found a removed node");
			cr_assert(eq(int, it->seen, 0), "walk saw %s twice",
				  it->key);
			it->seen = 1;
			count++;
		}
	return count;
}

Test(htab, growth_is_incremental_and_finds_everything_meanwhile)
{
	size_t i, doublings = 0, moves_seen = 0, mask = h.mask;

	for (i = 0; i < N; i++) {
		dl_htab_insert(&h, &items[i].hn);
		items[i].present = 1;
		if (h.mask != mask) {
			/* the insert that doubles leaves the move to later
			 * inserts: the old array is still there */
			cr_assert(h.old != NULL,
				  "doubling at %zu moved everything at once",
				  i);
			cr_assert(eq(sz, h.old_mask, mask));
			cr_assert(h.moved <= DL_HTAB_STEP);
			mask = h.mask;
			doublings++;
		}
		if (h.old) {
			moves_seen++;
			/* in the middle of a move: a full check now and then */
			if (moves_seen % 4096 == 1)
				check_all(i + 1);
		}
	}
	cr_assert(doublings >= 10, "only %zu doublings", doublings);
	cr_assert(moves_seen > 0);
	check_all(N);
	cr_assert(eq(sz, h.n, N));
	cr_assert(eq(sz, walk(), N));
}

Test(htab, removes_during_a_move_find_nodes_in_either_array)
{
	size_t i, removed = 0, mask = h.mask;

	for (i = 0; i < N; i++) {
		dl_htab_insert(&h, &items[i].hn);
		items[i].present = 1;
		/* right after each doubling, remove old nodes: most still
		 * sit in the old array's unmoved buckets */
		if (h.mask != mask && h.old) {
			size_t j;

			for (j = 0; j < i; j += 7) {
				if (!items[j].present)
					continue;
				dl_htab_remove(&h, &items[j].hn);
				items[j].present = 0;
				removed++;
			}
			cr_assert(eq(sz, walk(), h.n));
			check_all(i + 1);
		}
		mask = h.mask;
	}
	cr_assert(removed > 1000, "only %zu removed", removed);
	check_all(N);
	cr_assert(eq(sz, h.n, N - removed));
	cr_assert(eq(sz, walk(), N - removed));
}

Test(htab, a_move_ends_before_the_next_doubling)
{
	size_t i, mask = h.mask;

	for (i = 0; i < N; i++) {
		dl_htab_insert(&h, &items[i].hn);
		items[i].present = 1;
		if (h.mask != mask) {
			/* due at a load of 1, and not put off by a move still
			 * under way (a doubling waits for the move to end) */
			cr_assert(eq(sz, i, mask + 1), "doubled late");
			cr_assert(eq(sz, h.old_mask, mask));
			mask = h.mask;
		}
	}
	/* with the table idle, a resize finishes any move and rehashes */
	dl_htab_resize(&h, 4 * (h.mask + 1));
	cr_assert(eq(ptr, h.old, NULL));
	check_all(N);
	cr_assert(eq(sz, walk(), N));
}

Test(htab, emptied_table_keeps_working)
{
	size_t i;

	for (i = 0; i < N / 2; i++) {
		dl_htab_insert(&h, &items[i].hn);
		items[i].present = 1;
	}
	for (i = 0; i < N / 2; i++) {
		dl_htab_remove(&h, &items[i].hn);
		items[i].present = 0;
	}
	cr_assert(eq(sz, h.n, 0));
	cr_assert(eq(sz, walk(), 0));
	for (i = N / 2; i < N; i++) {
		dl_htab_insert(&h, &items[i].hn);
		items[i].present = 1;
	}
	check_all(N);
	cr_assert(eq(sz, walk(), N / 2));
}

/* A walk spread over many steps of a frozen table, with inserts and
 * removes between the steps, as a re-sync indexes the lock table: every
 * node there from the first step to the last is seen exactly once, none
 * moves while frozen, and lookups stay right. `moving`: frozen in the
 * middle of a move (it pauses), else with none under way, inserting past
 * the load that would start a doubling (none starts). Returns the number
 * of items inserted. Fails if nodes moved while frozen: seen twice or not
 * at all, as the walk's cursor counts slots of arrays that changed. */
static size_t frozen_walk(int moving)
{
	const size_t step = 500;
	size_t i, j, base = 0, cursor = 0, slots, mask, old_mask, moved;
	struct dl_hnode *n;
	struct item *it;

	if (moving) {
		for (base = 0; !h.old || base < 40000; base++) {
			dl_htab_insert(&h, &items[base].hn);
			items[base].present = 1;
		}
		cr_assert(h.moved < h.old_mask, "the move ended at once");
	} else {
		/* up to a load of 1, with the last move over */
		for (base = 0; base < 65536; base++) {
			dl_htab_insert(&h, &items[base].hn);
			items[base].present = 1;
		}
		cr_assert(eq(ptr, h.old, NULL));
		cr_assert(eq(sz, h.n, h.mask + 1));
	}
	for (i = 0; i < N; i++)
		items[i].seen = 0;
	dl_htab_freeze(&h, 1);
	slots = dl_htab_slots(&h);
	mask = h.mask;
	old_mask = h.old_mask;
	moved = h.moved;
	i = base;
	while (cursor < slots) {
		for (j = cursor; j < cursor + step && j < slots; j++)
			for (n = *dl_htab_slot(&h, j); n; n = n->next) {
				it = (struct item *)n;
				cr_assert(eq(int, it->seen, 0),
					  "walk saw %s twice", it->key);
				it->seen = 1;
			}
		cursor = j;
		/* between steps the table changes: new nodes come, some of
		 * them go again */
		for (j = 0; j < step / 2 && i < N; j++) {
			dl_htab_insert(&h, &items[i].hn);
			items[i++].present = 1;
		}
		for (j = i - 1; j >= base && j + step / 2 > i; j -= 3)
			if (items[j].present) {
				dl_htab_remove(&h, &items[j].hn);
				items[j].present = 0;
			}
		dl_htab_resize(&h, 8 * (h.mask + 1)); /* a hint: ignored */
		cr_assert(eq(sz, h.mask, mask), "a doubling while frozen");
		cr_assert(eq(sz, h.old_mask, old_mask));
		cr_assert(eq(sz, h.moved, moved), "a move while frozen");
		cr_assert(eq(sz, dl_htab_slots(&h), slots));
	}
	cr_assert(h.n > mask + 1, "load %zu / %zu: nothing was due", h.n,
		  mask + 1);
	for (j = 0; j < base; j++)
		cr_assert(eq(int, items[j].seen, 1), "walk missed %s",
			  items[j].key);
	check_all(i);
	dl_htab_freeze(&h, 0);
	return i;
}

Test(htab, a_frozen_table_can_be_walked_in_steps_while_it_changes)
{
	size_t mask, i, n;

	for (n = 0; n < 2; n++) {
		if (n) {
			dl_htab_free(&h);
			cr_assert(eq(int, dl_htab_init(&h), 0));
			for (i = 0; i < N; i++)
				items[i].present = 0;
		}
		i = frozen_walk(n == 0);
		mask = h.mask;
		/* thawed: the next inserts and removes move and grow */
		while (i < N) {
			dl_htab_insert(&h, &items[i].hn);
			items[i++].present = 1;
		}
		cr_assert(h.mask > mask,
			  "the table did not grow after the thaw");
		check_all(N);
		cr_assert(eq(sz, walk(), h.n));
	}
}
