/* SPDX-License-Identifier: MIT */
/*
 * dlock_route.c -- libdlock over a partitioned dlockd (dlock.h,
 * "Partitions"; PROTOCOL.md, "Partitions" and MAP).
 *
 * A client reads MAP once, when it first connects (dlock__router_start).
 * Epoch 0 -- a daemon without partitions, or one too old to know MAP --
 * changes nothing: the client is what it always was. A map of epoch > 0
 * makes it a router (c->rt): the map (a table of the 16384 slots, each
 * the index of its partition) and, per partition, a *leg*: an ordinary
 * client of this library, made on first use with the router's options,
 * owner id and key, whose server list is the partition's addresses
 * (dlock__leg_connect). Every call about a name is the same call on the
 * leg of the name's partition (dlock__route: the loop in each public
 * call); a lease belongs to the leg that took it (struct dlock__lease c),
 * and dlock_unlock(), dlock_refresh() and dlock_proclaim() go there
 * (dlock__lease_client) -- until its slot moves to another partition,
 * which takes the lease along: then to that partition's leg
 * (dlock_follow.c). Calls without a name, and a name no
 * partition of the map serves, are the router's own first connection's,
 * which is an ordinary client too.
 *
 * MOVED. A leg sent a name to a daemon that does not serve it (the map
 * changed): its call fails with DLOCK_EMOVED and the server's words
 * ("NO MOVED <partition> <addrs> <epoch>") in dlock_last_error(). The
 * router reads MAP again when that epoch is newer than its own (through
 * the leg that was told, else its first connection) and tries again by
 * the new map; otherwise it tries the partition named. At most
 * DLOCK__MOVES_MAX times per call: then the caller gets DLOCK_EMOVED.
 * A client that met no map at first (a daemon that had not read one
 * yet) and is told MOVED reads MAP then, and becomes a router.
 *
 * Threads. The router's state is under rt->mu, never held while a call
 * waits in a leg: the lock order is rt->mu, then a leg's mu (a new
 * address list), then the router's mu (a leg's watch event,
 * dlock_watch.c); the mover's lock (rt->mover: dlock_follow.c, which
 * says the whole order, and the two clients' mu a lease's move holds)
 * is taken last. A partition's entry is never removed (its index stays
 * its own), nor a leg before dlock_close. A routed call holds the
 * router (dlock__hold: dlock_close waits for it) and counts itself on
 * rt->users while it uses a leg, so that closing frees no leg under it;
 * so do a call about a lease (dlock__router_use), which may go from one
 * leg to another, and the mover while it moves one (dlock__lease_home;
 * dlock_close stops the mover before it closes the legs). The mover is
 * part of the router, but only dlock_follow.c touches its fields.
 */
#include "client/lib/dlock_private.h"
#include "proto/slot.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DLOCK__NOBODY 0xffff /* a slot no partition serves */
/* PARTITION: the server answers within 10 s (PROTOCOL.md) */
#define DLOCK__PARTITION_MS 11000
/* A leg that cannot connect has MAP read again, at most this often: the
 * partition's daemons may be elsewhere now. */
#define DLOCK__REREAD_MS 1000
/* A name that moved: the daemon the map names for it may not have read
 * that map yet (it says MOVED, from an older one), or may still be
 * taking the name's locks over (ERR UNAVAILABLE): the call is sent
 * again after a pause of this, doubled each time up to
 * DLOCK__SETTLE_MAX_MS, while its request timeout lasts. A take-over of
 * locks is a few ms; a daemon reads the map every second. */
#define DLOCK__SETTLE_MS     20
#define DLOCK__SETTLE_MAX_MS 250

/* A partition: as MAP said it (addrs, floor, slots), and in the router
 * (addrs, its leg). */
struct dlock__part {
	char id[DLOCK__PART_ID_MAX + 1];
	char *addrs; /* "host:port,..."; "" when none is known */
	uint64_t floor;
	char *slots;		  /* MAP's ranges, joined; NULL: none */
	struct dlock_client *leg; /* router: NULL until first used */
	int making;		  /* router: a thread connects its leg */
};

/* A map as MAP said it. */
struct dlock__map {
	uint64_t epoch;
	int n;
	struct dlock__part part[DLOCK__PARTS_MAX];
};

struct dlock__router {
	pthread_mutex_t mu;
	pthread_cond_t cv; /* a leg was made (or not); users left; closing */
	_Atomic uint64_t epoch;
	int closing;
	int users;	   /* routed calls using a leg now */
	int64_t reread_at; /* the next MAP for a leg that cannot connect */
	int n;
	struct dlock__part part[DLOCK__PARTS_MAX];
	uint16_t owner[DL_SLOTS];  /* slot: index in part, or NOBODY */
	struct dlock_client *legs; /* every leg made, on leg_next */
	struct dlock__mover mover; /* dlock_follow.c's, under its own lock */
};

/* ---- reading MAP --------------------------------------------------------- */

static void map_free(struct dlock__map *m)
{
	int i;

	for (i = 0; i < m->n; i++) {
		free(m->part[i].addrs);
		free(m->part[i].slots);
	}
	m->n = 0;
}

static int part_find(const struct dlock__part *part, int n, struct dl_str id)
{
	int i;

	for (i = 0; i < n; i++)
		if (strlen(part[i].id) == id.len &&
		    memcmp(part[i].id, id.p, id.len) == 0)
			return i;
	return -1;
}

/* A copy of v ("" for "-"); NULL when out of memory. */
static char *addrs_of(struct dl_str v)
{
	char *s;

	if (v.len == 1 && v.p[0] == '-')
		v.len = 0;
	if (!(s = malloc(v.len + 1)))
		return NULL;
	memcpy(s, v.p, v.len);
	s[v.len] = '\0';
	return s;
}

/* One line of MAP's body: "part <id> addrs=<a>|- floor=<n>" or "slots
 * <id> <ranges>|-" (the ranges of one partition may come in several). */
static int map_line(struct dlock__map *m, char *line)
{
	struct dlock__part *p;
	struct dl_reply r;
	struct dl_str v, id;
	size_t have;
	char *s;
	int i;

	if (dl_parse_body(line, strlen(line), &r) < 0 || r.argc < 1)
		return DLOCK_EPROTO;
	id = r.argv[0];
	if (id.len == 0 || id.len > DLOCK__PART_ID_MAX)
		return DLOCK_EPROTO;
	if ((i = part_find(m->part, m->n, id)) < 0) {
		if (m->n == DLOCK__PARTS_MAX)
			return DLOCK_EPROTO;
		i = m->n++;
		memcpy(m->part[i].id, id.p, id.len);
	}
	p = &m->part[i];
	if (r.word.len == 4 && memcmp(r.word.p, "part", 4) == 0) {
		if (dl_reply_kv(&r, "addrs", &v) < 0)
			v = DL_STR_LIT("-");
		free(p->addrs);
		if (!(p->addrs = addrs_of(v)))
			return DLOCK_ENOMEM;
		if (dl_reply_kv(&r, "floor", &v) == 0 &&
		    dl_parse_u64(v.p, v.len, &p->floor) < 0)
			return DLOCK_EPROTO;
	} else if (r.word.len == 5 && memcmp(r.word.p, "slots", 5) == 0) {
		if (r.argc < 2)
			return DLOCK_EPROTO;
		v = r.argv[1];
		if (v.len == 1 && v.p[0] == '-')
			return 0;
		have = p->slots ? strlen(p->slots) : 0;
		if (!(s = realloc(p->slots, have + v.len + 2)))
			return DLOCK_ENOMEM;
		if (have)
			s[have++] = ',';
		memcpy(s + have, v.p, v.len);
		s[have + v.len] = '\0';
		p->slots = s;
	}
	/* a line of another kind: a later server's, skipped */
	return 0;
}

/* MAP on c's own connection into m (to map_free): 0, or an error. */
static int map_read(struct dlock_client *c, struct dlock__map *m)
{
	struct dlock__req *q;
	const char *line;
	uint64_t i;
	int err;

	memset(m, 0, sizeof(*m));
	if ((err = dlock__enter(c)) < 0)
		return err;
	if (!(q = dlock__req_new(DLOCK__MAP, NULL, 0))) {
		dlock__leave(c);
		return DLOCK_ENOMEM;
	}
	q->deadline = dlock__now() + c->opt.request_timeout_ms;
	err = dlock__call(c, &q);
	dlock__leave(c);
	if (!q)
		return err;
	if (err == 0) {
		m->epoch = q->r_value;
		for (i = 0, line = q->stats; err == 0 && i < q->stats_n;
		     i++, line += strlen(line) + 1)
			err = map_line(m, (char *)line);
	}
	dlock__req_free(q);
	for (i = 0; err == 0 && i < (uint64_t)m->n; i++)
		if (!m->part[i].addrs && !(m->part[i].addrs = strdup("")))
			err = DLOCK_ENOMEM;
	if (err < 0)
		map_free(m);
	return err;
}

/* A slot number at *s, moved past it. */
static int slot_at(const char **s, unsigned *out)
{
	unsigned v = 0;
	const char *p = *s;

	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((v = v * 10 + (unsigned)(*p - '0')) >= DL_SLOTS)
			return -1;
	*s = p;
	*out = v;
	return 0;
}

/* Every slot of "a-b,c,..." is partition i's in owner[]. */
static int slots_apply(const char *s, uint16_t *owner, int i)
{
	unsigned a, b, k;

	while (*s) {
		if (slot_at(&s, &a) < 0)
			return DLOCK_EPROTO;
		b = a;
		if (*s == '-') {
			s++;
			if (slot_at(&s, &b) < 0 || b < a)
				return DLOCK_EPROTO;
		}
		for (k = a; k <= b; k++)
			owner[k] = (uint16_t)i;
		if (*s == ',')
			s++;
		else if (*s)
			return DLOCK_EPROTO;
	}
	return 0;
}

/* ---- the router ---------------------------------------------------------- */

/* Partition `id` added to the router with its addresses: its index, or
 * -1 (no room, no memory). Under rt->mu. */
static int part_add(struct dlock__router *rt, struct dl_str id,
		    const char *addrs)
{
	struct dlock__part *p;

	if (rt->n == DLOCK__PARTS_MAX || id.len == 0 ||
	    id.len > DLOCK__PART_ID_MAX)
		return -1;
	p = &rt->part[rt->n];
	memset(p, 0, sizeof(*p));
	if (!(p->addrs = strdup(addrs)))
		return -1;
	memcpy(p->id, id.p, id.len);
	return rt->n++;
}

/* The router takes map m, newer than its own: partitions it knows keep
 * their leg (a new address list goes to the leg), new ones are added,
 * and the slots are given anew (those of no partition: nobody's). Under
 * rt->mu. */
static int adopt(struct dlock__router *rt, const struct dlock__map *m)
{
	uint16_t *owner = malloc(sizeof(rt->owner));
	const struct dlock__part *mp;
	struct dlock__part *p;
	struct dl_str id;
	char *a;
	int i, k, err = 0;

	if (!owner)
		return DLOCK_ENOMEM;
	memset(owner, 0xff, sizeof(rt->owner)); /* DLOCK__NOBODY */
	for (k = 0; k < m->n && err == 0; k++) {
		mp = &m->part[k];
		id = (struct dl_str){mp->id, strlen(mp->id)};
		if ((i = part_find(rt->part, rt->n, id)) < 0) {
			if ((i = part_add(rt, id, mp->addrs)) < 0)
				continue; /* its slots: nobody's here */
		} else if (mp->addrs[0] &&
			   strcmp(rt->part[i].addrs, mp->addrs) != 0) {
			p = &rt->part[i];
			if (!(a = strdup(mp->addrs))) {
				err = DLOCK_ENOMEM;
				break;
			}
			free(p->addrs);
			p->addrs = a;
			if (p->leg)
				dlock__readdress(p->leg, a);
		}
		if (mp->slots)
			err = slots_apply(mp->slots, owner, i);
	}
	if (err == 0) {
		memcpy(rt->owner, owner, sizeof(rt->owner));
		atomic_store(&rt->epoch, m->epoch);
	}
	free(owner);
	return err;
}

static void router_destroy(struct dlock__router *rt)
{
	int i;

	for (i = 0; i < rt->n; i++)
		free(rt->part[i].addrs);
	dlock__mover_destroy(&rt->mover);
	pthread_cond_destroy(&rt->cv);
	pthread_mutex_destroy(&rt->mu);
	free(rt);
}

/* Read MAP on c's first connection; a map of epoch > 0 makes c a router
 * (unless another thread made it one first). 0, or an error. */
static int upgrade(struct dlock_client *c)
{
	struct dlock__router *rt, *none = NULL;
	struct dlock__map m;
	int err;

	if (c->parent)
		return DLOCK_EINVAL; /* a leg routes nothing */
	if ((err = map_read(c, &m)) < 0)
		return err;
	if (m.epoch == 0) {
		map_free(&m);
		return 0;
	}
	if (!(rt = calloc(1, sizeof(*rt)))) {
		map_free(&m);
		return DLOCK_ENOMEM;
	}
	pthread_mutex_init(&rt->mu, NULL);
	dlock__cond_init(&rt->cv);
	dlock__mover_init(&rt->mover);
	memset(rt->owner, 0xff, sizeof(rt->owner));
	pthread_mutex_lock(&rt->mu);
	err = adopt(rt, &m);
	pthread_mutex_unlock(&rt->mu);
	map_free(&m);
	if (err < 0 || !atomic_compare_exchange_strong(&c->rt, &none, rt))
		router_destroy(rt);
	return err;
}

void dlock__router_start(struct dlock_client *c)
{
	/* ERR UNKNOWN_COMMAND (an older daemon), or any failure: the client
	 * is as it was; a MOVED later reads MAP again (follow) */
	(void)upgrade(c);
}

/* Read MAP again (through `via`, a leg that was just told MOVED, else
 * the first connection) and take it if it is newer. */
static void reread(struct dlock_client *c, struct dlock__router *rt,
		   struct dlock_client *via)
{
	struct dlock__map m;

	if (map_read(via, &m) < 0 && (via == c || map_read(c, &m) < 0))
		return;
	pthread_mutex_lock(&rt->mu);
	if (m.epoch > atomic_load(&rt->epoch))
		(void)adopt(rt, &m);
	pthread_mutex_unlock(&rt->mu);
	map_free(&m);
}

/* The leg of partition i, made if need be (rt->mu held; released while
 * it connects): NULL with *err set when it cannot be had. */
static struct dlock_client *leg_of(struct dlock_client *c,
				   struct dlock__router *rt, int i, int *err)
{
	struct dlock__part *p = &rt->part[i];
	struct dlock_client *leg = NULL;
	char why[DLOCK__ERR_MAX], *servers;
	int e;

	while (!p->leg && p->making && !rt->closing)
		pthread_cond_wait(&rt->cv, &rt->mu);
	if (rt->closing) {
		*err = DLOCK_ECANCELED;
		return NULL;
	}
	if (p->leg)
		return p->leg;
	if (!p->addrs[0]) {
		snprintf(why, sizeof(why),
			 "partition %s: the map names no daemon of it", p->id);
		dlock__last_error_set(why);
		*err = DLOCK_EUNAVAILABLE;
		return NULL;
	}
	if (!(servers = strdup(p->addrs))) {
		*err = DLOCK_ENOMEM;
		return NULL;
	}
	p->making = 1;
	pthread_mutex_unlock(&rt->mu);
	e = dlock__leg_connect(c, servers, &leg);
	pthread_mutex_lock(&rt->mu);
	p->making = 0;
	pthread_cond_broadcast(&rt->cv);
	if (e == 0 && rt->closing) {
		pthread_mutex_unlock(&rt->mu);
		dlock_close(leg);
		pthread_mutex_lock(&rt->mu);
		e = DLOCK_ECANCELED;
	}
	if (e < 0) {
		free(servers);
		*err = e;
		return NULL;
	}
	leg->leg_next = rt->legs;
	rt->legs = leg;
	p->leg = leg;
	/* the map moved on while it connected */
	if (p->addrs[0] && strcmp(p->addrs, servers) != 0)
		dlock__readdress(leg, p->addrs);
	free(servers);
	return leg;
}

/* The client a try about `name` goes to: c itself when it routes nothing
 * (not partitioned, no name, a name no partition serves), else the leg
 * of the name's partition -- or of the one a MOVED named (hop->to). */
static struct dlock_client *pick(struct dlock_client *c, const char *name,
				 struct dlock__hop *hop, int *err)
{
	struct dlock__router *rt = atomic_load(&c->rt);
	struct dlock_client *leg;
	int i;

	if (!rt || (hop->to < 0 && (!name || dlock__bad_name(name))))
		return c;
	pthread_mutex_lock(&rt->mu);
	i = hop->to >= 0 ? hop->to : rt->owner[dl_key_slot(name, strlen(name))];
	if (i == DLOCK__NOBODY) {
		leg = c; /* its daemon says MOVED if another map knows */
	} else if ((leg = leg_of(c, rt, i, err)) != NULL) {
		rt->users++;
		hop->counted = 1;
	}
	pthread_mutex_unlock(&rt->mu);
	return leg;
}

/* A try's leg is no longer used. */
static void uncount(struct dlock_client *c, struct dlock__hop *hop)
{
	struct dlock__router *rt = atomic_load(&c->rt);

	if (!hop->counted)
		return;
	hop->counted = 0;
	pthread_mutex_lock(&rt->mu);
	if (--rt->users == 0 && rt->closing)
		pthread_cond_broadcast(&rt->cv);
	pthread_mutex_unlock(&rt->mu);
}

/* What NO MOVED said. */
struct moved {
	char id[DLOCK__PART_ID_MAX + 1];
	char addrs[DLOCK__ERR_MAX];
	uint64_t epoch;
};

/* "NO MOVED <partition> <host:port,...>|- <epoch>" (the thread's last
 * error) into mv. */
static int moved_parse(const char *text, struct moved *mv)
{
	struct dl_str w[3];
	size_t i = 0, len;
	int k;

	if (strncmp(text, "NO MOVED ", 9) != 0)
		return -1;
	text += 9;
	len = strlen(text);
	for (k = 0; k < 3; k++)
		if ((w[k] = dl_next_word(text, len, &i)).len == 0)
			return -1;
	if (w[0].len > DLOCK__PART_ID_MAX || w[1].len >= sizeof(mv->addrs) ||
	    dl_parse_u64(w[2].p, w[2].len, &mv->epoch) < 0)
		return -1;
	memcpy(mv->id, w[0].p, w[0].len);
	mv->id[w[0].len] = '\0';
	if (w[1].len == 1 && w[1].p[0] == '-')
		w[1].len = 0;
	memcpy(mv->addrs, w[1].p, w[1].len);
	mv->addrs[w[1].len] = '\0';
	return 0;
}

/* The index of the partition a MOVED names (rt->mu held), added if the
 * router does not know it yet: -1 when it cannot be. */
static int part_named(struct dlock__router *rt, const struct moved *mv)
{
	struct dl_str id = {mv->id, strlen(mv->id)};
	char *a;
	int i;

	if ((i = part_find(rt->part, rt->n, id)) < 0)
		return part_add(rt, id, mv->addrs);
	if (!rt->part[i].addrs[0] && mv->addrs[0] &&
	    (a = strdup(mv->addrs)) != NULL) {
		free(rt->part[i].addrs);
		rt->part[i].addrs = a;
	}
	return i;
}

/* A MOVED (`text`) was told through `via`: 1 to go by the map (read
 * again first when the MOVED's epoch is newer than the router's, or when
 * it names no partition: a wait ended by a move, or a multi-lock's
 * * FAILED ... MOVED), 0 to go where it says (*mv: the map could not be
 * read again). */
static int moved_where(struct dlock_client *c, struct dlock__router *rt,
		       struct dlock_client *via, const char *text,
		       struct moved *mv)
{
	if (moved_parse(text, mv) < 0 || strcmp(mv->id, "-") == 0) {
		reread(c, rt, via);
		return 1;
	}
	if (mv->epoch > atomic_load(&rt->epoch))
		reread(c, rt, via);
	return atomic_load(&rt->epoch) >= mv->epoch;
}

/* The client the map sends `name` to now (rt->mu held): its partition's
 * leg (NULL: none made yet), or c for a name no partition serves. */
static struct dlock_client *
map_client(struct dlock_client *c, struct dlock__router *rt, const char *name)
{
	unsigned i = rt->owner[dl_key_slot(name, strlen(name))];

	return i == DLOCK__NOBODY ? c : rt->part[i].leg;
}

/* The daemon the map names for a name that moved is settling (see
 * DLOCK__SETTLE_MS): 1 after a pause, while the request timeout since
 * the first lasts; else 0. */
int dlock__settle(struct dlock_client *c, struct dlock__hop *hop)
{
	int64_t now = dlock__now(), ms;

	if (!hop->settle_end)
		hop->settle_end = now + c->opt.request_timeout_ms;
	if (now >= hop->settle_end)
		return 0;
	ms = hop->pause ? hop->pause : DLOCK__SETTLE_MS;
	hop->pause =
		ms * 2 < DLOCK__SETTLE_MAX_MS ? ms * 2 : DLOCK__SETTLE_MAX_MS;
	if (ms > hop->settle_end - now)
		ms = hop->settle_end - now;
	usleep((useconds_t)ms * 1000);
	return 1;
}

/* The last try about `name` ended with err: 1 to try again where a
 * MOVED sends the call (or, the name's partition settling, where it
 * went), 0 to give err to the caller. */
static int follow(struct dlock_client *c, const char *name,
		  struct dlock__hop *hop, int err)
{
	struct dlock__router *rt = atomic_load(&c->rt);
	struct moved mv;
	int i, same;

	if (rt && err == DLOCK_EUNAVAILABLE && (hop->moves || hop->settle_end))
		return dlock__settle(c, hop);
	if (err != DLOCK_EMOVED || hop->moves >= DLOCK__MOVES_MAX)
		return 0;
	if (!rt) {
		/* no map at first: the daemon has one now */
		hop->moves++;
		hop->to = -1;
		return upgrade(c) == 0 && atomic_load(&c->rt) != NULL;
	}
	if (!moved_where(c, rt, hop->leg, dlock_last_error(), &mv)) {
		hop->moves++;
		pthread_mutex_lock(&rt->mu);
		i = part_named(rt, &mv);
		pthread_mutex_unlock(&rt->mu);
		hop->to = i;
		return i >= 0;
	}
	/* by the map; the daemon it names said MOVED from an older map:
	 * again there, once it has read the new one */
	pthread_mutex_lock(&rt->mu);
	same = name && map_client(c, rt, name) == hop->leg;
	pthread_mutex_unlock(&rt->mu);
	hop->to = -1;
	if (same)
		return dlock__settle(c, hop);
	hop->moves++;
	return 1;
}

/* A leg could not be made: the map may name other daemons of its
 * partition now. MAP is read again (at most every DLOCK__REREAD_MS) for
 * the next call; this one fails as it did. */
static void reread_for_leg(struct dlock_client *c)
{
	struct dlock__router *rt = atomic_load(&c->rt);
	char why[DLOCK__ERR_MAX];
	int64_t now = dlock__now();

	if (!rt)
		return;
	pthread_mutex_lock(&rt->mu);
	if (now < rt->reread_at || rt->closing) {
		pthread_mutex_unlock(&rt->mu);
		return;
	}
	rt->reread_at = now + DLOCK__REREAD_MS;
	pthread_mutex_unlock(&rt->mu);
	snprintf(why, sizeof(why), "%s", dlock_last_error());
	reread(c, rt, c);
	dlock__last_error_set(why);
}

int dlock__route(struct dlock_client *c, const char *name,
		 struct dlock__hop *hop, int *err)
{
	if (!hop->held) {
		/* the first try */
		if (!c) {
			dlock__last_error_clear();
			*err = DLOCK_EINVAL;
			return 0;
		}
		if ((*err = dlock__hold(c)) < 0) {
			dlock__last_error_clear();
			return 0;
		}
		hop->held = 1;
		hop->to = -1;
	} else {
		/* follow reads MAP through the leg: it is counted until then */
		int again = follow(c, name, hop, *err);

		uncount(c, hop);
		if (!again)
			goto done;
	}
	if ((hop->leg = pick(c, name, hop, err)) != NULL)
		return 1;
	if (*err == DLOCK_ECONNECT)
		reread_for_leg(c);
done:
	hop->held = 0;
	dlock__unhold(c);
	return 0;
}

/* ---- what spans partitions (dlock_span.c) -------------------------------- */

int dlock__span_parts(struct dlock_client *c, const char *prefix, int every,
		      struct dlock__span_part *out)
{
	struct dlock__router *rt = atomic_load(&c->rt);
	unsigned char served[DLOCK__PARTS_MAX] = {0};
	size_t off, taglen, len = prefix ? strlen(prefix) : 0;
	unsigned s;
	int i, n = 0;

	if (!rt)
		return 0;
	/* a partition the map gained since is asked too */
	reread(c, rt, c);
	pthread_mutex_lock(&rt->mu);
	if (len && dl_hash_tag(prefix, len, &off, &taglen)) {
		s = dl_key_slot(prefix, len);
		if (rt->owner[s] != DLOCK__NOBODY)
			served[rt->owner[s]] = 1;
	} else {
		for (s = 0; s < DL_SLOTS; s++)
			if (rt->owner[s] != DLOCK__NOBODY)
				served[rt->owner[s]] = 1;
	}
	for (i = 0; i < rt->n; i++) {
		if (!served[i] && !every)
			continue;
		out[n].i = i;
		memcpy(out[n].id, rt->part[i].id, sizeof(out[n].id));
		n++;
	}
	pthread_mutex_unlock(&rt->mu);
	return n;
}

struct dlock_client *dlock__span_leg(struct dlock_client *c, int i, int make,
				     int *err)
{
	struct dlock__router *rt = atomic_load(&c->rt);
	struct dlock_client *leg;

	*err = 0;
	pthread_mutex_lock(&rt->mu);
	if (rt->closing) {
		*err = DLOCK_ECANCELED;
		leg = NULL;
	} else if (!make) {
		leg = rt->part[i].leg;
	} else {
		leg = leg_of(c, rt, i, err);
	}
	if (leg)
		rt->users++;
	pthread_mutex_unlock(&rt->mu);
	if (!leg && *err == DLOCK_ECONNECT)
		reread_for_leg(c);
	return leg;
}

/* ---- where a lease goes (dlock_follow.c) --------------------------------- */

int dlock__router_use(struct dlock_client *c, int *used)
{
	struct dlock__router *rt = c ? atomic_load(&c->rt) : NULL;
	int err = 0;

	*used = 0;
	if (!rt)
		return 0;
	pthread_mutex_lock(&rt->mu);
	if (rt->closing) {
		err = DLOCK_ECANCELED;
	} else {
		rt->users++;
		*used = 1;
	}
	pthread_mutex_unlock(&rt->mu);
	return err;
}

void dlock__router_unuse(struct dlock_client *c, int used)
{
	struct dlock__router *rt;

	if (!used)
		return;
	rt = atomic_load(&c->rt);
	pthread_mutex_lock(&rt->mu);
	if (--rt->users == 0 && rt->closing)
		pthread_cond_broadcast(&rt->cv);
	pthread_mutex_unlock(&rt->mu);
}

int dlock__lease_home(struct dlock_client *c, const char *name,
		      struct dlock_client *from, const char *moved,
		      struct dlock_client **to, int *used)
{
	struct dlock__router *rt = atomic_load(&c->rt);
	struct moved mv;
	int i, by_map, err = 0;

	if (!rt)
		return DLOCK_EMOVED;
	by_map = moved_where(c, rt, from, moved, &mv);
	pthread_mutex_lock(&rt->mu);
	if (by_map && map_client(c, rt, name) == from) {
		pthread_mutex_unlock(&rt->mu);
		return 1;
	}
	if (by_map)
		i = rt->owner[dl_key_slot(name, strlen(name))];
	else
		i = part_named(rt, &mv);
	if (i < 0) {
		pthread_mutex_unlock(&rt->mu);
		return DLOCK_EMOVED;
	}
	if (i == DLOCK__NOBODY) {
		*to = c; /* no partition's: the first connection's */
	} else if (!(*to = leg_of(c, rt, i, &err))) {
		pthread_mutex_unlock(&rt->mu);
		return err;
	}
	*used = *to != c;
	if (*used)
		rt->users++;
	pthread_mutex_unlock(&rt->mu);
	return 0;
}

struct dlock__mover *dlock__router_mover(struct dlock_client *c)
{
	struct dlock__router *rt = atomic_load(&c->rt);

	return rt ? &rt->mover : NULL;
}

void dlock__router_close(struct dlock_client *c)
{
	struct dlock__router *rt = atomic_load(&c->rt);
	struct dlock_client *leg, *legs;
	int i;

	if (!rt)
		return;
	dlock__mover_halt(&rt->mover);
	pthread_mutex_lock(&rt->mu);
	rt->closing = 1;
	pthread_cond_broadcast(&rt->cv);
	legs = rt->legs;
	rt->legs = NULL;
	for (i = 0; i < rt->n; i++)
		rt->part[i].leg = NULL;
	pthread_mutex_unlock(&rt->mu);
	/* the calls in the legs end (DLOCK_ECANCELED); a call about to use
	 * a leg finds it closing; none is freed while a call has it */
	for (leg = legs; leg; leg = leg->leg_next)
		dlock__cancel(leg);
	dlock__mover_stop(&rt->mover);
	pthread_mutex_lock(&rt->mu);
	while (rt->users > 0)
		pthread_cond_wait(&rt->cv, &rt->mu);
	pthread_mutex_unlock(&rt->mu);
	while ((leg = legs) != NULL) {
		legs = leg->leg_next;
		dlock_close(leg);
	}
}

void dlock__router_free(struct dlock_client *c)
{
	struct dlock__router *rt = atomic_load(&c->rt);

	if (rt)
		router_destroy(rt);
	atomic_store(&c->rt, NULL);
}

/* ---- the public calls ---------------------------------------------------- */

uint64_t dlock_map_epoch(const dlock_client *c)
{
	struct dlock__router *rt = c ? atomic_load(&c->rt) : NULL;

	return rt ? atomic_load(&rt->epoch) : 0;
}

int dlock_map(dlock_client *c, uint64_t *epoch,
	      void (*cb)(const struct dlock_map_part *p, void *arg), void *arg)
{
	struct dlock_map_part mp;
	struct dlock__map m;
	int i, err;

	dlock__last_error_clear();
	if (!c)
		return DLOCK_EINVAL;
	if ((err = map_read(c, &m)) < 0)
		return err;
	if (epoch)
		*epoch = m.epoch;
	for (i = 0; cb && i < m.n; i++) {
		mp.id = m.part[i].id;
		mp.addrs = m.part[i].addrs;
		mp.floor = m.part[i].floor;
		mp.slots = m.part[i].slots ? m.part[i].slots : "";
		cb(&mp, arg);
	}
	map_free(&m);
	return 0;
}

/* 1 to 3 words of printable ASCII, no '=', one space between. */
static int bad_command(const char *s, int *words)
{
	size_t i, n = strlen(s);

	*words = 1;
	if (n == 0 || n > DL_LINE_MAX - 64 || s[0] == ' ' || s[n - 1] == ' ')
		return 1;
	for (i = 0; i < n; i++) {
		if (s[i] == ' ') {
			if (s[i + 1] == ' ' || ++*words > 3)
				return 1;
		} else if (s[i] < 0x21 || s[i] > 0x7e || s[i] == '=') {
			return 1;
		}
	}
	return 0;
}

int dlock_partition(dlock_client *c, const char *command, char *reply,
		    size_t reply_len)
{
	struct dlock__req *q;
	int64_t ms;
	size_t i;
	int err, words;

	dlock__last_error_clear();
	if (reply && reply_len)
		reply[0] = '\0';
	if (!c || !command || bad_command(command, &words))
		return DLOCK_EINVAL;
	if ((err = dlock__enter(c)) < 0)
		return err;
	if (!(q = dlock__req_new(DLOCK__PARTITION, NULL, 0)) ||
	    !(q->stats = strdup(command))) {
		dlock__req_free(q);
		dlock__leave(c);
		return DLOCK_ENOMEM;
	}
	for (i = 0; q->stats[i]; i++)
		if (q->stats[i] == ' ')
			q->stats[i] = '\0';
	q->stats_n = (uint64_t)words;
	ms = c->opt.request_timeout_ms > DLOCK__PARTITION_MS
		     ? c->opt.request_timeout_ms
		     : DLOCK__PARTITION_MS;
	q->deadline = dlock__now() + ms;
	err = dlock__call(c, &q);
	if (q && err == 0 && reply && reply_len)
		snprintf(reply, reply_len, "%s", q->after);
	dlock__req_free(q);
	dlock__leave(c);
	return err;
}
