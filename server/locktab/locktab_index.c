/* SPDX-License-Identifier: MIT */
/*
 * locktab_index.c -- the lock table's names in byte order, for LOCKS: a
 * crit-bit tree (a binary radix tree that branches only where names
 * differ) over every lock of the table (locktab_private.h, the index).
 *
 * Owns: its internal nodes (struct dl__cb), one per lock but the first,
 * allocated here; the leaves are the locks themselves, and t->idx is the
 * root. A pointer to a node has its lowest bit set, one to a lock not
 * (both are at least 8-byte aligned).
 *
 * Why: a LOCKS page was one pass over every lock, during which the daemon
 * served nobody (found from outside: a user listing its own prefix of a
 * 300,000-lock table raised another user's PING p99 from 0.7 to 38 ms).
 * The tree finds the names under a prefix, and after a given name, in
 * O(length of a name) steps, whatever the table holds: a page costs its
 * own locks plus a path. Each node counts the listed locks below it
 * (lk->listed: with a holder or a waiter, what LOCKS shows), so that the
 * page's `more` is a sum of counts, not a walk.
 *
 * Cost: a node of 24 bytes (a 32-byte malloc chunk) per lock, and a walk
 * down the tree when a lock comes or goes and when one starts or stops
 * being listed (its first holder or waiter, its last).
 *
 * Order: a name shorter than another it begins is first (the bytes after
 * a name read as 0, and names have no 0 byte): byte order, as memcmp then
 * length (name_cmp in locktab_ops.c).
 */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/locktab/locktab.h"
#include "server/locktab/locktab_private.h"

struct dl__cb {
	void *child[2];	   /* tagged: see above */
	uint32_t count;	   /* listed locks below */
	uint8_t byte;	   /* the first byte where the names below differ */
	uint8_t otherbits; /* every bit set but the first that differs */
};

_Static_assert(DL_NAME_MAX <= 255, "a node's byte is a uint8_t");

static int is_node(const void *p)
{
	return ((uintptr_t)p & 1) != 0;
}

static struct dl__cb *node(const void *p)
{
	return (struct dl__cb *)((uintptr_t)p - 1);
}

static void *tag(struct dl__cb *n)
{
	return (void *)((uintptr_t)n + 1);
}

/* Byte i of a name of len bytes; 0 past its end. */
static uint8_t byte_at(const char *name, size_t len, size_t i)
{
	return i < len ? (uint8_t)name[i] : 0;
}

/* Which child of n a name takes. */
static int dir_of(const struct dl__cb *n, const char *name, size_t len)
{
	return (1 + (n->otherbits | byte_at(name, len, n->byte))) >> 8;
}

static uint32_t count_of(const void *p)
{
	return is_node(p) ? node(p)->count
			  : ((const struct dl_lock *)p)->listed;
}

int dl__index_insert(struct dl_locktab *t, struct dl_lock *lk)
{
	const char *u = lk->name;
	size_t ulen = lk->hn.len, b;
	const struct dl_lock *best;
	struct dl__cb *n;
	void **where, *p;
	uint32_t bits;
	int newdir;

	if (!t->idx) {
		t->idx = lk;
		return 0;
	}
	/* the lock the name would meet: it shares the most of its bits
	 * with the new name of all those the path tests */
	for (p = t->idx; is_node(p);)
		p = node(p)->child[dir_of(node(p), u, ulen)];
	best = p;
	for (b = 0; b <= ulen; b++)
		if (byte_at(best->name, best->hn.len, b) != byte_at(u, ulen, b))
			break;
	if (b > ulen)
		return DL_EBADARG; /* in already: never, a lock is one name */
	bits = byte_at(best->name, best->hn.len, b) ^ byte_at(u, ulen, b);
	bits |= bits >> 1;
	bits |= bits >> 2;
	bits |= bits >> 4;
	bits = (bits & ~(bits >> 1)) ^ 255;
	if (!(n = malloc(sizeof(*n))))
		return DL_ENOMEM;
	n->byte = (uint8_t)b;
	n->otherbits = (uint8_t)bits;
	newdir = (1 + (bits | byte_at(best->name, best->hn.len, b))) >> 8;
	/* where the new node goes: above the first node that tests a later
	 * bit; those it passes count the new lock */
	for (where = &t->idx; is_node(*where);
	     where = &node(p)->child[dir_of(node(p), u, ulen)]) {
		p = *where;
		if (node(p)->byte > b ||
		    (node(p)->byte == b && node(p)->otherbits > bits))
			break;
		node(p)->count += lk->listed;
	}
	n->child[newdir] = *where;
	n->child[1 - newdir] = lk;
	n->count = count_of(*where) + lk->listed;
	*where = tag(n);
	return 0;
}

void dl__index_remove(struct dl_locktab *t, struct dl_lock *lk)
{
	void **where = &t->idx, **parent = NULL;
	struct dl__cb *q = NULL;
	int dir = 0;

	if (lk->listed)
		dl__index_listed(t, lk, 0);
	while (is_node(*where)) {
		parent = where;
		q = node(*where);
		dir = dir_of(q, lk->name, lk->hn.len);
		where = &q->child[dir];
	}
	assert(*where == lk);
	if (*where != lk)
		return;
	if (!parent) {
		t->idx = NULL;
		return;
	}
	*parent = q->child[1 - dir];
	free(q);
}

void dl__index_listed(struct dl_locktab *t, struct dl_lock *lk, int listed)
{
	void *p;

	if (lk->listed == (unsigned)!!listed)
		return;
	lk->listed = !!listed;
	for (p = t->idx; is_node(p);
	     p = node(p)->child[dir_of(node(p), lk->name, lk->hn.len)]) {
		if (listed)
			node(p)->count++;
		else
			node(p)->count--;
	}
}

static void free_below(void *p)
{
	if (!is_node(p))
		return;
	free_below(node(p)->child[0]);
	free_below(node(p)->child[1]);
	free(node(p));
}

void dl__index_free_all(struct dl_locktab *t)
{
	if (t->idx)
		free_below(t->idx);
	t->idx = NULL;
}

/* ---- walks -------------------------------------------------------------- */

/* The subtree of the names that begin with prefix, NULL if none. */
static void *subtree(const struct dl_locktab *t, struct dl_str prefix)
{
	void *p = t->idx, *top;
	const struct dl_lock *any;

	if (!p)
		return NULL;
	while (is_node(p) && node(p)->byte < prefix.len)
		p = node(p)->child[dir_of(node(p), prefix.p, prefix.len)];
	top = p;
	while (is_node(p)) /* below, the names share the prefix's bytes */
		p = node(p)->child[0];
	any = p;
	if (prefix.len && (any->hn.len < prefix.len ||
			   memcmp(any->name, prefix.p, prefix.len)))
		return NULL;
	return top;
}

/* Every listed lock of p's subtree in order, to w->each or, while there
 * is room, to the page (then the rest only counted). */
static void visit(void *p, struct dl_index_walk *w)
{
	if (!is_node(p)) {
		const struct dl_lock *lk = p;

		if (!lk->listed)
			return;
		if (w->each)
			w->each(lk, w->arg);
		else if (w->n < w->limit)
			w->page[w->n++] = lk;
		else
			w->more++;
		return;
	}
	if (!w->each && w->n >= w->limit) {
		w->more += node(p)->count; /* after the page: counted */
		return;
	}
	visit(node(p)->child[0], w);
	visit(node(p)->child[1], w);
}

/* The locks of `top`'s subtree whose names sort after `after`, in order:
 * down the path `after` would take to a lock L, then back up. The first
 * bit where L and `after` differ says on which side of `after` the whole
 * subtree below it lies (its names share that bit with L); each subtree
 * branching off the path to the right of it is after `after`. */
static void visit_after(void *top, struct dl_str after, struct dl_index_walk *w)
{
	void *path[8 * (DL_NAME_MAX + 1) + 1];
	size_t depth = 0, b;
	const struct dl_lock *l;
	void *p;
	uint32_t bits;
	int lbit;

	for (p = top; is_node(p);
	     p = node(p)->child[dir_of(node(p), after.p, after.len)])
		path[depth++] = p;
	l = p;
	for (b = 0; b <= after.len; b++)
		if (byte_at(l->name, l->hn.len, b) !=
		    byte_at(after.p, after.len, b))
			break;
	if (b > after.len) { /* L is `after`: what follows it */
		lbit = 0;
		bits = 0;
	} else {
		bits = byte_at(l->name, l->hn.len, b) ^
		       byte_at(after.p, after.len, b);
		bits |= bits >> 1;
		bits |= bits >> 2;
		bits |= bits >> 4;
		bits = (bits & ~(bits >> 1)) ^ 255;
		/* 1: L's names are after `after` */
		lbit = (1 + (bits | byte_at(l->name, l->hn.len, b))) >> 8;
	}
	/* up to the first node that tests a bit before the one they differ
	 * at: the subtree below it is all on L's side */
	while (depth > 0 && b <= after.len &&
	       (node(path[depth - 1])->byte > b ||
		(node(path[depth - 1])->byte == b &&
		 node(path[depth - 1])->otherbits > bits)))
		depth--;
	if (lbit) /* the subtree below path[depth - 1] on the path */
		visit(depth ? node(path[depth - 1])
				      ->child[dir_of(node(path[depth - 1]),
						     after.p, after.len)]
			    : top,
		      w);
	/* then, bottom up, what branches off the path to its right */
	while (depth > 0) {
		struct dl__cb *q = node(path[--depth]);

		if (dir_of(q, after.p, after.len) == 0)
			visit(q->child[1], w);
	}
}

void dl__index_walk(const struct dl_locktab *t, struct dl_str prefix,
		    struct dl_str after, struct dl_index_walk *w)
{
	void *top = subtree(t, prefix);

	if (!top)
		return;
	if (after.len)
		visit_after(top, after, w);
	else
		visit(top, w);
}

/* ---- invariants (dl_locktab_verify) -------------------------------------- */

struct check {
	const struct dl_locktab *t;
	const struct dl_lock *last; /* the lock before, in order */
	uint64_t leaves;
	const char *why;
};

/* p's listed count, or UINT64_MAX (c->why says what is wrong). */
static uint64_t check_below(void *p, struct check *c, const struct dl__cb *up,
			    int dir)
{
	uint64_t l, r;

	if (!is_node(p)) {
		const struct dl_lock *lk = p;

		if (up && dir_of(up, lk->name, lk->hn.len) != dir)
			c->why = "a lock on the wrong side of a node";
		else if (c->last && strcmp(c->last->name, lk->name) >= 0)
			c->why = "the locks are not in byte order";
		else if (lk->listed != (lk->holders || lk->qhead))
			c->why = "a lock's listed bit is wrong";
		else if (dl__lock_find(c->t, (struct dl_str){lk->name,
							     lk->hn.len}) != lk)
			c->why = "a lock of the index is not the table's";
		if (c->why)
			return UINT64_MAX;
		c->last = lk;
		c->leaves++;
		return lk->listed;
	}
	if (up && (node(p)->byte < up->byte ||
		   (node(p)->byte == up->byte &&
		    node(p)->otherbits <= up->otherbits))) {
		c->why = "a node tests a bit before its parent's";
		return UINT64_MAX;
	}
	if ((l = check_below(node(p)->child[0], c, node(p), 0)) == UINT64_MAX ||
	    (r = check_below(node(p)->child[1], c, node(p), 1)) == UINT64_MAX)
		return UINT64_MAX;
	if (node(p)->count != l + r) {
		c->why = "a node's count is wrong";
		return UINT64_MAX;
	}
	return l + r;
}

const char *dl__index_check(const struct dl_locktab *t, uint64_t locks)
{
	struct check c = {t, NULL, 0, NULL};

	if (t->idx && check_below(t->idx, &c, NULL, 0) == UINT64_MAX)
		return c.why;
	return c.leaves == locks ? NULL : "the index has not every lock";
}
