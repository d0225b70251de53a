/* SPDX-License-Identifier: MIT */
/*
 * held.c -- the lines of one connection that wait for durability
 * (held.h: the queue, and the life of a durable reply).
 */
#include "server/held.h"

#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"

int dl_heldq_add(struct dl_heldq *q, const char *text, size_t len,
		 const struct dl_line *line, uint64_t open_epoch)
{
	struct dl_held *h;
	size_t cap;

	if (q->n == q->cap) {
		cap = q->cap ? q->cap * 2 : 8;
		h = realloc(q->v, cap * sizeof(*h));
		if (!h)
			return DL_ENOMEM;
		q->v = h;
		q->cap = cap;
	}
	if (dl_buf_add(&q->text, text, len))
		return DL_ENOMEM;
	h = &q->v[q->n];
	h->line = *line;
	/* Lines stay in order: one that needs no durability waits for the
	 * epoch of the held line before it. */
	h->epoch =
		line->durable || q->n == 0 ? open_epoch : q->v[q->n - 1].epoch;
	h->off = q->text.len - len;
	h->len = len;
	q->n++;
	return 0;
}

size_t dl_heldq_covered(const struct dl_heldq *q, uint64_t durable)
{
	size_t i;

	for (i = 0; i < q->n && q->v[i].epoch <= durable; i++)
		;
	return i;
}

const char *dl_heldq_text(const struct dl_heldq *q, size_t i)
{
	return q->text.p + q->v[i].off;
}

/* What remains of the lease a line states, at `now`: of the deadline it
 * stated, and of the lease as the table has it (gone: 0). No side
 * effects on the table. */
static uint64_t held_left(const struct dl_held *h, const char *text,
			  struct dl_locktab *tab, uint64_t now)
{
	const struct dl_line *l = &h->line;
	struct dl_str name = {text + l->name_off, l->name_len};
	uint64_t left = l->deadline > now ? l->deadline - now : 0;
	uint64_t lease = dl_locktab_remaining(tab, name, l->token);

	return lease < left ? lease : left;
}

int dl_heldq_emit(const struct dl_heldq *q, size_t i, struct dl_locktab *tab,
		  uint64_t now, struct dl_buf *out)
{
	const struct dl_held *h = &q->v[i];
	const struct dl_line *l = &h->line;
	const char *t = dl_heldq_text(q, i);
	char num[24];
	size_t n, rest;

	/* the lines that state a lease's remaining TTL (GRANTED,
	 * REFRESHED, * EXPIRING): cmd.c noted where (fmt_ttl) */
	if (l->ttl_len == 0)
		return dl_buf_add(out, t, h->len);
	n = dl_u64_to_dec(held_left(h, t, tab, now), num);
	rest = l->ttl_off + l->ttl_len;
	if (dl_buf_add(out, t, l->ttl_off) || dl_buf_add(out, num, n) ||
	    dl_buf_add(out, t + rest, h->len - rest))
		return DL_ENOMEM;
	return 0;
}

void dl_heldq_drop(struct dl_heldq *q, size_t n)
{
	size_t i, cut;

	if (n == 0)
		return;
	cut = n < q->n ? q->v[n].off : q->text.len;
	q->n -= n;
	memmove(q->v, q->v + n, q->n * sizeof(*q->v));
	for (i = 0; i < q->n; i++)
		q->v[i].off -= cut;
	memmove(q->text.p, q->text.p + cut, q->text.len - cut);
	q->text.len -= cut;
	if (q->text.len == 0 && q->text.cap > DL_OUT_KEEP) {
		free(q->text.p);
		q->text.p = NULL;
		q->text.cap = 0;
	}
}

/* Every line, moved out: *q is left empty. */
static struct dl_heldq heldq_take(struct dl_heldq *q)
{
	struct dl_heldq all = *q;

	memset(q, 0, sizeof(*q));
	return all;
}

void dl_heldq_withdraw(struct dl_heldq *q, struct dl_conn *c, dl_held_fn fn,
		       dl_held_out out, void *ctx)
{
	char buf[DL_REPLY_MAX];
	struct dl_heldq all = heldq_take(q);
	const char *text;
	size_t i, n;

	for (i = 0; i < all.n; i++) {
		text = dl_heldq_text(&all, i);
		n = fn(c, &all.v[i].line, text, all.v[i].len, buf);
		if (n == DL_HELD_KEEP) {
			if (out(ctx, text, all.v[i].len, &all.v[i].line))
				break;
		} else if (n && out(ctx, buf, n, NULL)) {
			break;
		}
	}
	dl_heldq_free(&all);
}

size_t dl_heldq_memory(const struct dl_heldq *q)
{
	return q->text.cap + q->cap * sizeof(*q->v);
}

void dl_heldq_free(struct dl_heldq *q)
{
	free(q->text.p);
	free(q->v);
	memset(q, 0, sizeof(*q));
}
