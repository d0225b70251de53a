/* SPDX-License-Identifier: MIT */
/*
 * map.h -- the partition map: which partition serves which names, and
 * where its daemons are. Pure: text in, text out, no I/O (part.c reads
 * and writes it in Redis).
 *
 * A name's slot is Redis Cluster's hash slot of the name (proto/slot.h:
 * CRC16 of the name, or of a {tag} in it, modulo 16384), so names with
 * one tag are in one partition, and the map gives each slot to at most
 * one partition. The map is kept in Redis as one text value, versioned
 * by an epoch that every change raises by one:
 *
 *   dlock-map 1
 *   epoch 7
 *   part p0 0-5460,16000-16383 10.0.0.1:7400,10.0.0.2:7400 floor=0
 *   part p1 5461-10922 10.0.0.3:7400 floor=1796057220000000000
 *   part p2 - - floor=0
 *
 * one line per partition: its id, its slots ("-": none), the addresses
 * of its daemons as clients reach them ("-": none known yet), the floor
 * of its tokens (a partition given names grants tokens above the tokens
 * the names had where they came from), and, once it gave slots away, how
 * many moves it gave them by (gave=<n>: its record of move n is in the
 * map, part.c), and, while the partition that move gave slots to has not
 * yet imported the locks it carried, that partition (pend=<id>). A slot
 * named by no line belongs to no partition: names in it are served by
 * nobody.
 */
#ifndef DL_SERVER_PART_MAP_H
#define DL_SERVER_PART_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "proto/limits.h"
#include "proto/slot.h"

/* A partition id: 1..DL_PART_ID_MAX of [A-Za-z0-9_-]. */
#define DL_PART_ID_MAX 32
/* Partitions in one map. */
#define DL_PARTS_MAX 64
/* Addresses of one partition's daemons, each host:port: four of
 * DL_ADVERTISE_MAX bytes keep MAP's and NO MOVED's lines under
 * DL_LINE_MAX, what every client reads. */
#define DL_PART_ADDRS_MAX 4
#define DL_PART_ADDRS_LEN (DL_PART_ADDRS_MAX * (DL_ADVERTISE_MAX + 1))
/* The map's text: every slot in its own range still fits. */
#define DL_MAP_TEXT_MAX (256 * 1024)
/* The ranges of the slots of a move with locks, as the map says them
 * (pslots=): a move whose ranges take more is refused. */
#define DL_PEND_SLOTS_MAX 1024
/* owner[] of a slot that no partition serves. */
#define DL_MAP_NOBODY 0xffff
/* The text's first line: the format's version. */
#define DL_MAP_MAGIC "dlock-map 1"

struct dl_map_part {
	char id[DL_PART_ID_MAX + 1];
	char addrs[DL_PART_ADDRS_LEN]; /* "a,b", "" when none */
	uint64_t floor;
	uint64_t gave; /* the moves this partition gave slots by, in the map */
	/* the partition that has yet to import the locks of move gave= ("":
	 * none, or the move carried none): pend=<id> */
	char pend[DL_PART_ID_MAX + 1];
	/* ... and the slots that move gave it (pslots=<ranges>), which it
	 * does not serve before the import */
	char pend_slots[DL_PEND_SLOTS_MAX];
};

struct dl_map {
	uint64_t epoch;
	unsigned n;
	struct dl_map_part part[DL_PARTS_MAX];
	uint16_t owner[DL_SLOTS]; /* index into part[], or DL_MAP_NOBODY */
};

/* An empty map (epoch 0, no partition, every slot nobody's). */
void dl_map_init(struct dl_map *m);

/* Parse text[0..len): 0, or DL_EBADARG with why set. */
int dl_map_parse(struct dl_map *m, const char *text, size_t len, char *why,
		 size_t whylen);

/* The text of m into out (cap bytes, NUL-terminated): its length, or 0
 * when it does not fit. */
size_t dl_map_format(const struct dl_map *m, char *out, size_t cap);

/* 1 if id is a valid partition id (len bytes). */
int dl_map_id_valid(const char *id, size_t len);

/* The index of partition id, or -1. */
int dl_map_find(const struct dl_map *m, const char *id, size_t len);

/* Add partition id with no slot (its index), or -1 when the map is full
 * or the id invalid. An id already there: its index. */
int dl_map_add(struct dl_map *m, const char *id, size_t len);

/* Add addr (host:port) to partition i's list: 1 added, 0 there already,
 * -1 when the list is full or addr invalid. */
int dl_map_add_addr(struct dl_map *m, int i, const char *addr);

/* Partition i's slots as ranges ("0-99,200-300"; "-" when none) into out:
 * 0, or -1 when they do not fit. */
int dl_map_ranges(const struct dl_map *m, int i, char *out, size_t cap);

/* The slots of set[DL_SLOTS] (nonzero: in it) as ranges, as
 * dl_map_ranges says them: 0, or -1 when they do not fit. */
int dl_set_ranges(const uint8_t *set, char *out, size_t cap);

/* Parse "a-b,c,d-e" (or "-": none) into set[DL_SLOTS] (1 for each slot
 * named; other bytes untouched): the number of slots named, or -1. */
int dl_slots_parse(const char *s, size_t len, uint8_t *set);

/* The partition that serves name: its index, or -1 (nobody). */
int dl_map_owner(const struct dl_map *m, const char *name, size_t len);

#endif /* DL_SERVER_PART_MAP_H */
