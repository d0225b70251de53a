/* SPDX-License-Identifier: MIT */
/*
 * cmd_part.c -- the commands of a partitioned namespace (server/part/):
 * the check that a name is this partition's, MAP, and PARTITION.
 *
 *   NO MOVED <partition> <host:port,...|-> <map-epoch>
 *
 * answers a request about a name that another partition serves; the
 * client asks MAP for the whole map, or goes where MOVED says. A daemon
 * without [partition] id has no map (MAP answers epoch 0) and serves
 * every name.
 */
#include <stdio.h>
#include <string.h>

#include "server/buf.h"
#include "server/clock.h"
#include "server/cmd.h"
#include "server/cmd_private.h"
#include "server/conn.h"
#include "server/part/part.h"
#include "server/server.h"

/* The slots of a line of MAP's reply: at most this many bytes, so that
 * the line fits in what every client reads (DL_LINE_MAX; its reader
 * drops a longer line as too long). */
#define SLOTS_LINE_MAX (DL_LINE_MAX - 64)

/* "<partition> <host:port,...>|- <map-epoch>" of MOVED. */
static void fmt_to(struct dl_conn *c, struct dl_fmt *f,
		   const struct dl_map_part *to)
{
	dl_fmt_word(f, to->id);
	dl_fmt_word(f, to->addrs[0] ? to->addrs : "-");
	dl_fmt_u64(f, dl_part_map(c->srv->part)->epoch);
}

void dl__cmd_fmt_moved(struct dl_conn *c, struct dl_fmt *f, struct dl_str name)
{
	const struct dl_map_part *to = NULL;

	/* the event comes once the map gives the name away (part.c); a
	 * lookup without the route's side effects, which may serve queues
	 * (found in review: called from inside an extraction) */
	if (c->srv->part && (to = dl_part_owner_of(c->srv->part, name))) {
		fmt_to(c, f, to);
		return;
	}
	dl_fmt_word(f, "-");
	dl_fmt_word(f, "-");
	dl_fmt_u64(f, c->srv->part ? dl_part_map(c->srv->part)->epoch : 0);
}

int dl__cmd_route(struct dl_conn *c, struct dl_str name, struct dl_str tag)
{
	const struct dl_map_part *to;
	char why[DL_WHY_MAX];
	struct reply r;

	if (!c->srv->part)
		return 0;
	switch (dl_part_route(c->srv->part, name, &to)) {
	case DL_ROUTE_HERE:
		return 0;
	case DL_ROUTE_AWAY:
		c->srv->st.errors[-DL_EMOVED]++;
		dl__cmd_reply_begin(&r, "NO MOVED");
		fmt_to(c, &r.f, to);
		dl__cmd_reply_send(c, &r, tag, NULL);
		return -1;
	case DL_ROUTE_NOBODY:
		snprintf(why, sizeof(why),
			 "no partition serves slot %u (map epoch %llu)",
			 dl_key_slot(name.p, name.len),
			 (unsigned long long)dl_part_map(c->srv->part)->epoch);
		break;
	case DL_ROUTE_MOVING:
		snprintf(why, sizeof(why),
			 "slot %u is moving to another partition, try again",
			 dl_key_slot(name.p, name.len));
		break;
	case DL_ROUTE_IMPORTING:
		snprintf(
			why, sizeof(why),
			"slot %u is arriving from another partition with its locks, try again",
			dl_key_slot(name.p, name.len));
		break;
	default:
		snprintf(why, sizeof(why),
			 "the partition map is not read yet, try again");
		break;
	}
	dl_conn_error(c, DL_EUNAVAILABLE, why, tag);
	return -1;
}

/* The next slice of a partition's ranges (at most SLOTS_LINE_MAX bytes,
 * cut at a comma) from *at: its length, its start in *from, *at moved
 * past it and its comma; 0 at the end. The count of MAP's lines and the lines
 * themselves are cut by this one function (found from outside: counted apart, a
 * text of exactly twice the line's length announced one line less than
 * it sent). */
static size_t slice(const char *ranges, size_t len, size_t *at, size_t *from)
{
	size_t cut;

	*from = *at;
	if (*from >= len)
		return 0;
	cut = len - *from > SLOTS_LINE_MAX ? *from + SLOTS_LINE_MAX : len;
	while (cut > *from && cut < len && ranges[cut] != ',')
		cut--;
	if (cut == *from) /* no comma: cannot be, a range is 11 bytes */
		cut = len - *from > SLOTS_LINE_MAX ? *from + SLOTS_LINE_MAX
						   : len;
	*at = cut + 1;
	return cut - *from;
}

/* MAP's lines after its first, for one map: made once per epoch (found
 * from outside: four clients pipelining MAP of a fragmented map, each
 * answer its ranges formatted anew, held another client's TRYLOCK for
 * 558 ms). */
static struct {
	const struct dl_part *part;
	unsigned gen;	    /* dl_part_map_gen: a new map, even of one epoch */
	struct dl_buf body; /* the lines, each with its CRLF */
	size_t lines;
} cache;

static int body_line(struct reply *r)
{
	int n = dl_fmt_end(&r->f, DL_STR_NULL);

	if (n < 0 || dl_buf_add(&cache.body, r->buf, (size_t)n) != 0)
		return -1;
	cache.lines++;
	return 0;
}

/* Per partition
 *   part <id> addrs=<host:port,...|-> floor=<n>
 *   slots <id> <ranges>          (as many as its ranges need)
 */
static int cache_build(const struct dl_part *p)
{
	static char ranges[DL_MAP_TEXT_MAX];
	const struct dl_map *m = dl_part_map(p);
	struct reply r;
	size_t i, len, at, from, n;

	cache.body.len = 0;
	cache.lines = 0;
	cache.part = NULL;
	for (i = 0; i < m->n; i++) {
		dl_fmt_init(&r.f, r.buf, sizeof(r.buf));
		dl_fmt_word(&r.f, "part");
		dl_fmt_word(&r.f, m->part[i].id);
		dl_fmt_kv_str(
			&r.f, "addrs",
			m->part[i].addrs[0]
				? (struct dl_str){m->part[i].addrs,
						  strlen(m->part[i].addrs)}
				: DL_STR_LIT("-"));
		dl_fmt_kv_u64(&r.f, "floor", m->part[i].floor);
		if (body_line(&r) != 0)
			return -1;
		if (dl_map_ranges(m, (int)i, ranges, sizeof(ranges)) != 0)
			continue;
		len = strlen(ranges);
		for (at = 0; (n = slice(ranges, len, &at, &from)) != 0;) {
			dl_fmt_init(&r.f, r.buf, sizeof(r.buf));
			dl_fmt_word(&r.f, "slots");
			dl_fmt_word(&r.f, m->part[i].id);
			dl_fmt_str(&r.f, (struct dl_str){ranges + from, n});
			if (body_line(&r) != 0)
				return -1;
		}
	}
	cache.part = p;
	cache.gen = dl_part_map_gen(p);
	return 0;
}

/* OK MAP <epoch> <lines>, then the lines (cache_build). */
void dl__cmd_map(struct dl_conn *c, const struct dl_request *rq)
{
	const struct dl_part *p = c->srv->part;
	struct reply r;

	if (p && (cache.part != p || cache.gen != dl_part_map_gen(p)) &&
	    cache_build(p) != 0) {
		dl_conn_error(c, DL_EINTERNAL, "out of memory", rq->tag);
		return;
	}
	dl__cmd_reply_begin(&r, "OK MAP");
	dl_fmt_u64(&r.f, p ? dl_part_map(p)->epoch : 0);
	dl_fmt_u64(&r.f, p ? cache.lines : 0);
	dl__cmd_reply_send(c, &r, rq->tag, NULL);
	if (p && cache.body.len)
		dl_conn_send(c, cache.body.p, cache.body.len, NULL);
}

/* The connection waiting for a change of the map, told when it is made;
 * its id, so that one that ended meanwhile is not written to. */
struct asker {
	struct dl_server *srv;
	uint64_t conn_id;
	char tag[DL_TAG_MAX + 1];
	size_t taglen;
};

static struct asker asking; /* one change at a time (part.c) */

static void on_done(int err, const char *text, void *arg)
{
	struct asker *a = arg;
	struct dl_conn *c;
	struct reply r;

	for (c = a->srv->conns; c && c->id != a->conn_id; c = c->next)
		;
	if (!c || c->ended)
		return;
	if (err) {
		dl_conn_error(c, err, text, (struct dl_str){a->tag, a->taglen});
	} else {
		dl__cmd_reply_begin(&r, "OK PARTITION");
		dl_fmt_word(&r.f, text);
		dl__cmd_reply_send(c, &r, (struct dl_str){a->tag, a->taglen},
				   NULL);
	}
	dl_conn_answered(c);
}

static int word_is(struct dl_str w, const char *s)
{
	return w.len == strlen(s) && strncasecmp(w.p, s, w.len) == 0;
}

void dl__cmd_partition(struct dl_conn *c, const struct dl_request *rq)
{
	static uint8_t set[DL_SLOTS];
	struct dl_part *p = c->srv->part;
	char why[DL_WHY_MAX] = "";
	struct dl_str w0 = rq->words[0];
	int err;

	if (!p) {
		dl_conn_error(
			c, DL_EBADARG,
			"this daemon serves no partition ([partition] id)",
			rq->tag);
		return;
	}
	if (dl_part_busy(p)) {
		dl_conn_error(c, DL_ELIMIT,
			      "limit reached: a change of the map is under way",
			      rq->tag);
		return;
	}
	asking.srv = c->srv;
	asking.conn_id = c->id;
	asking.taglen = rq->tag.len < sizeof(asking.tag) ? rq->tag.len : 0;
	if (asking.taglen)
		memcpy(asking.tag, rq->tag.p, asking.taglen);
	if (word_is(w0, "INIT") && rq->nwords == 1) {
		err = dl_part_init_map(p, on_done, &asking, why, sizeof(why));
	} else if (word_is(w0, "MOVE") && rq->nwords == 3 &&
		   c->srv->closed_until > dl_mono_ms()) {
		/* found from outside: with grants closed after Redis went
		 * back, the table holds none of the leases Redis lost, so
		 * "no lock in those slots" proved nothing, and the slots'
		 * names went to a partition that granted them again */
		dl_conn_error(
			c, DL_EUNAVAILABLE,
			"grants are closed (Redis went back): this partition's table may lack leases of those slots; move them once grants reopen",
			rq->tag);
		return;
	} else if (word_is(w0, "MOVE") && rq->nwords == 3) {
		memset(set, 0, sizeof(set));
		if (dl_slots_parse(rq->words[1].p, rq->words[1].len, set) <=
		    0) {
			dl_conn_error(
				c, DL_EBADARG,
				"slots: <first>-<last> or <slot>, comma separated, 0-16383",
				rq->tag);
			return;
		}
		err = dl_part_move(p, set, rq->words[2].p, rq->words[2].len,
				   on_done, &asking, why, sizeof(why));
	} else if (word_is(w0, "ADDRS") && rq->nwords == 3) {
		err = dl_part_set_addrs(p, rq->words[1].p, rq->words[1].len,
					rq->words[2].p, rq->words[2].len,
					on_done, &asking, why, sizeof(why));
	} else {
		dl_conn_error(c, DL_EBADARG,
			      "PARTITION INIT | MOVE <slots> <partition> | "
			      "ADDRS <partition> <host:port,...>",
			      rq->tag);
		return;
	}
	if (err)
		dl_conn_error(c, err, why[0] ? why : dl_strerror(err), rq->tag);
	else
		dl_conn_await(c); /* answered by on_done */
}
