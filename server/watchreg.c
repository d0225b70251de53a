/* SPDX-License-Identifier: MIT */
/*
 * watchreg.c -- the watch registry (see watchreg.h).
 *
 * A key is one watched name, or one watched prefix, with the list of its
 * subscriptions; it lives while it has one. A subscription links a key
 * and a watcher, and is on two lists: the key's (doubly linked, so that
 * a watcher leaving costs its own watches only) and the watcher's.
 *
 * Prefix keys live in their own table, and `lens` has bit L set while a
 * prefix of length L is watched (`nlen[L]` counts them): a match looks up
 * the name's first L bytes for each such L, and nothing else.
 *
 * Keys are hashed here, not with dl_hash_bytes(): byte by byte (FNV-1a
 * from a random seed), finished by a mix of the state and the length, so
 * that one pass over a name gives the hash of each of its prefixes. A
 * match costs that pass plus one lookup per watched length, never a hash
 * of each prefix from its start (a pass over the name per watched length).
 */
#include "server/watchreg.h"

#include <stdlib.h>
#include <string.h>

#include "server/locktab/htab.h"

#define LEN_WORDS ((DL_NAME_MAX + 1 + 63) / 64)

struct dl_wkey {
	struct dl_wsub *subs; /* its subscriptions */
	uint8_t prefix;	      /* a prefix (else a name) */
	struct dl_hnode hn;
	char key[]; /* hn.len bytes (no NUL) */
};

struct dl_wsub {
	struct dl_wkey *key;
	struct dl_watcher *w;
	struct dl_wsub *knext, *kprev; /* the key's subscriptions */
	struct dl_wsub *wnext, *wprev; /* the watcher's */
};

struct dl_watchreg {
	struct dl_htab names, prefixes;
	uint64_t seed;
	uint64_t lens[LEN_WORDS];	/* bit L: a prefix of length L */
	uint32_t nlen[DL_NAME_MAX + 1]; /* prefixes of each length */
	size_t count, max;		/* subscriptions, and their bound */
	uint64_t mark;			/* of the last match */
};

#define FNV_PRIME 0x100000001b3ULL

static uint64_t hash_step(uint64_t h, unsigned char b)
{
	return (h ^ b) * FNV_PRIME;
}

/* The hash of a key of `len` bytes whose pass ended in state h. */
static uint32_t hash_end(uint64_t h, size_t len)
{
	h ^= (uint64_t)len << 56 | len;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	return (uint32_t)h;
}

static uint32_t hash_key(const struct dl_watchreg *r, struct dl_str key)
{
	uint64_t h = r->seed;
	size_t i;

	for (i = 0; i < key.len; i++)
		h = hash_step(h, (unsigned char)key.p[i]);
	return hash_end(h, key.len);
}

struct dl_watchreg *dl_watchreg_new(uint64_t seed, size_t max)
{
	struct dl_watchreg *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	if (dl_htab_init(&r->names) || dl_htab_init(&r->prefixes)) {
		dl_htab_free(&r->names);
		dl_htab_free(&r->prefixes);
		free(r);
		return NULL;
	}
	r->seed = seed;
	r->max = max;
	return r;
}

/* Free every key of h with its subscriptions. */
static void free_keys(struct dl_htab *h)
{
	struct dl_hnode *n, *next;
	struct dl_wkey *k;
	struct dl_wsub *s;
	size_t i;

	for (i = 0; i < dl_htab_slots(h); i++) {
		for (n = *dl_htab_slot(h, i); n; n = next) {
			next = n->next;
			k = (struct dl_wkey *)((char *)n -
					       offsetof(struct dl_wkey, hn));
			while ((s = k->subs) != NULL) {
				k->subs = s->knext;
				free(s);
			}
			free(k);
		}
	}
}

void dl_watchreg_free(struct dl_watchreg *r)
{
	if (!r)
		return;
	free_keys(&r->names);
	free_keys(&r->prefixes);
	dl_htab_free(&r->names);
	dl_htab_free(&r->prefixes);
	free(r);
}

size_t dl_watchreg_count(const struct dl_watchreg *r)
{
	return r->count;
}

static struct dl_htab *table(struct dl_watchreg *r, int prefix)
{
	return prefix ? &r->prefixes : &r->names;
}

static struct dl_wkey *key_find(struct dl_watchreg *r, struct dl_str key,
				int prefix, uint32_t hash)
{
	struct dl_hnode *n = dl_htab_find(table(r, prefix), hash, key);

	return n ? (struct dl_wkey *)((char *)n - offsetof(struct dl_wkey, hn))
		 : NULL;
}

static struct dl_wkey *key_new(struct dl_watchreg *r, struct dl_str key,
			       int prefix)
{
	struct dl_wkey *k = malloc(sizeof(*k) + key.len);

	if (!k)
		return NULL;
	k->subs = NULL;
	k->prefix = prefix ? 1 : 0;
	k->hn.hash = hash_key(r, key);
	k->hn.len = (uint8_t)key.len;
	if (key.len)
		memcpy(k->key, key.p, key.len);
	dl_htab_insert(table(r, prefix), &k->hn);
	if (prefix && r->nlen[key.len]++ == 0)
		r->lens[key.len / 64] |= (uint64_t)1 << (key.len % 64);
	return k;
}

static void key_free(struct dl_watchreg *r, struct dl_wkey *k)
{
	size_t len = k->hn.len;

	dl_htab_remove(table(r, k->prefix), &k->hn);
	if (k->prefix && --r->nlen[len] == 0)
		r->lens[len / 64] &= ~((uint64_t)1 << (len % 64));
	free(k);
}

static void sub_unlink(struct dl_watchreg *r, struct dl_wsub *s)
{
	struct dl_wkey *k = s->key;
	struct dl_watcher *w = s->w;

	if (s->kprev)
		s->kprev->knext = s->knext;
	else
		k->subs = s->knext;
	if (s->knext)
		s->knext->kprev = s->kprev;
	if (s->wprev)
		s->wprev->wnext = s->wnext;
	else
		w->subs = s->wnext;
	if (s->wnext)
		s->wnext->wprev = s->wprev;
	w->n--;
	r->count--;
	free(s);
	if (!k->subs)
		key_free(r, k);
}

/* w's subscription to k, or NULL: a walk of w's watches (a bounded
 * number), not of k's watchers (any number). */
static struct dl_wsub *sub_of(const struct dl_watcher *w,
			      const struct dl_wkey *k)
{
	struct dl_wsub *s;

	for (s = w->subs; s; s = s->wnext)
		if (s->key == k)
			return s;
	return NULL;
}

int dl_watchreg_add(struct dl_watchreg *r, struct dl_watcher *w,
		    struct dl_str key, int prefix, uint32_t own_max)
{
	struct dl_wkey *k;
	struct dl_wsub *s;

	if (key.len > DL_NAME_MAX)
		return DL_EBADARG;
	k = key_find(r, key, prefix, hash_key(r, key));
	if (k && sub_of(w, k))
		return 1;
	if (w->n >= own_max || r->count >= r->max)
		return DL_ELIMIT;
	if (!(s = calloc(1, sizeof(*s))))
		return DL_ENOMEM;
	if (!k && !(k = key_new(r, key, prefix))) {
		free(s);
		return DL_ENOMEM;
	}
	s->key = k;
	s->w = w;
	s->knext = k->subs;
	if (k->subs)
		k->subs->kprev = s;
	k->subs = s;
	s->wnext = w->subs;
	if (w->subs)
		w->subs->wprev = s;
	w->subs = s;
	w->n++;
	r->count++;
	return 0;
}

int dl_watchreg_remove(struct dl_watchreg *r, struct dl_watcher *w,
		       struct dl_str key, int prefix)
{
	struct dl_wkey *k = key.len <= DL_NAME_MAX
				    ? key_find(r, key, prefix, hash_key(r, key))
				    : NULL;
	struct dl_wsub *s = k ? sub_of(w, k) : NULL;

	if (!s)
		return 0;
	sub_unlink(r, s);
	return 1;
}

void dl_watchreg_leave(struct dl_watchreg *r, struct dl_watcher *w)
{
	while (w->subs)
		sub_unlink(r, w->subs);
}

/* Hand k's watchers over, each once per match. */
static size_t key_match(struct dl_watchreg *r, const struct dl_wkey *k,
			dl_watch_fn fn, void *arg)
{
	struct dl_wsub *s;
	size_t n = 0;

	for (s = k->subs; s; s = s->knext) {
		if (s->w->mark == r->mark)
			continue;
		s->w->mark = r->mark;
		fn(s->w, arg);
		n++;
	}
	return n;
}

size_t dl_watchreg_match(struct dl_watchreg *r, struct dl_str name,
			 dl_watch_fn fn, void *arg)
{
	const struct dl_wkey *k;
	uint64_t h = r->seed;
	size_t n = 0, len;

	if (r->count == 0 || name.len > DL_NAME_MAX)
		return 0;
	r->mark++;
	/* one pass: the prefixes of each watched length, then the name */
	for (len = 0;; len++) {
		if ((r->lens[len / 64] >> (len % 64) & 1) &&
		    (k = key_find(r, (struct dl_str){name.p, len}, 1,
				  hash_end(h, len))) != NULL)
			n += key_match(r, k, fn, arg);
		if (len == name.len)
			break;
		h = hash_step(h, (unsigned char)name.p[len]);
	}
	if ((k = key_find(r, name, 0, hash_end(h, len))) != NULL)
		n += key_match(r, k, fn, arg);
	return n;
}
