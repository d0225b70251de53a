/* SPDX-License-Identifier: MIT */
/*
 * bucket.c -- a lock name's bucket in store layout 2 (see bucket.h).
 */
#include "server/store/bucket.h"

uint32_t dl_fnv1a32(const void *p, size_t len)
{
	const unsigned char *s = p;
	uint32_t h = DL_FNV1A32_BASIS;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= s[i];
		h *= DL_FNV1A32_PRIME;
	}
	return h;
}

uint32_t dl_store_bucket(const char *name, size_t len)
{
	return dl_fnv1a32(name, len) % DL_STORE_BUCKETS;
}
