/* SPDX-License-Identifier: MIT */
/*
 * htab.c -- intrusive chained hash tables (see htab.h).
 */
#include "server/locktab/htab.h"

#include <assert.h>
#include <stdint.h>
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
	memset(h, 0, sizeof(*h));
	h->b = calloc(HTAB_MIN, sizeof(*h->b));
	h->mask = HTAB_MIN - 1;
	return h->b ? 0 : DL_ENOMEM;
}

void dl_htab_free(struct dl_htab *h)
{
	free(h->b);
	free(h->old);
	h->b = h->old = NULL;
}

static struct dl_hnode *chain_find(struct dl_hnode *n, uint32_t hash,
				   struct dl_str key)
{
	for (; n; n = n->next)
		if (n->hash == hash && n->len == key.len &&
		    memcmp(dl_hkey(n), key.p, key.len) == 0)
			return n;
	return NULL;
}

struct dl_hnode *dl_htab_find(const struct dl_htab *h, uint32_t hash,
			      struct dl_str key)
{
	struct dl_hnode *n = chain_find(h->b[hash & h->mask], hash, key);

	/* An old bucket already moved is empty: no need to tell which. */
	if (!n && h->old)
		n = chain_find(h->old[hash & h->old_mask], hash, key);
	return n;
}

void dl_htab_prefetch(const struct dl_htab *h, uint32_t hash, int deep)
{
	struct dl_hnode *const *slot = &h->b[hash & h->mask];

	if (!deep)
		__builtin_prefetch(slot);
	else if (*slot)
		__builtin_prefetch(*slot);
}

/* Move up to `steps` old buckets into the current array. */
static void move_some(struct dl_htab *h, size_t steps)
{
	struct dl_hnode *e, *next;

	if (h->frozen)
		return;
	while (h->old && steps--) {
		for (e = h->old[h->moved]; e; e = next) {
			next = e->next;
			e->next = h->b[e->hash & h->mask];
			h->b[e->hash & h->mask] = e;
		}
		h->old[h->moved] = NULL;
		if (h->moved++ == h->old_mask) {
			free(h->old);
			h->old = NULL;
			h->old_mask = h->moved = 0;
		}
	}
}

/* Put every node into an array of nmask + 1 buckets, at once. */
static void rehash_now(struct dl_htab *h, size_t nmask)
{
	struct dl_hnode **nb, *e, *next;
	size_t i;

	if (h->frozen)
		return;
	move_some(h, SIZE_MAX);
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

/* Rehash into 2^k >= buckets. A failed grow is not an error: the table
 * works, with longer chains. */
void dl_htab_resize(struct dl_htab *h, size_t buckets)
{
	size_t nmask = h->mask;

	while (nmask + 1 < buckets)
		nmask = (nmask << 1) | 1;
	rehash_now(h, nmask);
}

/* Past a load of 1, start moving into twice the buckets. A move under
 * way is over long before: it ends after (old buckets / DL_HTAB_STEP)
 * inserts or removes, and the next doubling needs as many inserts as the
 * table has buckets. */
void dl_htab_insert(struct dl_htab *h, struct dl_hnode *n)
{
	struct dl_hnode **nb;

	move_some(h, DL_HTAB_STEP);
	if (h->n >= h->mask + 1 && !h->old && !h->frozen &&
	    (nb = calloc(2 * (h->mask + 1), sizeof(*nb))) != NULL) {
		h->old = h->b;
		h->old_mask = h->mask;
		h->moved = 0;
		h->b = nb;
		h->mask = 2 * h->mask + 1;
	}
	n->next = h->b[n->hash & h->mask];
	h->b[n->hash & h->mask] = n;
	h->n++;
}

void dl_htab_remove(struct dl_htab *h, struct dl_hnode *n)
{
	struct dl_hnode **pp = &h->b[n->hash & h->mask];

	/* Not in the current array: then in its old bucket, not yet moved. */
	if (h->old && (n->hash & h->old_mask) >= h->moved) {
		struct dl_hnode **op = &h->old[n->hash & h->old_mask];

		while (*op && *op != n)
			op = &(*op)->next;
		if (*op)
			pp = op;
	}
	while (*pp != n)
		pp = &(*pp)->next;
	*pp = n->next;
	h->n--;
	move_some(h, DL_HTAB_STEP);
}

size_t dl_htab_slots(const struct dl_htab *h)
{
	return (h->old ? h->old_mask + 1 : 0) + h->mask + 1;
}

struct dl_hnode **dl_htab_slot(const struct dl_htab *h, size_t i)
{
	if (h->old) {
		if (i <= h->old_mask)
			return &h->old[i];
		i -= h->old_mask + 1;
	}
	return &h->b[i];
}

void dl_htab_freeze(struct dl_htab *h, int on)
{
	assert(on || h->frozen);
	h->frozen += on ? 1 : -1;
}
