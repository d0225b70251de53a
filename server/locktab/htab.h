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

/*
 * Growing is incremental: when the load passes 1 a bucket array twice the
 * size is allocated (calloc: untouched pages cost nothing until used) and
 * the old one is kept; every insert or remove then moves DL_HTAB_STEP old
 * buckets into the new array, and a lookup searches both while they
 * coexist. No single insert rehashes the table (one that did took ~30 ms
 * at a million locks, a pause of the whole loop); the move is done long
 * before the next doubling is due.
 */
#define DL_HTAB_STEP 8

struct dl_htab {
	struct dl_hnode **b; /* the current bucket array */
	size_t mask;	     /* its size - 1 */
	size_t n;
	struct dl_hnode **old; /* being emptied into b, or NULL */
	size_t old_mask;
	size_t moved;	 /* old buckets [0, moved) are empty */
	unsigned frozen; /* dl_htab_freeze: no node moves */
};

/* The key bytes of a node (they follow it in memory). */
const char *dl_hkey(const struct dl_hnode *n);
uint32_t dl_hash_bytes(uint64_t seed, const char *p, size_t n);

int dl_htab_init(struct dl_htab *h); /* DL_ENOMEM */
void dl_htab_free(struct dl_htab *h);
struct dl_hnode *dl_htab_find(const struct dl_htab *h, uint32_t hash,
			      struct dl_str key);
/* A hint, for a caller about to look up many keys it knows in advance (a
 * restore): start loading the bucket of `hash` into the cache (deep = 0),
 * or, some lookups later, the first node of its chain (deep = 1: reads
 * the bucket, which the first call should have brought in). A miss in a
 * table of a million locks is two cache misses, the bucket and the node;
 * prefetched, the restore overlaps them. No effect on the contents. */
void dl_htab_prefetch(const struct dl_htab *h, uint32_t hash, int deep);
/* Starts doubling the bucket array past a load of 1 (a failed allocation
 * only makes chains longer). */
void dl_htab_insert(struct dl_htab *h, struct dl_hnode *n);
void dl_htab_remove(struct dl_htab *h, struct dl_hnode *n);
/* Rehash into at least `buckets` buckets now, in one go (a hint, as
 * above; for a restore that knows its size before it starts). */
void dl_htab_resize(struct dl_htab *h, size_t buckets);

/* Walking every node: the chains dl_htab_slot(h, i) for i below
 * dl_htab_slots(h), both arrays while a move is under way. No insert or
 * remove during a walk (either may move nodes), unless the table is
 * frozen; a node may be unlinked by the walker itself through the slot's
 * pointer chain. */
size_t dl_htab_slots(const struct dl_htab *h);
struct dl_hnode **dl_htab_slot(const struct dl_htab *h, size_t i);

/* Freezing (a count): while frozen no node changes slot -- a move under
 * way pauses, no doubling starts, dl_htab_resize does nothing -- so a walk
 * may be spread over many loop iterations with inserts and removes
 * between its steps, one slot's chain at a time: every node present for
 * the whole walk is seen exactly once; one inserted or removed meanwhile
 * may or may not be. Chains only grow longer meanwhile (lookups stay
 * correct); the move resumes with the next insert or remove after the
 * last thaw. */
void dl_htab_freeze(struct dl_htab *h, int on);

#endif /* DL_SERVER_HTAB_H */
