/* SPDX-License-Identifier: MIT */
/*
 * test_watchreg.c -- unit tests of the watch registry (server/watchreg.c):
 * which watchers a lock name reaches, each once, and the bounds.
 */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "server/watchreg.h"

#define W_MAX	8
#define OWN_MAX 4 /* watches per watcher */

static struct dl_watchreg *reg;
static struct dl_watcher ws[W_MAX];
static int hits[W_MAX]; /* matches handed to each watcher */

static void setup(void)
{
	memset(ws, 0, sizeof(ws));
	reg = dl_watchreg_new(0x5eedULL, 1000);
	cr_assert_not_null(reg);
}

static void teardown(void)
{
	int i;

	for (i = 0; i < W_MAX; i++)
		dl_watchreg_leave(reg, &ws[i]);
	cr_assert_eq(dl_watchreg_count(reg), 0);
	dl_watchreg_free(reg);
}

TestSuite(watchreg, .init = setup, .fini = teardown);

static struct dl_str str(const char *s)
{
	return (struct dl_str){s, strlen(s)};
}

static void on_match(struct dl_watcher *w, void *arg)
{
	(void)arg;
	hits[w - ws]++;
}

/* Match `name`; returns how many watchers it reached (hits[] says who). */
static size_t match(const char *name)
{
	memset(hits, 0, sizeof(hits));
	return dl_watchreg_match(reg, str(name), on_match, NULL);
}

static void add(int w, const char *key, int prefix)
{
	cr_assert_eq(dl_watchreg_add(reg, &ws[w], str(key), prefix, OWN_MAX), 0,
		     "watcher %d, %s%s", w, key, prefix ? "*" : "");
}

Test(watchreg, a_name_reaches_its_exact_watchers_and_no_others)
{
	add(0, "jobs/a", 0);
	add(1, "jobs/b", 0);
	add(2, "jobs/a", 0);
	cr_assert_eq(match("jobs/a"), 2);
	cr_assert_eq(hits[0], 1);
	cr_assert_eq(hits[1], 0);
	cr_assert_eq(hits[2], 1);
	cr_assert_eq(match("jobs/"), 0);
	cr_assert_eq(match("jobs/ab"), 0);
}

Test(watchreg, a_prefix_reaches_every_name_that_starts_with_it_itself_too)
{
	add(0, "jobs/", 1);
	add(1, "", 1); /* every name */
	add(2, "jobs/nightly-backup", 1);
	cr_assert_eq(match("jobs/x"), 2);
	cr_assert(hits[0] == 1 && hits[1] == 1 && hits[2] == 0);
	cr_assert_eq(match("jobs/"), 2);
	cr_assert_eq(match("job"), 1);
	cr_assert_eq(hits[1], 1);
	cr_assert_eq(match("jobs/nightly-backup-2"), 3);
	cr_assert_eq(match("jobs/nightly-backu"), 2);
}

Test(watchreg, a_watcher_that_several_watches_match_is_reached_once)
{
	add(0, "jobs/a", 0);
	add(0, "jobs/", 1);
	add(0, "j", 1);
	add(0, "", 1);
	add(1, "jobs/", 1);
	cr_assert_eq(match("jobs/a"), 2);
	cr_assert_eq(hits[0], 1);
	cr_assert_eq(hits[1], 1);
	/* and again at the next match */
	cr_assert_eq(match("jobs/a"), 2);
	cr_assert_eq(hits[0], 1);
}

Test(watchreg, prefix_lengths_past_64_bytes_are_matched)
{
	char name[DL_NAME_MAX + 1], pfx[DL_NAME_MAX + 1];
	size_t lens[] = {63, 64, 65, 127, 128, 200, 254, 255};
	size_t i;

	memset(name, 'n', DL_NAME_MAX);
	name[DL_NAME_MAX] = '\0';
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		memcpy(pfx, name, lens[i]);
		pfx[lens[i]] = '\0';
		add((int)(i % W_MAX), pfx, 1);
	}
	cr_assert_eq(match(name), W_MAX);
	name[128] = '\0'; /* prefixes up to 128 bytes */
	cr_assert_eq(match(name), 5);
	cr_assert(hits[5] == 0 && hits[6] == 0 && hits[7] == 0);
}

Test(watchreg, watching_twice_is_one_watch_and_removing_undoes_it)
{
	add(0, "a", 0);
	cr_assert_eq(dl_watchreg_add(reg, &ws[0], str("a"), 0, OWN_MAX), 1);
	cr_assert_eq(ws[0].n, 1);
	/* a name and the prefix of the same bytes are two watches */
	add(0, "a", 1);
	cr_assert_eq(ws[0].n, 2);
	cr_assert_eq(dl_watchreg_remove(reg, &ws[0], str("a"), 0), 1);
	cr_assert_eq(dl_watchreg_remove(reg, &ws[0], str("a"), 0), 0);
	cr_assert_eq(match("a"), 1); /* the prefix */
	cr_assert_eq(match("ab"), 1);
	cr_assert_eq(dl_watchreg_remove(reg, &ws[1], str("a"), 1), 0);
	cr_assert_eq(dl_watchreg_remove(reg, &ws[0], str("a"), 1), 1);
	cr_assert_eq(match("ab"), 0);
	cr_assert_eq(dl_watchreg_count(reg), 0);
}

Test(watchreg, a_watcher_that_leaves_takes_all_its_watches_and_only_them)
{
	add(0, "a", 0);
	add(0, "b", 1);
	add(1, "a", 0);
	add(1, "b", 1);
	dl_watchreg_leave(reg, &ws[0]);
	cr_assert_eq(ws[0].n, 0);
	cr_assert_eq(dl_watchreg_count(reg), 2);
	cr_assert_eq(match("a"), 1);
	cr_assert_eq(hits[1], 1);
	cr_assert_eq(match("bx"), 1);
	cr_assert_eq(hits[1], 1);
}

Test(watchreg, the_registry_holds_at_most_its_bound)
{
	char key[16];
	int i, rc;

	dl_watchreg_free(reg);
	reg = dl_watchreg_new(1, 3);
	cr_assert_not_null(reg);
	for (i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		add(i, key, i % 2);
	}
	rc = dl_watchreg_add(reg, &ws[3], str("k9"), 0, OWN_MAX);
	cr_assert_eq(rc, DL_ELIMIT);
	/* watching again what one watches already costs nothing */
	cr_assert_eq(dl_watchreg_add(reg, &ws[0], str("k0"), 0, OWN_MAX), 1);
	dl_watchreg_leave(reg, &ws[0]);
	add(3, "k9", 0);
	cr_assert_eq(dl_watchreg_add(reg, &ws[0], str(""), 1, OWN_MAX),
		     DL_ELIMIT);
}

Test(watchreg, a_watcher_holds_at_most_its_own_bound)
{
	char key[16];
	int i;

	for (i = 0; i < OWN_MAX; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		add(0, key, 0);
	}
	cr_assert_eq(dl_watchreg_add(reg, &ws[0], str("k9"), 0, OWN_MAX),
		     DL_ELIMIT);
	cr_assert_eq(ws[0].n, OWN_MAX);
	/* one it has already is no more */
	cr_assert_eq(dl_watchreg_add(reg, &ws[0], str("k1"), 0, OWN_MAX), 1);
	add(1, "k9", 0);
}

Test(watchreg, freeing_the_registry_frees_the_watches_left_in_it)
{
	add(0, "a", 0);
	add(0, "b", 1);
	add(1, "b", 1);
	dl_watchreg_free(reg);
	/* AddressSanitizer reports a leak if anything was left */
	memset(ws, 0, sizeof(ws));
	reg = dl_watchreg_new(2, 10);
	cr_assert_not_null(reg);
}
