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

/* Longest H or W line: letter, 4 numbers, mode, owner, proof, warning,
 * tag, separators. */
#define LINE_ROOM                                                              \
	(2 + 4 * 21 + 2 + DL_OWNER_KEY_MAX + 3 + 2 * DL_OWNER_PROOF_LEN +      \
	 6 + 21 + 4 + DL_TAG_MAX + 2)

/* Version 1 can say it: an exclusive lock, nobody shared, no delay. */
static int plain(const struct dl_lock *lk)
{
	const struct dl_waiter *w;

	if (lk->limit != 1 || lk->has_delay ||
	    (lk->holders && lk->holders->shared))
		return 0;
	for (w = lk->qhead; w; w = w->qnext)
		if (w->shared)
			return 0;
	return 1;
}

static void add_mode(struct dl_buf *b, int v2, int shared)
{
	if (v2)
		add_str(b, shared ? " s" : " x", 2);
}

/* " k=<hex>" when the owner has a proof. */
static void add_proof(struct dl_buf *b, const struct dl_owner *o)
{
	static const char hex[] = "0123456789abcdef";
	const uint8_t *p = dl_owner_proof(o);
	char t[3 + 2 * DL_OWNER_PROOF_LEN];
	size_t i;

	if (!p)
		return;
	memcpy(t, " k=", 3);
	for (i = 0; i < DL_OWNER_PROOF_LEN; i++) {
		t[3 + 2 * i] = hex[p[i] >> 4];
		t[4 + 2 * i] = hex[p[i] & 15];
	}
	add_str(b, t, sizeof(t));
}

int dl_record_format(const struct dl_locktab *t, const struct dl_lock *lk,
		     int64_t wall_off, struct dl_buf *b)
{
	const struct dl_lease *l;
	const struct dl_waiter *w;
	struct dl_str o;
	uint32_t warn, delay;
	int v2 = !plain(lk);

	b->len = 0;
	if (dl_buf_reserve(b, sizeof(DL_RECORD_MAGIC2) + 8 + 21 + 7 + 21 + 8 +
				      (size_t)(lk->nholders + lk->nwaiters) *
					      LINE_ROOM))
		return DL_ENOMEM;
	if (v2) {
		add_str(b, DL_RECORD_MAGIC2 " limit=",
			sizeof(DL_RECORD_MAGIC2 " limit=") - 1);
		add_u64(b, lk->limit);
		if ((delay = dl_locktab_lock_delay(t, lk, NULL)) != 0) {
			add_str(b, " delay=", 7);
			add_u64(b, delay);
			if (lk->delaying)
				add_str(b, " running", 8);
		}
	} else {
		add_str(b, DL_RECORD_MAGIC, sizeof(DL_RECORD_MAGIC) - 1);
	}
	for (l = lk->holders; l; l = l->next) {
		add_str(b, "\nH ", 3);
		add_u64(b, l->token);
		add_str(b, " ", 1);
		add_u64(b, to_wall(l->timer.expires, wall_off));
		add_str(b, " ", 1);
		add_u64(b, l->count);
		add_str(b, " ", 1);
		add_u64(b, l->ttl_ms);
		add_mode(b, v2, l->shared);
		add_str(b, " ", 1);
		o = dl_owner_id(l->owner);
		add_str(b, o.p, o.len);
		add_proof(b, l->owner);
		/* below its TTL, as a restore wants it: a shortening
		 * applied after a later warn= may leave them crossed (the
		 * warning then fired at once) */
		if ((warn = dl_locktab_lease_warn(t, l)) != 0 &&
		    warn < l->ttl_ms) {
			add_str(b, " warn=", 6);
			add_u64(b, warn);
		}
		if (l->has_tag) {
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
		add_mode(b, v2, w->shared);
		add_str(b, " ", 1);
		o = dl_owner_id(w->owner);
		add_str(b, o.p, o.len);
		add_proof(b, w->owner);
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

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* What may follow the owner: k=<proof, hex>, warn=<ms> (a holder's),
 * then id=<tag>, each optional. */
static int extras_of(const struct dl_str *w, int n, int at,
		     struct dl_record_item *it)
{
	size_t i;
	int hi, lo;

	it->tag = DL_STR_NULL;
	if (at < n && w[at].len == 2 + 2 * DL_OWNER_PROOF_LEN &&
	    memcmp(w[at].p, "k=", 2) == 0) {
		for (i = 0; i < DL_OWNER_PROOF_LEN; i++) {
			hi = hexval(w[at].p[2 + 2 * i]);
			lo = hexval(w[at].p[3 + 2 * i]);
			if (hi < 0 || lo < 0)
				return -1;
			it->proof[i] = (uint8_t)(hi << 4 | lo);
		}
		it->has_proof = 1;
		at++;
	}
	if (it->kind == 'H' && at < n && w[at].len > 5 &&
	    memcmp(w[at].p, "warn=", 5) == 0) {
		if (dl_parse_u64(w[at].p + 5, w[at].len - 5, &it->warn_ms) ||
		    it->warn_ms == 0)
			return -1;
		at++;
	}
	if (n == at)
		return 0;
	if (n != at + 1 || w[at].len < 4 || memcmp(w[at].p, "id=", 3) != 0)
		return -1;
	it->tag = (struct dl_str){w[at].p + 3, w[at].len - 3};
	return dl_check_tag(it->tag.p, it->tag.len) ? -1 : 0;
}


/* "<key><number>" in w, the number within 1..max. */
static int kv_num(struct dl_str w, const char *key, uint64_t max,
		  uint64_t *n)
{
	size_t kl = strlen(key);

	return w.len <= kl || memcmp(w.p, key, kl) != 0 ||
		       dl_parse_u64(w.p + kl, w.len - kl, n) || *n == 0 ||
		       *n > max
		       ? -1
		       : 0;
}

/* The version line: 1, or 2 with the lock's limit and its delay (as a
 * 'D' item in *d, kind 0 when it has none). */
static int parse_version(const char *text, const char *eol, int *v2,
			 struct dl_record_item *d)
{
	size_t len = (size_t)(eol - text), m = sizeof(DL_RECORD_MAGIC) - 1;
	struct dl_str w[4];
	uint64_t n;
	int nw;

	memset(d, 0, sizeof(*d));
	d->limit = 1;
	*v2 = 0;
	if (len == m && memcmp(text, DL_RECORD_MAGIC, m) == 0)
		return 0;
	nw = split(text, eol, w, 4);
	if (nw < 2 || w[0].len != m || memcmp(w[0].p, DL_RECORD_MAGIC2, m) ||
	    kv_num(w[1], "limit=", DL_LIMIT_MAX, &n))
		return -1;
	*v2 = 1;
	d->limit = (uint32_t)n;
	if (nw == 2)
		return 0;
	if (kv_num(w[2], "delay=", DL_LOCK_DELAY_MAX_MS, &d->ttl_ms) ||
	    (nw == 4 && (w[3].len != 7 || memcmp(w[3].p, "running", 7))))
		return -1;
	d->kind = 'D';
	d->delay_running = nw == 4;
	return 0;
}

/* The mode word of a version-2 line. */
static int mode_of(struct dl_str w, uint8_t *shared)
{
	if (w.len != 1 || (w.p[0] != 'x' && w.p[0] != 's'))
		return -1;
	*shared = w.p[0] == 's';
	return 0;
}

int dl_record_parse(const char *text, size_t len,
		    int (*cb)(const struct dl_record_item *it, void *arg),
		    void *arg, const char **why)
{
	const char *p, *end = text + len, *eol;
	struct dl_record_item it, d;
	struct dl_str w[11];
	uint32_t limit;
	int n, r, v2, o;

	*why = "bad version line";
	eol = memchr(text, '\n', len);
	if (!eol)
		eol = end;
	if (parse_version(text, eol, &v2, &d))
		return DL_EPROTO;
	limit = d.limit;
	*why = NULL;
	if (d.kind && (r = cb(&d, arg)) != 0)
		return r;
	p = eol;
	while (p < end) {
		p++; /* the LF */
		eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			eol = end;
		memset(&it, 0, sizeof(it));
		it.limit = limit;
		n = split(p, eol, w, 11);
		*why = "bad holder line";
		if (n >= 6 + v2 && w[0].len == 1 && w[0].p[0] == 'H') {
			it.kind = 'H';
			o = 5 + v2;
			if (num(w[1], &it.token) || num(w[2], &it.deadline) ||
			    num(w[3], &it.count) || num(w[4], &it.ttl_ms) ||
			    (v2 && mode_of(w[5], &it.shared)) ||
			    extras_of(w, n, o + 1, &it))
				return DL_EPROTO;
			it.owner = w[o];
		} else if (n >= 4 + v2 && w[0].len == 1 && w[0].p[0] == 'W') {
			*why = "bad waiter line";
			it.kind = 'W';
			o = 3 + v2;
			if (w[2].len == 3 && memcmp(w[2].p, "inf", 3) == 0)
				it.deadline = UINT64_MAX;
			else if (num(w[2], &it.deadline))
				return DL_EPROTO;
			if (num(w[1], &it.ttl_ms) ||
			    (v2 && mode_of(w[3], &it.shared)) ||
			    extras_of(w, n, o + 1, &it))
				return DL_EPROTO;
			it.owner = w[o];
		} else {
			*why = "unknown line";
			return DL_EPROTO;
		}
		*why = "bad mode";
		if (it.shared && limit != 1)
			return DL_EPROTO;
		*why = "bad owner";
		if (dl_owner_key_check(it.owner))
			return DL_EPROTO;
		*why = NULL;
		if ((r = cb(&it, arg)) != 0)
			return r;
		p = eol;
	}
	*why = NULL;
	return 0;
}
