/* SPDX-License-Identifier: MIT */
/*
 * htab.h -- an intrusive chained hash table keyed by short byte strings.
 *
 * The table owns only its bucket array. Nodes are embedded in the objects
 * they index (locks, owners), with the key's bytes stored right after the
 * node, so an entry costs one pointer in a bucket and no allocation. The
 * hash is seeded: keys come from clients, and a random seed per process
 * keeps them from lengthening chains on purpose.
 */
#ifndef DL_SERVER_HTAB_H
#define DL_SERVER_HTAB_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

struct dl_hnode {
	struct dl_hnode *next; /* hash chain */
	uint32_t hash;
	uint8_t len; /* key length; the key follows this struct */
};

struct dl_htab {
	struct dl_hnode **b;
	size_t mask; /* buckets - 1 */
	size_t n;
};

/* The key bytes of a node (they follow it in memory). */
const char *dl_hkey(const struct dl_hnode *n);
uint32_t dl_hash_bytes(uint64_t seed, const char *p, size_t n);

int dl_htab_init(struct dl_htab *h); /* DL_ENOMEM */
struct dl_hnode *dl_htab_find(const struct dl_htab *h, uint32_t hash,
			      struct dl_str key);
/* Grows the bucket array past a load of 1 (a failed grow only makes
 * chains longer). */
void dl_htab_insert(struct dl_htab *h, struct dl_hnode *n);
void dl_htab_remove(struct dl_htab *h, struct dl_hnode *n);
/* Rehash into at least `buckets` buckets (a hint, as above). */
void dl_htab_resize(struct dl_htab *h, size_t buckets);

#endif /* DL_SERVER_HTAB_H */
