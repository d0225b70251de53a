/* SPDX-License-Identifier: MIT */
/*
 * record.c -- lock records for Redis (see record.h).
 *
 * The parser is as strict as the request parser: a record it cannot read
 * fully stops the daemon's start-up rather than being half-restored, since
 * a lease silently dropped is a lock granted twice.
 */
#include "server/record.h"

#include <stdlib.h>
#include <string.h>

static void add_u64(struct dl_buf *b, uint64_t v)
{
	b->len += dl_u64_to_dec(v, b->p + b->len);
}

static void add_str(struct dl_buf *b, const char *p, size_t n)
{
	memcpy(b->p + b->len, p, n);
	b->len += n;
}

static uint64_t to_wall(uint64_t mono, int64_t off)
{
	int64_t w = (int64_t)mono + off;

	return w < 0 ? 0 : (uint64_t)w;
}

/* Longest H or W line: letter, 4 numbers, owner, tag, separators. */
#define LINE_ROOM (2 + 4 * 21 + DL_OWNER_MAX + 4 + DL_TAG_MAX + 2)

int dl_record_format(const struct dl_lock *lk, int64_t wall_off,
		     struct dl_buf *b)
{
	const struct dl_lease *l;
	const struct dl_waiter *w;
	struct dl_str o;

	b->len = 0;
	if (dl_buf_reserve(b, sizeof(DL_RECORD_MAGIC) +
				      (size_t)(lk->nholders + lk->nwaiters) *
					      LINE_ROOM))
		return DL_ENOMEM;
	add_str(b, DL_RECORD_MAGIC, sizeof(DL_RECORD_MAGIC) - 1);
	for (l = lk->holders; l; l = l->next) {
		add_str(b, "\nH ", 3);
		add_u64(b, l->token);
		add_str(b, " ", 1);
		add_u64(b, to_wall(l->timer.expires, wall_off));
		add_str(b, " ", 1);
		add_u64(b, l->count);
		add_str(b, " ", 1);
		add_u64(b, l->ttl_ms);
		add_str(b, " ", 1);
		o = dl_owner_id(l->owner);
		add_str(b, o.p, o.len);
		if (l->tag) {
			add_str(b, " id=", 4);
			add_str(b, l->tag, strlen(l->tag));
		}
	}
	for (w = lk->qhead; w; w = w->qnext) {
		add_str(b, "\nW ", 3);
		add_u64(b, w->ttl_ms);
		add_str(b, " ", 1);
		if (w->wait_deadline == UINT64_MAX)
			add_str(b, "inf", 3);
		else
			add_u64(b, to_wall(w->wait_deadline, wall_off));
		add_str(b, " ", 1);
		o = dl_owner_id(w->owner);
		add_str(b, o.p, o.len);
		if (w->tag_len) {
			add_str(b, " id=", 4);
			add_str(b, w->tag, w->tag_len);
		}
	}
	return 0;
}

/* Split one line into at most `max` space-separated words. */
static int split(const char *p, const char *end, struct dl_str *w, int max)
{
	int n = 0;
	const char *s;

	while (p < end) {
		if (n == max)
			return -1;
		s = p;
		while (p < end && *p != ' ')
			p++;
		if (p == s)
			return -1; /* empty word: double space */
		w[n++] = (struct dl_str){s, (size_t)(p - s)};
		if (p < end)
			p++;
	}
	return n;
}

static int num(struct dl_str s, uint64_t *v)
{
	return dl_parse_u64(s.p, s.len, v);
}

static int tag_of(const struct dl_str *w, int n, int at, struct dl_str *tag)
{
	*tag = DL_STR_NULL;
	if (n == at)
		return 0;
	if (n != at + 1 || w[at].len < 4 || memcmp(w[at].p, "id=", 3) != 0)
		return -1;
	*tag = (struct dl_str){w[at].p + 3, w[at].len - 3};
	return dl_check_tag(tag->p, tag->len) ? -1 : 0;
}

int dl_record_parse(const char *text, size_t len,
		    int (*cb)(const struct dl_record_item *it, void *arg),
		    void *arg, const char **why)
{
	const char *p = text, *end = text + len, *eol;
	struct dl_record_item it;
	struct dl_str w[8];
	size_t mlen = sizeof(DL_RECORD_MAGIC) - 1;
	int n, r;

	*why = "bad version line";
	if (len < mlen || memcmp(text, DL_RECORD_MAGIC, mlen) != 0 ||
	    (len > mlen && text[mlen] != '\n'))
		return DL_EPROTO;
	p += mlen;
	while (p < end) {
		p++; /* the LF */
		eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		memset(&it, 0, sizeof(it));
		n = split(p, eol, w, 8);
		*why = "bad holder line";
		if (n >= 6 && w[0].len == 1 && w[0].p[0] == 'H') {
			it.kind = 'H';
			if (num(w[1], &it.token) || num(w[2], &it.deadline) ||
			    num(w[3], &it.count) || num(w[4], &it.ttl_ms) ||
			    tag_of(w, n, 6, &it.tag))
				return DL_EPROTO;
			it.owner = w[5];
		} else if (n >= 4 && w[0].len == 1 && w[0].p[0] == 'W') {
			*why = "bad waiter line";
			it.kind = 'W';
			if (w[2].len == 3 && memcmp(w[2].p, "inf", 3) == 0)
				it.deadline = UINT64_MAX;
			else if (num(w[2], &it.deadline))
				return DL_EPROTO;
			if (num(w[1], &it.ttl_ms) || tag_of(w, n, 4, &it.tag))
				return DL_EPROTO;
			it.owner = w[3];
		} else {
			*why = "unknown line";
			return DL_EPROTO;
		}
		*why = "bad owner";
		if (dl_check_owner(it.owner.p, it.owner.len))
			return DL_EPROTO;
		*why = NULL;
		if ((r = cb(&it, arg)) != 0)
			return r;
		p = eol;
	}
	*why = NULL;
	return 0;
}
