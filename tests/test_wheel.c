/* SPDX-License-Identifier: MIT */
/*
 * test_wheel.c -- unit tests for the hierarchical timing wheel.
 *
 * Timers embed a dl_wheel_entry the way leases and waiters do. Every test
 * drives the wheel with explicit clock readings and records, per timer, the
 * now_ms of the run that fired it and of the run before; "on time" means
 * the first run whose clock reached the timer's tick boundary
 * ceil(D / tick) * tick, which is never before D and less than a tick
 * after it. Random inputs come from a fixed-seed generator, so a failure
 * repeats.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/locktab/wheel.h"

/* Ticks per slot of levels 1, 2, 3, and ticks the whole wheel holds. */
#define L1_SPAN	  ((uint64_t)1 << 8)
#define L2_SPAN	  ((uint64_t)1 << 14)
#define L3_SPAN	  ((uint64_t)1 << 20)
#define TOP_SPAN  ((uint64_t)1 << 26)
#define MILLION	  1000000u
#define NO_BUDGET SIZE_MAX

struct timer {
	struct dl_wheel_entry e;
	uint64_t deadline; /* as given to dl_wheel_add */
	uint64_t fired_at; /* now_ms of the run that fired it */
	uint64_t prev_run; /* now_ms of the run before that one */
	unsigned fires;	   /* times the callback saw it */
	int was_past;	   /* added with its tick already run */
};

#define TIMER_OF(ep) ((struct timer *)((char *)(ep)-offsetof(struct timer, e)))

/* What the firing callback records. */
struct rec {
	uint64_t tick_ms;
	uint64_t now;	     /* now_ms of the run in progress */
	uint64_t prev;	     /* now_ms of the previous run */
	size_t fired;	     /* callbacks so far */
	uint64_t last_key;   /* boundary of the last timer fired */
	size_t out_of_order; /* fires whose boundary went backwards */
};

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng = 0x9e3779b97f4a7c15u;

/* xorshift64*: deterministic, good enough to scatter deadlines. */
static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1du;
}

static uint64_t rnd_below(uint64_t n)
{
	return rnd() % n;
}

/* The tick boundary at which a deadline fires. */
static uint64_t boundary(uint64_t d, uint64_t tick_ms)
{
	return (d / tick_ms + (d % tick_ms != 0)) * tick_ms;
}

static void on_fire(struct dl_wheel_entry *e, void *arg)
{
	struct rec *r = arg;
	struct timer *t = TIMER_OF(e);
	uint64_t key = boundary(t->deadline, r->tick_ms);

	cr_assert(eq(int, dl_wheel_pending(e), 0), "unlinked before cb");
	t->fires++;
	t->fired_at = r->now;
	t->prev_run = r->prev;
	if (!t->was_past && key < r->last_key)
		r->out_of_order++;
	if (!t->was_past)
		r->last_key = key;
	r->fired++;
}

static void rec_init(struct rec *r, uint64_t tick_ms, uint64_t now)
{
	memset(r, 0, sizeof(*r));
	r->tick_ms = tick_ms;
	r->now = now;
	r->prev = now;
}

static size_t run_at(struct dl_wheel *w, struct rec *r, uint64_t now,
		     size_t budget)
{
	size_t n;

	r->now = now;
	n = dl_wheel_run(w, now, budget, on_fire, r);
	r->prev = now;
	return n;
}

static void timer_add(struct dl_wheel *w, struct timer *t, uint64_t deadline)
{
	t->deadline = deadline;
	dl_wheel_add(w, &t->e, deadline);
}

/* Fired once, by the first run whose clock reached its tick boundary. */
static void assert_on_time(const struct timer *t, uint64_t tick_ms, size_t i)
{
	uint64_t b = boundary(t->deadline, tick_ms);

	cr_assert(eq(uint, t->fires, 1), "timer %zu, deadline %llu", i,
		  (unsigned long long)t->deadline);
	cr_assert(ge(u64, t->fired_at, b), "timer %zu fired early", i);
	cr_assert(lt(u64, t->prev_run, b), "timer %zu fired late", i);
}

/* A deadline spread over the wheel's levels (in ticks from now). */
static uint64_t rnd_distance(void)
{
	switch (rnd_below(5)) {
	case 0:
		return rnd_below(L1_SPAN);
	case 1:
		return L1_SPAN + rnd_below(L2_SPAN - L1_SPAN);
	case 2:
		return L2_SPAN + rnd_below(L3_SPAN - L2_SPAN);
	case 3:
		return L3_SPAN + rnd_below(TOP_SPAN - L3_SPAN);
	default:
		return TOP_SPAN + rnd_below(4 * TOP_SPAN);
	}
}

/* A deadline (in ms) in a tick within two of a cascade point of some
 * level, where the wheel moves entries between levels: often the next
 * such point, else one up to 64 slots away. */
static uint64_t rnd_near_cascade(uint64_t now, uint64_t tick_ms)
{
	unsigned b = 8 + 6 * (unsigned)rnd_below(4);
	uint64_t span = (uint64_t)1 << b;
	uint64_t c =
		now / tick_ms + 2 + rnd_below(rnd_below(2) ? span : span * 64);

	c = (c + span - 1) / span * span + rnd_below(5) - 2;
	return c * tick_ms - rnd_below(tick_ms);
}

/* ---- basics ------------------------------------------------------------- */

Test(wheel, empty_wheel_has_no_timeout_and_fires_nothing)
{
	struct dl_wheel w;
	struct rec r;

	dl_wheel_init(&w, 1, 1000);
	rec_init(&r, 1, 1000);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000), -1));
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
	cr_assert(eq(sz, run_at(&w, &r, 5000, NO_BUDGET), 0));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 5000), -1));
}

Test(wheel, entry_init_makes_entry_idle_and_del_of_idle_is_noop)
{
	struct dl_wheel w;
	struct timer a, b;

	memset(&a, 0xa5, sizeof(a));
	dl_wheel_entry_init(&a.e);
	cr_assert(eq(int, dl_wheel_pending(&a.e), 0));
	cr_assert(eq(u64, a.e.expires, 0));
	cr_assert(eq(ptr, (void *)a.e.prev, NULL));

	dl_wheel_init(&w, 1, 0);
	memset(&b, 0, sizeof(b));
	timer_add(&w, &b, 50);
	dl_wheel_del(&w, &a.e);
	cr_assert(eq(sz, dl_wheel_count(&w), 1));
	cr_assert(eq(int, dl_wheel_pending(&b.e), 1));
	dl_wheel_del(&w, &b.e);
	cr_assert(eq(int, dl_wheel_pending(&b.e), 0));
	dl_wheel_del(&w, &b.e);
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 0), -1));
}

/* ---- order and precision ------------------------------------------------ */

Test(wheel, entries_fire_in_deadline_order_across_levels)
{
	enum { N = 4000 };
	const uint64_t start = 1000;
	struct timer *t = calloc(N, sizeof(*t));
	uint64_t now, last = 0;
	struct dl_wheel w;
	struct rec r;
	size_t i;

	cr_assert(ne(ptr, t, NULL));
	dl_wheel_init(&w, 1, start);
	rec_init(&r, 1, start);
	for (i = 0; i < N; i++) {
		/* Levels 0..3: up to an eighth of the way into level 3. */
		uint64_t d = 1 + rnd_below(L3_SPAN + L3_SPAN / 8);

		timer_add(&w, &t[i], start + d);
		if (start + d > last)
			last = start + d;
	}
	for (now = start + 1; now <= last; now++)
		run_at(&w, &r, now, NO_BUDGET);
	cr_assert(eq(sz, r.fired, N));
	cr_assert(eq(sz, r.out_of_order, 0));
	for (i = 0; i < N; i++) {
		assert_on_time(&t[i], 1, i);
		cr_assert(eq(u64, t[i].fired_at, t[i].deadline));
	}
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
	free(t);
}

Test(wheel, never_early_and_at_most_one_tick_late)
{
	static const uint64_t ticks[] = {1, 10, 7};
	enum { N = 1500 };
	const uint64_t start = 12345;
	struct timer *t = calloc(N, sizeof(*t));
	size_t k, i;

	cr_assert(ne(ptr, t, NULL));
	for (k = 0; k < sizeof(ticks) / sizeof(ticks[0]); k++) {
		uint64_t tm = ticks[k], now, last = 0;
		struct dl_wheel w;
		struct rec r;

		memset(t, 0, N * sizeof(*t));
		dl_wheel_init(&w, tm, start);
		rec_init(&r, tm, start);
		for (i = 0; i < N; i++) {
			/* Up to 20000 ticks: levels 0, 1 and 2. */
			uint64_t d = start + 1 + rnd_below(tm * 20000);

			if (tm > 1 && d % tm == 0)
				d++;
			timer_add(&w, &t[i], d);
			if (d > last)
				last = d;
		}
		/* Every millisecond: the run that fires is the first one
		 * that may. */
		for (now = start + 1; now < last + tm; now++)
			run_at(&w, &r, now, NO_BUDGET);
		cr_assert(eq(sz, r.fired, N), "tick %llu",
			  (unsigned long long)tm);
		for (i = 0; i < N; i++) {
			assert_on_time(&t[i], tm, i);
			cr_assert(ge(u64, t[i].fired_at, t[i].deadline));
			cr_assert(lt(u64, t[i].fired_at, t[i].deadline + tm),
				  "tick %llu", (unsigned long long)tm);
		}
		cr_assert(eq(sz, r.out_of_order, 0));
	}
	free(t);
}

/* ---- cancel and callbacks ----------------------------------------------- */

Test(wheel, deleted_entries_never_fire)
{
	enum { N = 3000 };
	const uint64_t start = 777;
	struct timer *t = calloc(N, sizeof(*t));
	uint64_t now = start, end = start + 6 * TOP_SPAN;
	struct dl_wheel w;
	struct rec r;
	size_t i, kept = N;

	cr_assert(ne(ptr, t, NULL));
	dl_wheel_init(&w, 1, start);
	rec_init(&r, 1, start);
	for (i = 0; i < N; i++)
		timer_add(&w, &t[i], start + 1 + rnd_distance());
	/* Delete a third now, from every level... */
	for (i = 0; i < N; i += 3) {
		dl_wheel_del(&w, &t[i].e);
		kept--;
	}
	cr_assert(eq(sz, dl_wheel_count(&w), kept));
	/* ...and another third once they may have been cascaded. */
	while (now < end) {
		now += 1 + rnd_below(L3_SPAN);
		run_at(&w, &r, now, NO_BUDGET);
		if (now > start + TOP_SPAN / 2 && now < start + TOP_SPAN)
			for (i = 1; i < N; i += 3)
				if (dl_wheel_pending(&t[i].e)) {
					dl_wheel_del(&w, &t[i].e);
					kept--;
				}
	}
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
	for (i = 0; i < N; i += 3)
		cr_assert(eq(uint, t[i].fires, 0), "timer %zu", i);
	for (i = 2; i < N; i += 3)
		assert_on_time(&t[i], 1, i);
	for (i = 1; i < N; i += 3)
		cr_assert(le(uint, t[i].fires, 1), "timer %zu", i);
	cr_assert(eq(sz, r.fired, kept));
	free(t);
}

struct del_ctx {
	struct dl_wheel *w;
	struct timer *victim;
	size_t fired;
	int victim_fired;
};

static void del_victim_cb(struct dl_wheel_entry *e, void *arg)
{
	struct del_ctx *c = arg;

	if (e == &c->victim->e)
		c->victim_fired = 1;
	else if (dl_wheel_pending(&c->victim->e))
		dl_wheel_del(c->w, &c->victim->e);
	c->fired++;
}

Test(wheel, callback_may_delete_another_due_entry)
{
	struct timer t[4];
	struct del_ctx c;
	struct dl_wheel w;
	size_t n;

	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 1, 0);
	timer_add(&w, &t[0], 10);
	timer_add(&w, &t[1], 10); /* same tick as the deleter */
	timer_add(&w, &t[2], 11);
	timer_add(&w, &t[3], 12);
	memset(&c, 0, sizeof(c));
	c.w = &w;
	c.victim = &t[1];
	n = dl_wheel_run(&w, 12, NO_BUDGET, del_victim_cb, &c);
	cr_assert(eq(sz, n, 3));
	cr_assert(eq(int, c.victim_fired, 0));
	cr_assert(eq(int, dl_wheel_pending(&t[1].e), 0));
	cr_assert(eq(sz, dl_wheel_count(&w), 0));

	/* The victim due in a later tick of the same run. */
	timer_add(&w, &t[0], 20);
	timer_add(&w, &t[1], 25);
	memset(&c, 0, sizeof(c));
	c.w = &w;
	c.victim = &t[1];
	n = dl_wheel_run(&w, 30, NO_BUDGET, del_victim_cb, &c);
	cr_assert(eq(sz, n, 1));
	cr_assert(eq(int, c.victim_fired, 0));
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 30), -1));
}

struct rearm_ctx {
	struct dl_wheel *w;
	uint64_t now;
	uint64_t period;
	uint64_t fired_at[16];
	size_t fired;
};

static void rearm_cb(struct dl_wheel_entry *e, void *arg)
{
	struct rearm_ctx *c = arg;

	if (c->fired < 16)
		c->fired_at[c->fired] = c->now;
	c->fired++;
	dl_wheel_add(c->w, e, c->now + c->period);
}

Test(wheel, callback_may_readd_its_entry)
{
	struct dl_wheel_entry e;
	struct rearm_ctx c;
	struct dl_wheel w;
	size_t i;

	memset(&c, 0, sizeof(c));
	dl_wheel_entry_init(&e);
	dl_wheel_init(&w, 1, 0);
	c.w = &w;
	c.period = 300; /* re-added into level 1, not level 0 */
	dl_wheel_add(&w, &e, 300);
	for (c.now = 1; c.now <= 3000; c.now++)
		dl_wheel_run(&w, c.now, NO_BUDGET, rearm_cb, &c);
	cr_assert(eq(sz, c.fired, 10));
	for (i = 0; i < 10; i++)
		cr_assert(eq(u64, c.fired_at[i], 300 * (i + 1)));
	cr_assert(eq(int, dl_wheel_pending(&e), 1));
	cr_assert(eq(sz, dl_wheel_count(&w), 1));
}

static void rearm_past_cb(struct dl_wheel_entry *e, void *arg)
{
	struct rearm_ctx *c = arg;

	/* Stops after 100 so that a wheel that loops fails, not hangs. */
	if (++c->fired < 100)
		dl_wheel_add(c->w, e, 0);
}

Test(wheel, readd_in_past_from_callback_fires_on_next_run)
{
	struct dl_wheel_entry e;
	struct rearm_ctx c;
	struct dl_wheel w;

	memset(&c, 0, sizeof(c));
	dl_wheel_entry_init(&e);
	dl_wheel_init(&w, 1, 100);
	c.w = &w;
	dl_wheel_add(&w, &e, 50);
	/* Not fired again within the same run, budget or not. */
	cr_assert(
		eq(sz, dl_wheel_run(&w, 100, NO_BUDGET, rearm_past_cb, &c), 1));
	cr_assert(eq(int, dl_wheel_pending(&e), 1));
	cr_assert(eq(sz, dl_wheel_count(&w), 1));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 100), 0));
	cr_assert(
		eq(sz, dl_wheel_run(&w, 100, NO_BUDGET, rearm_past_cb, &c), 1));
	cr_assert(eq(sz, c.fired, 2));
	dl_wheel_del(&w, &e);
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
}

static void free_cb(struct dl_wheel_entry *e, void *arg)
{
	size_t *n = arg;

	free(TIMER_OF(e));
	(*n)++;
}

Test(wheel, callback_may_free_its_entry)
{
	struct dl_wheel w;
	size_t i, n = 0;

	dl_wheel_init(&w, 1, 0);
	for (i = 0; i < 100; i++) {
		struct timer *t = calloc(1, sizeof(*t));

		cr_assert(ne(ptr, t, NULL));
		timer_add(&w, t, 1 + i % 7);
	}
	cr_assert(eq(sz, dl_wheel_run(&w, 10, NO_BUDGET, free_cb, &n), 100));
	cr_assert(eq(sz, n, 100));
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
}

/* ---- budget ------------------------------------------------------------- */

Test(wheel, budget_leftovers_stay_pending_and_fire_first)
{
	struct timer t[15];
	struct dl_wheel w;
	struct rec r;
	size_t i;

	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 1, 0);
	rec_init(&r, 1, 0);
	for (i = 0; i < 10; i++)
		timer_add(&w, &t[i], 5);
	cr_assert(eq(sz, run_at(&w, &r, 5, 3), 3));
	cr_assert(eq(sz, dl_wheel_count(&w), 7));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 5), 0));
	for (i = 3; i < 10; i++)
		cr_assert(eq(int, dl_wheel_pending(&t[i].e), 1), "timer %zu",
			  i);
	dl_wheel_del(&w, &t[4].e);
	cr_assert(eq(sz, dl_wheel_count(&w), 6));

	/* Same clock: the leftovers still fire. */
	cr_assert(eq(sz, run_at(&w, &r, 5, 2), 2));
	cr_assert(eq(sz, dl_wheel_count(&w), 4));

	/* Newer entries queue behind the leftovers. */
	for (i = 10; i < 15; i++)
		timer_add(&w, &t[i], 6);
	cr_assert(eq(sz, run_at(&w, &r, 6, 100), 9));
	cr_assert(eq(sz, r.out_of_order, 0));
	for (i = 0; i < 15; i++)
		cr_assert(eq(uint, t[i].fires, i == 4 ? 0u : 1u), "timer %zu",
			  i);
	for (i = 10; i < 15; i++)
		cr_assert(eq(u64, t[i].fired_at, 6));
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
	cr_assert(eq(sz, run_at(&w, &r, 6, 0), 0));
}

Test(wheel, million_entries_in_one_tick_drain_by_budget)
{
	const size_t budget = 10000;
	struct timer *t = calloc(MILLION, sizeof(*t));
	struct dl_wheel w;
	struct rec r;
	size_t i, calls = 0, n;

	cr_assert(ne(ptr, t, NULL));
	dl_wheel_init(&w, 1, 0);
	rec_init(&r, 1, 0);
	for (i = 0; i < MILLION; i++)
		timer_add(&w, &t[i], 500);
	cr_assert(eq(sz, dl_wheel_count(&w), MILLION));
	cr_assert(eq(sz, run_at(&w, &r, 499, budget), 0));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 499), 1));
	while ((n = run_at(&w, &r, 500, budget)) != 0) {
		calls++;
		cr_assert(eq(sz, n, budget), "call %zu", calls);
		cr_assert(eq(sz, dl_wheel_count(&w), MILLION - calls * budget));
	}
	cr_assert(eq(sz, calls, 100));
	cr_assert(eq(sz, r.fired, MILLION));
	for (i = 0; i < MILLION; i++)
		if (t[i].fires != 1)
			cr_assert(eq(uint, t[i].fires, 1), "timer %zu", i);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 500), -1));
	free(t);
}

Test(wheel, million_random_deadlines_fire_exactly_once)
{
	const uint64_t start = 5;
	struct timer *t = calloc(MILLION, sizeof(*t));
	uint64_t now = start, last = 0;
	struct dl_wheel w;
	struct rec r;
	size_t i;

	cr_assert(ne(ptr, t, NULL));
	dl_wheel_init(&w, 1, start);
	rec_init(&r, 1, start);
	for (i = 0; i < MILLION; i++) {
		/* Mostly within 2^23 ticks, one in a hundred beyond the top
		 * level. */
		uint64_t d = i % 100 == 0 ? rnd_below(3 * TOP_SPAN)
					  : rnd_below((uint64_t)1 << 23);

		timer_add(&w, &t[i], start + 1 + d);
		if (start + 1 + d > last)
			last = start + 1 + d;
	}
	while (now < last) {
		now += 1 + rnd_below(rnd() % 2 ? 4096 : 70000);
		run_at(&w, &r, now, NO_BUDGET);
	}
	cr_assert(eq(sz, r.fired, MILLION));
	cr_assert(eq(sz, r.out_of_order, 0));
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
	for (i = 0; i < MILLION; i++) {
		const struct timer *x = &t[i];

		if (x->fires != 1 || x->fired_at < x->deadline ||
		    x->prev_run >= x->deadline)
			assert_on_time(x, 1, i);
	}
	free(t);
}

/* ---- wrap-around and long deadlines ------------------------------------- */

/* Deadlines at and around every cascade boundary, from several starting
 * clocks (some near wraps of the slot indices, some huge); the clock stops
 * just before and at each deadline, with jumps in between. */
Test(wheel, deadlines_around_cascade_boundaries_fire_exactly)
{
	static const uint64_t starts[] = {
		0,
		1,
		255,
		256,
		16383,
		1048575,
		12345678,
		(uint64_t)1 << 40,
		((uint64_t)1 << 40) + 255,
		((uint64_t)1 << 40) - 1,
		((uint64_t)1 << 52) + 1048577,
	};
	static const uint64_t spans[] = {L1_SPAN, L2_SPAN, L3_SPAN, TOP_SPAN};
	enum { MAX_T = 4 * 5 * 3 };
	size_t s, k, m, i, n;

	for (s = 0; s < sizeof(starts) / sizeof(starts[0]); s++) {
		uint64_t start = starts[s], stops[2 * MAX_T];
		struct timer t[MAX_T];
		struct dl_wheel w;
		struct rec r;

		memset(t, 0, sizeof(t));
		dl_wheel_init(&w, 1, start);
		rec_init(&r, 1, start);
		n = 0;
		for (k = 0; k < 4; k++) {
			static const uint64_t mult[] = {1, 2, 63, 64, 65};

			for (m = 0; m < 5; m++) {
				uint64_t d = spans[k] * mult[m];

				timer_add(&w, &t[n++], start + d - 1);
				timer_add(&w, &t[n++], start + d);
				timer_add(&w, &t[n++], start + d + 1);
			}
		}
		for (i = 0; i < n; i++) {
			stops[2 * i] = t[i].deadline - 1;
			stops[2 * i + 1] = t[i].deadline;
		}
		/* Sort the stops (insertion sort; a few dozen). */
		for (i = 1; i < 2 * n; i++) {
			uint64_t v = stops[i];

			for (k = i; k > 0 && stops[k - 1] > v; k--)
				stops[k] = stops[k - 1];
			stops[k] = v;
		}
		for (i = 0; i < 2 * n; i++)
			run_at(&w, &r, stops[i], NO_BUDGET);
		cr_assert(eq(sz, r.fired, n), "start %llu",
			  (unsigned long long)start);
		for (i = 0; i < n; i++) {
			assert_on_time(&t[i], 1, i);
			cr_assert(eq(u64, t[i].fired_at, t[i].deadline),
				  "start %llu, timer %zu",
				  (unsigned long long)start, i);
		}
		cr_assert(eq(sz, dl_wheel_count(&w), 0));
	}
}

/* Tick by tick across the first wraps of level 0 and level 1, from a clock
 * whose slot indices are all about to wrap. */
Test(wheel, tick_by_tick_across_wraps_from_large_clock)
{
	enum { N = 600 };
	const uint64_t start = ((uint64_t)1 << 40) - 3;
	struct timer t[N];
	struct dl_wheel w;
	struct rec r;
	uint64_t now;
	size_t i;

	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 1, start);
	rec_init(&r, 1, start);
	for (i = 0; i < N; i++)
		timer_add(&w, &t[i], start + 1 + rnd_below(3 * L2_SPAN));
	for (now = start + 1; now <= start + 3 * L2_SPAN; now++)
		run_at(&w, &r, now, NO_BUDGET);
	cr_assert(eq(sz, r.fired, N));
	cr_assert(eq(sz, r.out_of_order, 0));
	for (i = 0; i < N; i++)
		cr_assert(eq(u64, t[i].fired_at, t[i].deadline), "timer %zu",
			  i);
}

Test(wheel, deadlines_beyond_top_level_fire_exactly)
{
	static const uint64_t dists[] = {
		TOP_SPAN,	   TOP_SPAN + 1,   5 * TOP_SPAN + 7,
		64 * TOP_SPAN - 1, 1000000000000u, /* 10^12 ms: about 31 years
						    */
	};
	size_t k;

	for (k = 0; k < sizeof(dists) / sizeof(dists[0]); k++) {
		const uint64_t start = 4242, d = start + dists[k];
		struct timer t, near;
		struct dl_wheel w;
		struct rec r;

		memset(&t, 0, sizeof(t));
		memset(&near, 0, sizeof(near));
		dl_wheel_init(&w, 1, start);
		rec_init(&r, 1, start);
		timer_add(&w, &t, d);
		timer_add(&w, &near, start + 100);
		/* One jump to just before the deadline... */
		cr_assert(eq(sz, run_at(&w, &r, d - 1, NO_BUDGET), 1));
		cr_assert(eq(uint, near.fires, 1));
		cr_assert(eq(uint, t.fires, 0), "distance %llu",
			  (unsigned long long)dists[k]);
		cr_assert(eq(i64, dl_wheel_timeout(&w, d - 1), 1));
		/* ...then onto it. */
		cr_assert(eq(sz, run_at(&w, &r, d, NO_BUDGET), 1));
		cr_assert(eq(u64, t.fired_at, d));

		/* Again with many jumps of about 2^30 ms. */
		dl_wheel_init(&w, 1, start);
		rec_init(&r, 1, start);
		memset(&t, 0, sizeof(t));
		timer_add(&w, &t, d);
		while (r.prev + ((uint64_t)1 << 30) < d)
			run_at(&w, &r,
			       r.prev + ((uint64_t)1 << 30) - rnd_below(1000),
			       NO_BUDGET);
		cr_assert(eq(uint, t.fires, 0));
		run_at(&w, &r, d - 1, NO_BUDGET);
		cr_assert(eq(uint, t.fires, 0));
		run_at(&w, &r, d, NO_BUDGET);
		cr_assert(eq(uint, t.fires, 1));
		cr_assert(eq(u64, t.fired_at, d));
	}
}

Test(wheel, huge_deadlines_are_accepted)
{
	/* UINT64_MAX / 2 with a 2^32 ms tick: tick 2^31, beyond the top
	 * level, boundary 2^63. */
	const uint64_t tm = (uint64_t)1 << 32, d = UINT64_MAX / 2;
	const uint64_t b = (uint64_t)1 << 63;
	struct timer t, never;
	struct dl_wheel w;
	struct rec r;

	memset(&t, 0, sizeof(t));
	memset(&never, 0, sizeof(never));
	dl_wheel_init(&w, tm, 0);
	rec_init(&r, tm, 0);
	timer_add(&w, &t, d);
	timer_add(&w, &never, UINT64_MAX);
	cr_assert(eq(sz, dl_wheel_count(&w), 2));
	cr_assert(gt(i64, dl_wheel_timeout(&w, 0), 0));
	cr_assert(eq(sz, run_at(&w, &r, b / 2, NO_BUDGET), 0));
	cr_assert(eq(sz, run_at(&w, &r, d, NO_BUDGET), 0));
	cr_assert(eq(sz, run_at(&w, &r, b, NO_BUDGET), 1));
	cr_assert(eq(u64, t.fired_at, b));
	cr_assert(eq(int, dl_wheel_pending(&never.e), 1));
	cr_assert(eq(sz, run_at(&w, &r, b + tm * 1000, NO_BUDGET), 0));
	dl_wheel_del(&w, &never.e);
	cr_assert(eq(sz, dl_wheel_count(&w), 0));

	/* UINT64_MAX at a 1 ms tick is accepted, kept and deletable. */
	dl_wheel_init(&w, 1, 0);
	rec_init(&r, 1, 0);
	timer_add(&w, &never, UINT64_MAX);
	cr_assert(eq(sz, run_at(&w, &r, 1000000000000u, NO_BUDGET), 0));
	cr_assert(eq(int, dl_wheel_pending(&never.e), 1));
	cr_assert(gt(i64, dl_wheel_timeout(&w, 1000000000000u), 0));
	dl_wheel_del(&w, &never.e);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000000000000u), -1));
}

Test(wheel, jump_of_a_billion_ticks_fires_all_in_order)
{
	enum { N = 32 };
	const uint64_t far = 1000000000u;
	struct timer t[N + 1];
	struct dl_wheel w;
	struct rec r;
	size_t i;

	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 1, 0);
	rec_init(&r, 1, 0);
	for (i = 0; i < N; i++)
		timer_add(&w, &t[i], 1 + rnd_below(far));
	timer_add(&w, &t[N], far + 1);
	cr_assert(eq(sz, run_at(&w, &r, far, NO_BUDGET), N));
	cr_assert(eq(sz, r.out_of_order, 0));
	cr_assert(eq(sz, dl_wheel_count(&w), 1));
	cr_assert(eq(i64, dl_wheel_timeout(&w, far), 1));
	cr_assert(eq(sz, run_at(&w, &r, far + 1, NO_BUDGET), 1));
	cr_assert(eq(u64, t[N].fired_at, far + 1));
}

/* The cascade at a level-0 wrap must run even when the next level-0 entry
 * is the tick right after it and nothing comes before. */
Test(wheel, cascade_just_before_next_level0_entry_is_not_skipped)
{
	static const uint64_t spans[] = {L1_SPAN, L2_SPAN, L3_SPAN};
	size_t k;

	for (k = 0; k < 3; k++) {
		const uint64_t c = 4 * spans[k]; /* a cascade point */
		struct timer up, low;
		struct dl_wheel w;
		struct rec r;

		memset(&up, 0, sizeof(up));
		memset(&low, 0, sizeof(low));
		dl_wheel_init(&w, 1, 0);
		rec_init(&r, 1, 0);
		timer_add(&w, &up, c + 100); /* in level k + 1 */
		run_at(&w, &r, c - 10, NO_BUDGET);
		timer_add(&w, &low, c + 1); /* in level 0 */
		cr_assert(eq(sz, run_at(&w, &r, c + 1, NO_BUDGET), 1));
		cr_assert(eq(uint, low.fires, 1));
		cr_assert(eq(sz, run_at(&w, &r, c + 99, NO_BUDGET), 0));
		cr_assert(eq(sz, run_at(&w, &r, c + 100, NO_BUDGET), 1),
			  "span %llu", (unsigned long long)spans[k]);
		cr_assert(eq(u64, up.fired_at, c + 100));
	}
}

/* ---- timeout ------------------------------------------------------------ */

Test(wheel, timeout_is_zero_when_something_is_due)
{
	struct timer t[3];
	struct dl_wheel w;
	struct rec r;

	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 10, 1000);
	rec_init(&r, 10, 1000);
	timer_add(&w, &t[0], 900); /* in the past: due list */
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000), 0));
	run_at(&w, &r, 1000, NO_BUDGET);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000), -1));

	/* Reached by the clock but not run yet. */
	timer_add(&w, &t[1], 1050);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000), 50));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1050), 0));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 99999), 0));

	/* Left on the due list by the budget. */
	timer_add(&w, &t[2], 1050);
	cr_assert(eq(sz, run_at(&w, &r, 1050, 1), 1));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1050), 0));
	cr_assert(eq(sz, run_at(&w, &r, 1050, 1), 1));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1050), -1));
}

Test(wheel, timeout_is_exact_distance_to_next_level0_entry)
{
	struct timer t[3];
	struct dl_wheel w;

	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 1, 1000);
	timer_add(&w, &t[0], 1200);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000), 200));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1040), 160));
	timer_add(&w, &t[1], 1100);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000), 100));
	dl_wheel_del(&w, &t[1].e);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1000), 200));

	/* Deadlines off the tick grid count to the tick boundary. */
	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 10, 1003);
	timer_add(&w, &t[2], 1095);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1003), 97));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1010), 90));
	timer_add(&w, &t[0], 1061);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 1010), 60));

	/* Slot indices wrap: the next entry sits in a lower slot. */
	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 1, 250);
	timer_add(&w, &t[0], 260);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 250), 10));
}

/* Sleeping exactly as long as the timeout says, then running, fires every
 * entry at its tick boundary: the timeout never overshoots an entry, even
 * when it stops at cascade points on the way. */
Test(wheel, timeout_never_passes_an_entry_across_cascades)
{
	static const uint64_t ticks[] = {1, 7};
	static const uint64_t starts[] = {777, ((uint64_t)1 << 40) + 3};
	enum { N = 200 };
	size_t k, s, i, steps;

	for (k = 0; k < 2; k++) {
		for (s = 0; s < 2; s++) {
			uint64_t tm = ticks[k], start = starts[s], now = start;
			struct timer t[N];
			struct dl_wheel w;
			struct rec r;
			int64_t to;

			memset(t, 0, sizeof(t));
			dl_wheel_init(&w, tm, start);
			rec_init(&r, tm, start);
			for (i = 0; i < N; i++)
				timer_add(&w, &t[i],
					  start + 1 + tm * rnd_distance() +
						  rnd_below(tm));
			timer_add(&w, &t[0], start + 1000000000000u);
			for (steps = 0; (to = dl_wheel_timeout(&w, now)) >= 0;
			     steps++) {
				cr_assert(lt(sz, steps, 100000));
				now += (uint64_t)to;
				run_at(&w, &r, now, NO_BUDGET);
			}
			cr_assert(eq(sz, r.fired, N));
			for (i = 0; i < N; i++) {
				assert_on_time(&t[i], tm, i);
				cr_assert(eq(u64, t[i].fired_at,
					     boundary(t[i].deadline, tm)),
					  "tick %llu, timer %zu",
					  (unsigned long long)tm, i);
			}
		}
	}
}

/* ---- past deadlines and moves ------------------------------------------- */

Test(wheel, past_deadlines_fire_on_next_run)
{
	struct timer t[4];
	struct dl_wheel w;
	struct rec r;

	memset(t, 0, sizeof(t));
	dl_wheel_init(&w, 10, 1000);
	rec_init(&r, 10, 1000);
	run_at(&w, &r, 5000, NO_BUDGET);
	timer_add(&w, &t[0], 10);
	timer_add(&w, &t[1], 0);
	timer_add(&w, &t[2], 5000); /* exactly now */
	timer_add(&w, &t[3], 5001); /* inside the current tick */
	cr_assert(eq(sz, dl_wheel_count(&w), 4));
	cr_assert(eq(sz, run_at(&w, &r, 5000, NO_BUDGET), 3));
	cr_assert(eq(uint, t[0].fires + t[1].fires + t[2].fires, 3));
	cr_assert(eq(uint, t[3].fires, 0));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 5000), 10));
	cr_assert(eq(sz, run_at(&w, &r, 5009, NO_BUDGET), 0));
	cr_assert(eq(sz, run_at(&w, &r, 5010, NO_BUDGET), 1));

	/* Right after init the same holds. */
	dl_wheel_init(&w, 1, 300);
	timer_add(&w, &t[0], 300);
	cr_assert(eq(sz, dl_wheel_run(&w, 300, NO_BUDGET, NULL, NULL), 1));
}

Test(wheel, add_moves_a_pending_entry)
{
	struct timer t;
	struct dl_wheel w;
	struct rec r;
	uint64_t now;

	memset(&t, 0, sizeof(t));
	dl_wheel_init(&w, 1, 0);
	rec_init(&r, 1, 0);

	/* Later: from level 0 to level 1. */
	timer_add(&w, &t, 100);
	timer_add(&w, &t, 500);
	cr_assert(eq(sz, dl_wheel_count(&w), 1));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 0), 256));
	for (now = 1; now <= 600; now++)
		run_at(&w, &r, now, NO_BUDGET);
	cr_assert(eq(uint, t.fires, 1));
	cr_assert(eq(u64, t.fired_at, 500));

	/* Earlier: from level 2 to level 0. */
	timer_add(&w, &t, 600 + 50000);
	timer_add(&w, &t, 650);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 600), 50));
	cr_assert(eq(sz, run_at(&w, &r, 650, NO_BUDGET), 1));
	cr_assert(eq(sz, run_at(&w, &r, 60000, NO_BUDGET), 0));
	cr_assert(eq(uint, t.fires, 2));

	/* From the due list back into the future. */
	timer_add(&w, &t, 10);
	cr_assert(eq(i64, dl_wheel_timeout(&w, 60000), 0));
	timer_add(&w, &t, 60100);
	cr_assert(eq(sz, dl_wheel_count(&w), 1));
	cr_assert(eq(i64, dl_wheel_timeout(&w, 60000), 100));
	cr_assert(eq(sz, run_at(&w, &r, 60099, NO_BUDGET), 0));
	cr_assert(eq(sz, run_at(&w, &r, 60100, NO_BUDGET), 1));
	cr_assert(eq(sz, dl_wheel_count(&w), 0));
}

/* ---- against a model ---------------------------------------------------- */

/* Random adds, deletes, moves and runs with jumps of every size, checked
 * after each run against a plain array: exactly the pending timers whose
 * boundary the clock reached have fired, and the timeout never passes the
 * earliest boundary. */
Test(wheel, random_operations_match_a_simple_model)
{
	static const uint64_t ticks[] = {1, 7};
	enum { N = 400, OPS = 30000 };
	size_t k, op, i;

	for (k = 0; k < 2; k++) {
		uint64_t tm = ticks[k], now = ((uint64_t)1 << 33) + 5;
		struct timer t[N];
		int model[N];
		struct dl_wheel w;
		struct rec r;

		memset(t, 0, sizeof(t));
		memset(model, 0, sizeof(model));
		dl_wheel_init(&w, tm, now);
		rec_init(&r, tm, now);
		for (op = 0; op < OPS; op++) {
			uint64_t roll = rnd_below(100), first = UINT64_MAX;
			size_t pending = 0, fired_before = r.fired;
			int64_t to;

			i = rnd_below(N);
			if (roll < 45) {
				uint64_t d;

				if (roll < 5)
					d = now - rnd_below(1000);
				else if (roll < 25)
					d = rnd_near_cascade(now, tm);
				else
					d = now + tm * rnd_distance() +
					    rnd_below(tm);

				timer_add(&w, &t[i], d);
				t[i].was_past = boundary(d, tm) <= now;
				model[i] = 1;
				continue;
			}
			if (roll < 60) {
				dl_wheel_del(&w, &t[i].e);
				model[i] = 0;
				continue;
			}
			if (roll < 90)
				now += rnd_below(300 * tm);
			else if (roll < 98)
				now += rnd_below(L3_SPAN * tm);
			else
				now += rnd_below(2 * TOP_SPAN * tm);
			r.last_key = 0;
			run_at(&w, &r, now, NO_BUDGET);
			for (i = 0; i < N; i++) {
				uint64_t b = boundary(t[i].deadline, tm);

				if (model[i] && b <= now) {
					cr_assert(eq(int,
						     dl_wheel_pending(&t[i].e),
						     0),
						  "op %zu timer %zu", op, i);
					cr_assert(eq(u64, t[i].fired_at, now));
					model[i] = 0;
				} else if (model[i]) {
					cr_assert(eq(int,
						     dl_wheel_pending(&t[i].e),
						     1),
						  "op %zu timer %zu", op, i);
					pending++;
					if (b < first)
						first = b;
				}
			}
			cr_assert(eq(sz, dl_wheel_count(&w), pending));
			cr_assert(eq(sz, r.out_of_order, 0));
			cr_assert(ge(sz, r.fired, fired_before));
			to = dl_wheel_timeout(&w, now);
			if (pending == 0)
				cr_assert(eq(i64, to, -1));
			else
				cr_assert(le(u64, now + (uint64_t)to, first),
					  "timeout %lld", (long long)to);
		}
	}
}
