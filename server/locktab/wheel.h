/* SPDX-License-Identifier: MIT */
/*
 * wheel.h -- a hierarchical timing wheel for lease and wait deadlines.
 *
 * Owns: nothing but its slot heads. Entries are embedded by their owners
 * (a lease, a waiter) and linked into the wheel; the wheel never allocates
 * or frees. It knows no clock: the caller passes "now" in milliseconds of
 * any monotonic clock (the daemon passes dl_mono_ms(), read when the
 * request is read, not the loop's cached uv_now(): clock.h).
 *
 * Shape: four levels in the manner of the classic BSD/Linux timer wheel.
 * Level 0 has 256 slots of one tick each; levels 1..3 have 64 slots, each
 * slot of level n covering 256 * 64^(n-1) ticks. An entry goes to the level
 * whose span holds its distance from now; when level 0 wraps, the next slot
 * of level 1 is redistributed ("cascaded") downwards, and so on. Entries
 * further away than the top level can hold go to its farthest slot and are
 * re-filed when cascaded, so any deadline is accepted. Insert and delete are
 * O(1) (doubly linked lists); each entry is cascaded at most once per level.
 *
 * Precision: an entry added with deadline D fires at the first tick
 * boundary >= D, i.e. never early and at most one tick late.
 *
 * Fairness: dl_wheel_run() fires at most `budget` entries per call. Due
 * entries that did not fit stay on an internal "due" list, in deadline order
 * by tick, and are fired first by the next call, so a million deadlines in
 * one tick are spread over several loop iterations instead of stalling the
 * loop.
 *
 * Not thread-safe; one wheel per loop.
 */
#ifndef DL_SERVER_WHEEL_H
#define DL_SERVER_WHEEL_H

#include <stddef.h>
#include <stdint.h>

struct dl_wheel_entry {
	struct dl_wheel_entry *next; /* NULL when not pending */
	struct dl_wheel_entry *prev;
	uint64_t expires; /* deadline in ms, as given to dl_wheel_add */
};

#define DL_WHEEL_L0_BITS 8
#define DL_WHEEL_LN_BITS 6
#define DL_WHEEL_LEVELS	 4
#define DL_WHEEL_L0_SIZE (1u << DL_WHEEL_L0_BITS)
#define DL_WHEEL_LN_SIZE (1u << DL_WHEEL_LN_BITS)

struct dl_wheel {
	uint64_t tick_ms; /* length of one tick */
	uint64_t now;	  /* current tick: every tick < now has been run */
	size_t count;	  /* entries pending, the due list included */
	struct dl_wheel_entry l0[DL_WHEEL_L0_SIZE]; /* list heads */
	struct dl_wheel_entry ln[DL_WHEEL_LEVELS - 1][DL_WHEEL_LN_SIZE];
	struct dl_wheel_entry due;		 /* expired, not yet fired */
	uint64_t l0_bits[DL_WHEEL_L0_SIZE / 64]; /* non-empty level-0 slots */
};

/* Called for each fired entry; the entry is already unlinked and may be
 * re-added or freed by the callback. */
typedef void (*dl_wheel_cb)(struct dl_wheel_entry *e, void *arg);

/* tick_ms >= 1; now_ms is the clock's current reading. */
void dl_wheel_init(struct dl_wheel *w, uint64_t tick_ms, uint64_t now_ms);

/* An entry must be zeroed (or unlinked by the wheel) before first use. */
void dl_wheel_entry_init(struct dl_wheel_entry *e);

/* 1 while the entry is linked in the wheel (or its due list), else 0. */
int dl_wheel_pending(const struct dl_wheel_entry *e);

/* Schedule e at deadline expires_ms (a deadline in the past fires on the
 * next run). If e is pending it is moved. */
void dl_wheel_add(struct dl_wheel *w, struct dl_wheel_entry *e,
		  uint64_t expires_ms);

/* Unschedule e; a no-op if it is not pending. */
void dl_wheel_del(struct dl_wheel *w, struct dl_wheel_entry *e);

/* Advance to now_ms and fire due entries, at most `budget` of them.
 * Returns the number fired. */
size_t dl_wheel_run(struct dl_wheel *w, uint64_t now_ms, size_t budget,
		    dl_wheel_cb cb, void *arg);

/* Milliseconds from now_ms until the wheel next needs dl_wheel_run():
 * 0 when entries are due (or the due list is not empty), -1 when the wheel
 * is empty. It may return a time at which nothing fires (a cascade point);
 * it never returns a time after an entry's tick. */
int64_t dl_wheel_timeout(const struct dl_wheel *w, uint64_t now_ms);

/* Number of pending entries. */
size_t dl_wheel_count(const struct dl_wheel *w);

#endif /* DL_SERVER_WHEEL_H */
