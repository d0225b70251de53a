/* SPDX-License-Identifier: MIT */
/*
 * part.h -- this daemon's share of a partitioned namespace: the partition
 * map read from Redis, which names this daemon serves, and the changes
 * of the map it makes (part.c).
 *
 * A daemon with [partition] id = <p> keeps its lock table under
 * <redis_prefix>{<p>}: (config.c: one hash slot, so one Redis Cluster
 * shard) and serves the names whose slot the map gives <p>; the map is
 * <redis_prefix>{map}, read when the daemon starts and every
 * DL_MAP_POLL_MS after. Everything else about the partition -- its
 * active and standbys, their fence, its tokens -- is today's daemon.
 * Without [partition] id there is no map and no dl_part: the daemon
 * serves every name.
 */
#ifndef DL_SERVER_PART_PART_H
#define DL_SERVER_PART_PART_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "proto/proto.h"
#include "server/config.h"
#include "server/part/map.h"

struct dl_part;
struct dl_store;
struct dl_locktab;

/* For a daemon with [partition] id (NULL: out of memory, or a URL that
 * does not parse, which config.c has refused already). */
struct dl_part *dl_part_new(uv_loop_t *loop, const struct dl_config *cfg,
			    struct dl_store *st, struct dl_locktab *tab);
/* Read the map now, and every DL_MAP_POLL_MS. */
int dl_part_start(struct dl_part *p);
/* Stop reading (a job under way finishes on libuv's thread pool; the
 * loop runs until it has). */
void dl_part_close(struct dl_part *p);
void dl_part_free(struct dl_part *p);

enum dl_route {
	DL_ROUTE_HERE,	    /* this partition's: serve it */
	DL_ROUTE_AWAY,	    /* another partition's (*to) */
	DL_ROUTE_NOBODY,    /* no partition's */
	DL_ROUTE_UNKNOWN,   /* no map read yet */
	DL_ROUTE_MOVING,    /* given away, the map not written yet */
	DL_ROUTE_IMPORTING, /* received with locks not imported yet */
};

/* Who serves name. For HERE it also raises the table's tokens to the
 * partition's floor first (tokens of names that came from another
 * partition stay above theirs there). */
enum dl_route dl_part_route(struct dl_part *p, struct dl_str name,
			    const struct dl_map_part **to);

/* The map as this daemon knows it (epoch 0: none read yet). */
const struct dl_map *dl_part_map(const struct dl_part *p);
/* The partition the newest map read gives name to, if another one (no
 * side effects); NULL otherwise. */
const struct dl_map_part *dl_part_owner_of(const struct dl_part *p,
					   struct dl_str name);
const char *dl_part_id(const struct dl_part *p);
/* Raised each time the map in memory changes (MAP's reply cache). */
unsigned dl_part_map_gen(const struct dl_part *p);
/* The slots the map gives this daemon's partition (STATS). */
unsigned dl_part_slots(const struct dl_part *p);
/* Locks this process's partition let go to others by its moves, and
 * imported from theirs (STATS). */
uint64_t dl_part_locks_out(const struct dl_part *p);
uint64_t dl_part_locks_in(const struct dl_part *p);

/* A change of the map asked by an admin command: done(0, text) with the
 * reply's text, or done(err, why). One at a time (DL_ELIMIT otherwise,
 * with why set). The caller finds its connection again by itself (one
 * that went is told nothing). */
typedef void (*dl_part_done)(int err, const char *text, void *arg);

/* PARTITION INIT: create the map, this partition serving every slot, if
 * Redis holds none. */
int dl_part_init_map(struct dl_part *p, dl_part_done done, void *arg, char *why,
		     size_t whylen);
/* PARTITION MOVE <slots> <to>: give slots (set[DL_SLOTS]) of this
 * partition to partition `to` (created in the map if new). Only slots
 * that hold no lock move (DL_EBADARG otherwise, why says which). */
int dl_part_move(struct dl_part *p, const uint8_t *set, const char *to,
		 size_t tolen, dl_part_done done, void *arg, char *why,
		 size_t whylen);
/* PARTITION ADDRS <id> <addrs>: the addresses clients are sent to. */
int dl_part_set_addrs(struct dl_part *p, const char *id, size_t idlen,
		      const char *addrs, size_t len, dl_part_done done,
		      void *arg, char *why, size_t whylen);
/* A change asked by a command is under way. */
int dl_part_busy(const struct dl_part *p);

#endif /* DL_SERVER_PART_PART_H */
