/* SPDX-License-Identifier: MIT */
/*
 * test_map.c -- the partition map's text (server/part/map.c): parsed,
 * formatted back the same, and every malformed map refused.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "server/part/map.h"

static struct dl_map *map_of(const char *text, int expect)
{
	struct dl_map *m = malloc(sizeof(*m));
	char why[200] = "";

	cr_assert(m != NULL);
	cr_assert(eq(int, dl_map_parse(m, text, strlen(text), why, sizeof(why)),
		     expect),
		  "%s: %s", text, why);
	return m;
}

Test(map, parses_and_formats_back)
{
	static const char text[] =
		"dlock-map 1\n"
		"epoch 7\n"
		"part p0 0-5460,16000-16383 10.0.0.1:7400,10.0.0.2:7400 floor=0\n"
		"part p1 5461-10922 10.0.0.3:7400 floor=1796057220000000000\n"
		"part p2 - - floor=0\n";
	struct dl_map *m = map_of(text, 0);
	static char out[DL_MAP_TEXT_MAX];

	cr_assert(eq(u64, m->epoch, 7));
	cr_assert(eq(u32, m->n, 3));
	cr_assert_str_eq(m->part[0].addrs, "10.0.0.1:7400,10.0.0.2:7400");
	cr_assert(eq(u64, m->part[1].floor, 1796057220000000000ULL));
	cr_assert(eq(int, m->owner[0], 0));
	cr_assert(eq(int, m->owner[5460], 0));
	cr_assert(eq(int, m->owner[5461], 1));
	cr_assert(eq(int, m->owner[10923], DL_MAP_NOBODY));
	cr_assert(eq(int, m->owner[16383], 0));
	cr_assert(eq(int, dl_map_owner(m, "foo", 3), -1));  /* slot 12182 */
	cr_assert(eq(int, dl_map_owner(m, "bar", 3), 0));   /* slot 5061 */
	cr_assert(eq(int, dl_map_owner(m, "qux", 3), 1));   /* slot 9995 */
	cr_assert(eq(int, dl_map_owner(m, "x", 1), 0));	    /* slot 16287 */
	cr_assert(eq(int, dl_map_owner(m, "hello", 5), 0)); /* slot 866 */
	cr_assert(eq(sz, dl_map_format(m, out, sizeof(out)), strlen(text)));
	cr_assert_str_eq(out, text);
	cr_assert(eq(sz, dl_map_format(m, out, 40), 0)); /* too small */
	free(m);
}

Test(map, single_slots_and_unknown_words)
{
	struct dl_map *m = map_of("dlock-map 1\nepoch 1\n"
				  "part a 5,7-8 h:1 floor=3 later=x\n",
				  0);
	char r[64];

	cr_assert(eq(int, dl_map_ranges(m, 0, r, sizeof(r)), 0));
	cr_assert_str_eq(r, "5,7-8");
	cr_assert(eq(int, dl_map_ranges(m, 0, r, 3), -1));
	free(m);
}

Test(map, refuses_malformed_maps)
{
	static const char *const bad[] = {
		"",
		"dlock-map 2\nepoch 1\n",
		"dlock-map 1\n",	  /* no epoch */
		"dlock-map 1\nepoch 0\n", /* epoch 0 */
		"dlock-map 1\nepoch x\n",
		"dlock-map 1\nepoch 1\nhello\n",	    /* unknown line */
		"dlock-map 1\nepoch 1\npart p 0-1\n",	    /* no addresses */
		"dlock-map 1\nepoch 1\npart p 0-16384 -\n", /* slot range */
		"dlock-map 1\nepoch 1\npart p 5-4 -\n",
		"dlock-map 1\nepoch 1\npart p 1, -\n",
		"dlock-map 1\nepoch 1\npart p x -\n",
		"dlock-map 1\nepoch 1\npart p/q 1 -\n",		   /* bad id */
		"dlock-map 1\nepoch 1\npart p 1 - \npart p 2 -\n", /* twice */
		"dlock-map 1\nepoch 1\npart p 1 -\npart q 1 -\n",  /* shared */
		"dlock-map 1\nepoch 1\npart p 1 host\n",	   /* no port */
		"dlock-map 1\nepoch 1\npart p 1 h:0\n",
		"dlock-map 1\nepoch 1\npart p 1 h:1,,h:2\n",
		"dlock-map 1\nepoch 1\npart p 1 - floor=x\n",
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		free(map_of(bad[i], DL_EBADARG));
}

Test(map, add_and_addresses)
{
	struct dl_map *m = map_of("dlock-map 1\nepoch 1\n", 0);
	int i, k;
	char a[32];

	cr_assert(eq(int, dl_map_add(m, "p0", 2), 0));
	cr_assert(eq(int, dl_map_add(m, "p0", 2), 0));
	cr_assert(eq(int, dl_map_add(m, "bad id", 6), -1));
	cr_assert(eq(int, dl_map_add(m, "", 0), -1));
	i = dl_map_add(m, "p1", 2);
	cr_assert(eq(int, i, 1));
	cr_assert(eq(int, dl_map_add_addr(m, i, "h:1"), 1));
	cr_assert(eq(int, dl_map_add_addr(m, i, "h:1"), 0));
	cr_assert(eq(int, dl_map_add_addr(m, i, "h"), -1));
	cr_assert(eq(int, dl_map_add_addr(m, i, "h:1,h:2"), -1));
	cr_assert(eq(int, dl_map_add_addr(m, i, "a:1:2"), -1));
	cr_assert(eq(int, dl_map_add_addr(m, i, "::1:2"), -1));
	for (k = 2; k <= DL_PART_ADDRS_MAX; k++) {
		snprintf(a, sizeof(a), "h:%d", k);
		cr_assert(eq(int, dl_map_add_addr(m, i, a), 1));
	}
	cr_assert(eq(int, dl_map_add_addr(m, i, "h:99"), -1));
	for (k = 2; k < DL_PARTS_MAX; k++) {
		snprintf(a, sizeof(a), "x%d", k);
		cr_assert(eq(int, dl_map_add(m, a, strlen(a)), k));
	}
	cr_assert(eq(int, dl_map_add(m, "full", 4), -1));
	free(m);
}

Test(map, a_v6_address_is_bracketed)
{
	struct dl_map *m = map_of("dlock-map 1\nepoch 1\n", 0);
	int i = dl_map_add(m, "p", 1);

	cr_assert(eq(int, dl_map_add_addr(m, i, "[::1]:7400"), 1));
	cr_assert(eq(int, dl_map_add_addr(m, i, "[::1:7400"), -1));
	free(m);
}
