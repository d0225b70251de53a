/* SPDX-License-Identifier: MIT */
/*
 * htab.c -- intrusive chained hash tables (see htab.h).
 */
#include "server/htab.h"

#include <stdlib.h>
#include <string.h>

#define HTAB_MIN 64

const char *dl_hkey(const struct dl_hnode *n)
{
	return (const char *)(n + 1);
}

/* A seeded multiply-xorshift hash: names come from clients, so the seed is
 * random per process and chains cannot be lengthened on purpose without
 * knowing it. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ULL;
	x ^= x >> 32;
	x *= 0xd6e8feb86659fd93ULL;
	x ^= x >> 32;
	return x;
}

uint32_t dl_hash_bytes(uint64_t seed, const char *p, size_t n)
{
	uint64_t h = seed ^ (n * 0x9e3779b97f4a7c15ULL);
	uint64_t w;

	while (n >= 8) {
		memcpy(&w, p, 8);
		h = mix64(h ^ w);
		p += 8;
		n -= 8;
	}
	w = 0;
	memcpy(&w, p, n);
	h = mix64(h ^ w ^ ((uint64_t)n << 56));
	return (uint32_t)h;
}

int dl_htab_init(struct dl_htab *h)
{
	h->b = calloc(HTAB_MIN, sizeof(*h->b));
	h->mask = HTAB_MIN - 1;
	h->n = 0;
	return h->b ? 0 : DL_ENOMEM;
}

struct dl_hnode *dl_htab_find(const struct dl_htab *h, uint32_t hash,
			      struct dl_str key)
{
	struct dl_hnode *n;

	for (n = h->b[hash & h->mask]; n; n = n->next)
		if (n->hash == hash && n->len == key.len &&
		    memcmp(dl_hkey(n), key.p, key.len) == 0)
			return n;
	return NULL;
}

/* Rehash into 2^k >= buckets. A failed grow is not an error: the table
 * works, with longer chains. */
void dl_htab_resize(struct dl_htab *h, size_t buckets)
{
	struct dl_hnode **nb, *e, *next;
	size_t i, nmask = h->mask;

	while (nmask + 1 < buckets)
		nmask = (nmask << 1) | 1;
	if (nmask == h->mask || !(nb = calloc(nmask + 1, sizeof(*nb))))
		return;
	for (i = 0; i <= h->mask; i++) {
		for (e = h->b[i]; e; e = next) {
			next = e->next;
			e->next = nb[e->hash & nmask];
			nb[e->hash & nmask] = e;
		}
	}
	free(h->b);
	h->b = nb;
	h->mask = nmask;
}

/* Doubles the bucket array past a load of 1. */
void dl_htab_insert(struct dl_htab *h, struct dl_hnode *n)
{
	if (h->n >= h->mask + 1)
		dl_htab_resize(h, (h->mask + 1) * 2);
	n->next = h->b[n->hash & h->mask];
	h->b[n->hash & h->mask] = n;
	h->n++;
}

void dl_htab_remove(struct dl_htab *h, struct dl_hnode *n)
{
	struct dl_hnode **pp = &h->b[n->hash & h->mask];

	while (*pp != n)
		pp = &(*pp)->next;
	*pp = n->next;
	h->n--;
}
