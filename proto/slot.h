/* SPDX-License-Identifier: MIT */
/*
 * slot.h -- Redis Cluster's hash slot of a key, and its hash tag.
 *
 * A key's slot is CRC16 (XMODEM: polynomial 0x1021, initial 0) of the key
 * modulo DL_SLOTS, or of its hash tag when it has one: the bytes between
 * the first '{' and the first '}' after it, if there is at least one byte
 * between them. Keys with one tag are in one slot, so a lock table whose
 * keys all begin with a prefix holding a tag ("dlock:{orders}:") lives on
 * one Redis Cluster shard, where each of its batches is one atomic call.
 * The same rule is what Redis computes (CLUSTER KEYSLOT); hiredis 0.14
 * has no cluster API, hence this file. No I/O, no allocation.
 */
#ifndef DL_PROTO_SLOT_H
#define DL_PROTO_SLOT_H

#include <stddef.h>

/* Redis Cluster's number of hash slots. */
#define DL_SLOTS 16384

/* The tag of key[0..len): *off and *taglen set, 1; 0 when it has none. */
int dl_hash_tag(const char *key, size_t len, size_t *off, size_t *taglen);

/* The hash slot of key[0..len), 0..DL_SLOTS-1. */
unsigned dl_key_slot(const char *key, size_t len);

#endif /* DL_PROTO_SLOT_H */
