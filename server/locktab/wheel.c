/* SPDX-License-Identifier: MIT */
/*
 * wheel.c -- the hierarchical timing wheel declared in wheel.h.
 *
 * Time inside the wheel is counted in ticks. A deadline of D ms belongs to
 * tick ceil(D / tick_ms), the first tick boundary at or after D; a clock
 * reading of N ms has reached every tick <= floor(N / tick_ms). w->now is
 * the first tick not yet run: init and run both leave it one past the tick
 * that holds the clock reading, so a deadline whose tick is < w->now is in
 * the past and goes straight onto the due list.
 *
 * Invariants, with t = w->now:
 *  - an entry in l0[s] has its tick in [t, t + 255], so s = tick & 255
 *    names exactly one such tick; bit s of l0_bits is set iff l0[s] is
 *    not empty;
 *  - an entry in ln[n - 1][s] (level n, shift b = 8 + 6 * (n - 1)) is
 *    cascaded at the first multiple c of 2^b with c >= t and
 *    (c >> b) & 63 == s, and c is at most its tick. Entries too far for
 *    level 3 are filed as if their tick were 2^26 - 1 past the t of that
 *    moment, and re-filed from their stored deadline when cascaded;
 *  - the due list holds entries whose tick is < t, oldest tick first
 *    (except entries added with a deadline already in the past, which
 *    join the tail).
 *
 * Running tick t cascades, as in the pre-4.8 Linux timer wheel, when t is
 * a multiple of 256: level 1 slot (t >> 8) & 63, then, if that index is 0,
 * level 2 slot (t >> 14) & 63, and so on. A cascaded entry always lands in
 * a lower level or in a level-0 slot not run yet, never back in the slot
 * being emptied. Then l0[t & 255] is appended to the due list.
 *
 * A tick at which nothing is in l0 and no non-empty slot is cascaded does
 * nothing, so dl_wheel_next() finds the next tick that does something (a
 * cyclic scan of l0_bits, then at most 64 list heads per level) and
 * advancing jumps straight to it. A clock jump costs in proportion to the
 * entries it touches, plus one re-filing per 2^26 ticks for each entry
 * beyond the top level, not to the number of ticks.
 *
 * Clock readings are capped at DL_WHEEL_TICK_MAX ticks so that tick
 * arithmetic never wraps; deadlines may be any uint64_t, and one whose tick
 * is beyond the cap stays pending until deleted.
 *
 * dl_wheel_run() fires behind a fence node placed at the tail of the due
 * list: entries re-added by callbacks with a deadline in the past land
 * after the fence and wait for the next run, so a callback that keeps
 * re-arming itself cannot loop forever. Callbacks must not call
 * dl_wheel_run().
 */
#include "server/locktab/wheel.h"

#include <stdint.h>

#define DL_WHEEL_L0_MASK  (DL_WHEEL_L0_SIZE - 1)
#define DL_WHEEL_LN_MASK  (DL_WHEEL_LN_SIZE - 1)
#define DL_WHEEL_L0_WORDS (DL_WHEEL_L0_SIZE / 64)
/* Ticks the wheel can hold: 2^26, about 18.6 hours at a 1 ms tick. */
#define DL_WHEEL_SPAN                                                          \
	((uint64_t)1 << (DL_WHEEL_L0_BITS +                                    \
			 (DL_WHEEL_LEVELS - 1) * DL_WHEEL_LN_BITS))
/* Highest clock reading, in ticks: keeps now + SPAN from wrapping. */
#define DL_WHEEL_TICK_MAX (UINT64_MAX >> 1)

/* ---- lists with a sentinel head ----------------------------------------- */

static void dl_list_init(struct dl_wheel_entry *h)
{
	h->next = h;
	h->prev = h;
}

static int dl_list_empty(const struct dl_wheel_entry *h)
{
	return h->next == h;
}

static void dl_list_append(struct dl_wheel_entry *h, struct dl_wheel_entry *e)
{
	e->prev = h->prev;
	e->next = h;
	h->prev->next = e;
	h->prev = e;
}

static void dl_list_unlink(struct dl_wheel_entry *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	e->next = NULL;
	e->prev = NULL;
}

/* Move every entry of src, in order, to the tail of dst; src ends empty. */
static void dl_list_splice_tail(struct dl_wheel_entry *dst,
				struct dl_wheel_entry *src)
{
	if (dl_list_empty(src))
		return;
	src->next->prev = dst->prev;
	dst->prev->next = src->next;
	src->prev->next = dst;
	dst->prev = src->prev;
	dl_list_init(src);
}

/* ---- ticks -------------------------------------------------------------- */

/* Shift of level n >= 1: a slot of level n covers 2^shift ticks. */
static unsigned dl_wheel_shift(unsigned level)
{
	return DL_WHEEL_L0_BITS + (level - 1) * DL_WHEEL_LN_BITS;
}

/* The tick of a deadline: ceil(ms / tick_ms), without overflow. */
static uint64_t dl_wheel_tick_of(const struct dl_wheel *w, uint64_t ms)
{
	return ms / w->tick_ms + (ms % w->tick_ms != 0);
}

/* The last tick a clock reading has reached, capped. */
static uint64_t dl_wheel_clock(const struct dl_wheel *w, uint64_t now_ms)
{
	uint64_t t = now_ms / w->tick_ms;

	return t < DL_WHEEL_TICK_MAX ? t : DL_WHEEL_TICK_MAX;
}

static void dl_wheel_l0_set(struct dl_wheel *w, unsigned slot)
{
	w->l0_bits[slot / 64] |= (uint64_t)1 << (slot % 64);
}

static void dl_wheel_l0_clear(struct dl_wheel *w, unsigned slot)
{
	w->l0_bits[slot / 64] &= ~((uint64_t)1 << (slot % 64));
}

/* First non-empty level-0 slot at or cyclically after pos, or -1. */
static int dl_wheel_l0_find(const struct dl_wheel *w, unsigned pos)
{
	unsigned i, word;
	uint64_t bits;

	for (i = 0; i <= DL_WHEEL_L0_WORDS; i++) {
		word = (pos / 64 + i) % DL_WHEEL_L0_WORDS;
		bits = w->l0_bits[word];
		if (i == 0)
			bits &= ~(uint64_t)0 << (pos % 64);
		else if (i == DL_WHEEL_L0_WORDS)
			bits &= ~(~(uint64_t)0 << (pos % 64));
		if (bits != 0)
			return (int)(word * 64 +
				     (unsigned)__builtin_ctzll(bits));
	}
	return -1;
}

/*
 * The first tick >= t at which running does something: a level-0 slot to
 * move to the due list, or a non-empty slot to cascade. UINT64_MAX if the
 * slots are all empty.
 */
static uint64_t dl_wheel_next(const struct dl_wheel *w, uint64_t t)
{
	uint64_t best = UINT64_MAX, span, c0, c;
	unsigned level, shift, s0, i;
	int slot;

	slot = dl_wheel_l0_find(w, (unsigned)(t & DL_WHEEL_L0_MASK));
	if (slot >= 0)
		best = t + (((uint64_t)slot - t) & DL_WHEEL_L0_MASK);

	for (level = 1; level < DL_WHEEL_LEVELS; level++) {
		shift = dl_wheel_shift(level);
		span = (uint64_t)1 << shift;
		c0 = (t + span - 1) & ~(span - 1); /* first cascade point */
		if (c0 >= best)
			break; /* higher levels cascade no earlier */
		s0 = (unsigned)(c0 >> shift) & DL_WHEEL_LN_MASK;
		for (i = 0; i < DL_WHEEL_LN_SIZE; i++) {
			if (dl_list_empty(&w->ln[level - 1]
						[(s0 + i) & DL_WHEEL_LN_MASK]))
				continue;
			c = c0 + ((uint64_t)i << shift);
			if (c < best)
				best = c;
			break;
		}
	}
	return best;
}

/* ---- filing and running ------------------------------------------------- */

/* Link an unlinked entry where its deadline belongs, relative to w->now. */
static void dl_wheel_file(struct dl_wheel *w, struct dl_wheel_entry *e)
{
	uint64_t tick = dl_wheel_tick_of(w, e->expires), delta;
	unsigned level, shift, slot;
	struct dl_wheel_entry *head;

	if (tick < w->now) {
		dl_list_append(&w->due, e);
		return;
	}
	delta = tick - w->now;
	if (delta < DL_WHEEL_L0_SIZE) {
		slot = (unsigned)(tick & DL_WHEEL_L0_MASK);
		dl_wheel_l0_set(w, slot);
		dl_list_append(&w->l0[slot], e);
		return;
	}
	if (delta >= DL_WHEEL_SPAN) {
		/* Park in the farthest slot; re-filed when cascaded. */
		delta = DL_WHEEL_SPAN - 1;
		tick = w->now + delta;
	}
	for (level = 1; level < DL_WHEEL_LEVELS - 1; level++)
		if (delta < (uint64_t)1 << dl_wheel_shift(level + 1))
			break;
	shift = dl_wheel_shift(level);
	head = &w->ln[level - 1][(tick >> shift) & DL_WHEEL_LN_MASK];
	dl_list_append(head, e);
}

/* Re-file every entry of a higher-level slot, now that its time has come. */
static void dl_wheel_cascade(struct dl_wheel *w, struct dl_wheel_entry *slot)
{
	struct dl_wheel_entry work, *e;

	if (dl_list_empty(slot))
		return;
	dl_list_init(&work);
	dl_list_splice_tail(&work, slot);
	while (!dl_list_empty(&work)) {
		e = work.next;
		dl_list_unlink(e);
		dl_wheel_file(w, e);
	}
}

/* Run tick w->now: cascade if level 0 wraps, then expire its slot. */
static void dl_wheel_tick(struct dl_wheel *w)
{
	uint64_t t = w->now;
	unsigned slot = (unsigned)(t & DL_WHEEL_L0_MASK), level, s;

	if (slot == 0) {
		for (level = 1; level < DL_WHEEL_LEVELS; level++) {
			s = (unsigned)(t >> dl_wheel_shift(level)) &
			    DL_WHEEL_LN_MASK;
			dl_wheel_cascade(w, &w->ln[level - 1][s]);
			if (s != 0)
				break;
		}
	}
	dl_list_splice_tail(&w->due, &w->l0[slot]);
	dl_wheel_l0_clear(w, slot);
	w->now = t + 1;
}

/* Run every tick up to and including target, skipping idle ones. */
static void dl_wheel_advance(struct dl_wheel *w, uint64_t target)
{
	uint64_t t;

	while (w->now <= target) {
		t = dl_wheel_next(w, w->now);
		if (t > target) {
			w->now = target + 1;
			return;
		}
		w->now = t;
		dl_wheel_tick(w);
	}
}

/* ---- public interface --------------------------------------------------- */

void dl_wheel_init(struct dl_wheel *w, uint64_t tick_ms, uint64_t now_ms)
{
	unsigned i, level;

	w->tick_ms = tick_ms != 0 ? tick_ms : 1;
	w->now = dl_wheel_clock(w, now_ms) + 1;
	w->count = 0;
	for (i = 0; i < DL_WHEEL_L0_SIZE; i++)
		dl_list_init(&w->l0[i]);
	for (level = 0; level < DL_WHEEL_LEVELS - 1; level++)
		for (i = 0; i < DL_WHEEL_LN_SIZE; i++)
			dl_list_init(&w->ln[level][i]);
	dl_list_init(&w->due);
	for (i = 0; i < DL_WHEEL_L0_WORDS; i++)
		w->l0_bits[i] = 0;
}

void dl_wheel_entry_init(struct dl_wheel_entry *e)
{
	e->next = NULL;
	e->prev = NULL;
	e->expires = 0;
}

int dl_wheel_pending(const struct dl_wheel_entry *e)
{
	return e->next != NULL;
}

void dl_wheel_add(struct dl_wheel *w, struct dl_wheel_entry *e,
		  uint64_t expires_ms)
{
	dl_wheel_del(w, e);
	e->expires = expires_ms;
	dl_wheel_file(w, e);
	w->count++;
}

void dl_wheel_del(struct dl_wheel *w, struct dl_wheel_entry *e)
{
	struct dl_wheel_entry *prev;
	unsigned slot;
	int was_last;

	if (e->next == NULL)
		return;
	prev = e->prev;
	was_last = e->next == e->prev;
	dl_list_unlink(e);
	w->count--;
	/* A level-0 entry sits in l0[tick & 255]; clear the bit if the
	 * entry was the last one there. */
	slot = (unsigned)(dl_wheel_tick_of(w, e->expires) & DL_WHEEL_L0_MASK);
	if (was_last && prev == &w->l0[slot])
		dl_wheel_l0_clear(w, slot);
}

size_t dl_wheel_run(struct dl_wheel *w, uint64_t now_ms, size_t budget,
		    dl_wheel_cb cb, void *arg)
{
	struct dl_wheel_entry fence, *e;
	uint64_t target = dl_wheel_clock(w, now_ms);
	size_t fired = 0;

	if (target >= w->now)
		dl_wheel_advance(w, target);
	if (budget == 0 || dl_list_empty(&w->due))
		return 0;

	dl_list_append(&w->due, &fence);
	while (fired < budget && w->due.next != &fence) {
		e = w->due.next;
		dl_list_unlink(e);
		w->count--;
		fired++;
		if (cb != NULL)
			cb(e, arg);
	}
	dl_list_unlink(&fence);
	return fired;
}

int64_t dl_wheel_timeout(const struct dl_wheel *w, uint64_t now_ms)
{
	uint64_t tick, at;

	if (w->count == 0)
		return -1;
	if (!dl_list_empty(&w->due))
		return 0;
	tick = dl_wheel_next(w, w->now);
	if (tick == UINT64_MAX)
		return -1; /* unreachable while count is right */
	/* Start of that tick, saturating: past UINT64_MAX it never comes. */
	at = tick > UINT64_MAX / w->tick_ms ? UINT64_MAX : tick * w->tick_ms;
	if (at <= now_ms)
		return 0;
	if (at - now_ms > (uint64_t)INT64_MAX)
		return INT64_MAX;
	return (int64_t)(at - now_ms);
}

size_t dl_wheel_count(const struct dl_wheel *w)
{
	return w->count;
}
