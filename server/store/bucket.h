/* SPDX-License-Identifier: MIT */
/*
 * bucket.h -- which Redis hash of store layout 2 holds a lock's record.
 *
 * Layout 2 (store.c) keeps the records in DL_STORE_BUCKETS hashes,
 * <prefix>rec:<b>, field = the lock's name, value = its record (record.h).
 * A name's bucket b is the 32-bit FNV-1a hash of its bytes modulo
 * DL_STORE_BUCKETS. Both are part of the stored format, as fixed as the
 * record's text: a daemon that put a name in another bucket would not find
 * it, and would leave a second record behind. So the function exists
 * once, here, and the tests that read Redis call it too. No I/O.
 *
 * Why 1024. A start-up loads every bucket with HGETALL (store_load.c):
 * Redis serves a hash of about a thousand fields far faster than a
 * thousand string keys (measured at 1,000,000 records: 1024 HGETALLs cost
 * Redis 241-263 ms, layout 1's SMEMBERS + MGETs of the same records
 * 1.26-1.31 s; docs/performance.md), while a bucket stays small enough to be
 * replaced whole in one call at a re-sync (~1000 records at 10^6 locks).
 */
#ifndef DL_SERVER_BUCKET_H
#define DL_SERVER_BUCKET_H

#include <stddef.h>
#include <stdint.h>

/* Hashes of layout 2. A change of this number is a new layout. */
#define DL_STORE_BUCKETS 1024

/* FNV-1a, 32 bits (offset basis and prime of the published algorithm). */
#define DL_FNV1A32_BASIS 2166136261u
#define DL_FNV1A32_PRIME 16777619u

uint32_t dl_fnv1a32(const void *p, size_t len);

/* The bucket of a lock name: dl_fnv1a32(name) % DL_STORE_BUCKETS. */
uint32_t dl_store_bucket(const char *name, size_t len);

#endif /* DL_SERVER_BUCKET_H */
