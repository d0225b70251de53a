/* SPDX-License-Identifier: MIT */
/*
 * map.c -- the partition map's text and lookups (map.h).
 */
#include "server/part/map.h"

#include <stdio.h>
#include <string.h>

#include "proto/proto.h"

void dl_map_init(struct dl_map *m)
{
	m->epoch = 0;
	m->n = 0;
	memset(m->owner, 0xff, sizeof(m->owner));
}

int dl_map_id_valid(const char *id, size_t len)
{
	size_t i;

	if (len == 0 || len > DL_PART_ID_MAX)
		return 0;
	for (i = 0; i < len; i++)
		if (!((id[i] >= 'a' && id[i] <= 'z') ||
		      (id[i] >= 'A' && id[i] <= 'Z') ||
		      (id[i] >= '0' && id[i] <= '9') || id[i] == '_' ||
		      id[i] == '-'))
			return 0;
	return 1;
}

int dl_map_find(const struct dl_map *m, const char *id, size_t len)
{
	unsigned i;

	for (i = 0; i < m->n; i++)
		if (strlen(m->part[i].id) == len &&
		    memcmp(m->part[i].id, id, len) == 0)
			return (int)i;
	return -1;
}

int dl_map_add(struct dl_map *m, const char *id, size_t len)
{
	int i = dl_map_find(m, id, len);

	if (i >= 0)
		return i;
	if (!dl_map_id_valid(id, len) || m->n == DL_PARTS_MAX)
		return -1;
	i = (int)m->n++;
	memset(&m->part[i], 0, sizeof(m->part[i]));
	memcpy(m->part[i].id, id, len);
	return i;
}

/* host:port: printable, no comma or space, a port after the last ':'. */
static int addr_valid(const char *a, size_t len)
{
	const char *colon = NULL;
	size_t i;
	uint64_t port;

	if (len == 0 || len > DL_ADVERTISE_MAX)
		return 0;
	for (i = 0; i < len; i++) {
		if (a[i] <= ' ' || a[i] > '~' || a[i] == ',')
			return 0;
		if (a[i] == ':')
			colon = a + i;
	}
	if (!colon || colon == a)
		return 0;
	/* a host with a ':' is an IPv6 address, bracketed: [::1]:7400 */
	if (memchr(a, ':', (size_t)(colon - a)) &&
	    !(a[0] == '[' && colon[-1] == ']'))
		return 0;
	return dl_parse_u64(colon + 1, (size_t)(a + len - colon - 1), &port) ==
		       0 &&
	       port > 0 && port < 65536;
}

int dl_map_add_addr(struct dl_map *m, int i, const char *addr)
{
	struct dl_map_part *p = &m->part[i];
	size_t n = strlen(addr), have = strlen(p->addrs), count = 0;
	const char *s = p->addrs, *e;

	if (!addr_valid(addr, n))
		return -1;
	while (*s) {
		e = strchr(s, ',');
		if (!e)
			e = s + strlen(s);
		if ((size_t)(e - s) == n && memcmp(s, addr, n) == 0)
			return 0;
		count++;
		s = *e ? e + 1 : e;
	}
	if (count == DL_PART_ADDRS_MAX || have + n + 2 > sizeof(p->addrs))
		return -1;
	if (have)
		p->addrs[have++] = ',';
	memcpy(p->addrs + have, addr, n + 1);
	return 1;
}

int dl_slots_parse(const char *s, size_t len, uint8_t *set)
{
	const char *end = s + len, *comma, *dash;
	uint64_t a, b;
	int n = 0;

	if (len == 1 && s[0] == '-')
		return 0;
	if (len == 0)
		return -1;
	while (s < end) {
		comma = memchr(s, ',', (size_t)(end - s));
		if (!comma)
			comma = end;
		dash = memchr(s, '-', (size_t)(comma - s));
		if (dl_parse_u64(s, (size_t)((dash ? dash : comma) - s), &a))
			return -1;
		b = a;
		if (dash &&
		    dl_parse_u64(dash + 1, (size_t)(comma - dash - 1), &b))
			return -1;
		if (a > b || b >= DL_SLOTS)
			return -1;
		for (; a <= b; a++) {
			n += !set[a];
			set[a] = 1;
		}
		s = comma == end ? end : comma + 1;
		if (comma != end && s == end)
			return -1; /* a trailing comma */
	}
	return n;
}

/* The ranges of the slots s with in(s, arg). */
static int ranges(int (*in)(unsigned s, const void *arg), const void *arg,
		  char *out, size_t cap)
{
	size_t n = 0;
	unsigned s = 0, e;
	int w;

	while (s < DL_SLOTS) {
		if (!in(s, arg)) {
			s++;
			continue;
		}
		for (e = s; e + 1 < DL_SLOTS && in(e + 1, arg); e++)
			;
		w = s == e ? snprintf(out + n, cap - n, "%s%u", n ? "," : "", s)
			   : snprintf(out + n, cap - n, "%s%u-%u", n ? "," : "",
				      s, e);
		if (w < 0 || (size_t)w >= cap - n)
			return -1;
		n += (size_t)w;
		s = e + 1;
	}
	if (!n && snprintf(out, cap, "-") >= (int)cap)
		return -1;
	return 0;
}

struct owned {
	const struct dl_map *m;
	uint16_t i;
};

static int owned_in(unsigned s, const void *arg)
{
	const struct owned *o = arg;

	return o->m->owner[s] == o->i;
}

int dl_map_ranges(const struct dl_map *m, int i, char *out, size_t cap)
{
	struct owned o = {m, (uint16_t)i};

	return ranges(owned_in, &o, out, cap);
}

static int set_in(unsigned s, const void *arg)
{
	return ((const uint8_t *)arg)[s] != 0;
}

int dl_set_ranges(const uint8_t *set, char *out, size_t cap)
{
	return ranges(set_in, set, out, cap);
}

/* The next word of [*p, end) (spaces skip), or len 0. */
static size_t word(const char **p, const char *end, const char **w)
{
	const char *s = *p, *e;

	while (s < end && *s == ' ')
		s++;
	for (e = s; e < end && *e != ' '; e++)
		;
	*w = s;
	*p = e;
	return (size_t)(e - s);
}

static int bad(char *why, size_t len, int line, const char *what)
{
	snprintf(why, len, "partition map, line %d: %s", line, what);
	return DL_EBADARG;
}

/* "part <id> <slots> <addrs> [floor=<n>]" */
static int parse_part(struct dl_map *m, const char *s, const char *end,
		      int line, uint8_t *set, char *why, size_t whylen)
{
	const char *w, *a, *comma;
	size_t n;
	unsigned k;
	int i;
	char addr[DL_ADVERTISE_MAX + 1];

	n = word(&s, end, &w);
	if (!dl_map_id_valid(w, n))
		return bad(why, whylen, line, "bad partition id");
	if (dl_map_find(m, w, n) >= 0)
		return bad(why, whylen, line, "partition named twice");
	if ((i = dl_map_add(m, w, n)) < 0)
		return bad(why, whylen, line, "too many partitions");
	memset(set, 0, DL_SLOTS);
	n = word(&s, end, &w);
	if (dl_slots_parse(w, n, set) < 0)
		return bad(why, whylen, line, "bad slots");
	for (k = 0; k < DL_SLOTS; k++) {
		if (!set[k])
			continue;
		if (m->owner[k] != DL_MAP_NOBODY)
			return bad(why, whylen, line,
				   "a slot given to two partitions");
		m->owner[k] = (uint16_t)i;
	}
	n = word(&s, end, &w);
	if (n == 0)
		return bad(why, whylen, line, "no addresses");
	if (!(n == 1 && w[0] == '-')) {
		for (a = w; a < w + n; a = comma + 1) {
			comma = memchr(a, ',', (size_t)(w + n - a));
			if (!comma)
				comma = w + n;
			if ((size_t)(comma - a) >= sizeof(addr))
				return bad(why, whylen, line, "bad address");
			memcpy(addr, a, (size_t)(comma - a));
			addr[comma - a] = '\0';
			if (dl_map_add_addr(m, i, addr) < 0)
				return bad(why, whylen, line, "bad address");
			if (comma == w + n)
				break;
		}
	}
	while ((n = word(&s, end, &w)) > 0) {
		if (n > 6 && memcmp(w, "floor=", 6) == 0) {
			if (dl_parse_u64(w + 6, n - 6, &m->part[i].floor))
				return bad(why, whylen, line, "bad floor");
		} else if (n > 5 && memcmp(w, "gave=", 5) == 0) {
			if (dl_parse_u64(w + 5, n - 5, &m->part[i].gave))
				return bad(why, whylen, line, "bad gave");
		} else if (n > 7 && memcmp(w, "pslots=", 7) == 0) {
			if (n - 7 >= sizeof(m->part[i].pend_slots) ||
			    dl_slots_parse(w + 7, n - 7, set) < 0)
				return bad(why, whylen, line, "bad pslots");
			memcpy(m->part[i].pend_slots, w + 7, n - 7);
			m->part[i].pend_slots[n - 7] = '\0';
		} else if (n > 5 && memcmp(w, "pend=", 5) == 0) {
			if (!dl_map_id_valid(w + 5, n - 5))
				return bad(why, whylen, line, "bad pend");
			memcpy(m->part[i].pend, w + 5, n - 5);
			m->part[i].pend[n - 5] = '\0';
		}
		/* other key=value words: a later version's, ignored */
	}
	return 0;
}

int dl_map_parse(struct dl_map *m, const char *text, size_t len, char *why,
		 size_t whylen)
{
	uint8_t set[DL_SLOTS];
	const char *p = text, *end = text + len, *nl, *w, *s;
	size_t n, magic = strlen(DL_MAP_MAGIC);
	int line = 0, have_epoch = 0, r;

	dl_map_init(m);
	if (len < magic || memcmp(text, DL_MAP_MAGIC, magic) != 0 ||
	    (len > magic && text[magic] != '\n'))
		return bad(why, whylen, 1, "not a dlock-map 1");
	for (; p < end; p = nl + 1) {
		nl = memchr(p, '\n', (size_t)(end - p));
		if (!nl)
			nl = end;
		if (++line == 1 || nl == p)
			continue;
		s = p;
		n = word(&s, nl, &w);
		if (n == 5 && memcmp(w, "epoch", 5) == 0) {
			n = word(&s, nl, &w);
			if (dl_parse_u64(w, n, &m->epoch) || m->epoch == 0)
				return bad(why, whylen, line, "bad epoch");
			have_epoch = 1;
		} else if (n == 4 && memcmp(w, "part", 4) == 0) {
			if ((r = parse_part(m, s, nl, line, set, why,
					    whylen)) != 0)
				return r;
		} else {
			return bad(why, whylen, line, "unknown line");
		}
		if (nl == end)
			break;
	}
	if (!have_epoch)
		return bad(why, whylen, line, "no epoch");
	return 0;
}

size_t dl_map_format(const struct dl_map *m, char *out, size_t cap)
{
	size_t n;
	unsigned i;
	int w;

	w = snprintf(out, cap, "%s\nepoch %llu\n", DL_MAP_MAGIC,
		     (unsigned long long)m->epoch);
	if (w < 0 || (size_t)w >= cap)
		return 0;
	n = (size_t)w;
	for (i = 0; i < m->n; i++) {
		w = snprintf(out + n, cap - n, "part %s ", m->part[i].id);
		if (w < 0 || (size_t)w >= cap - n)
			return 0;
		n += (size_t)w;
		if (dl_map_ranges(m, (int)i, out + n, cap - n) != 0)
			return 0;
		n += strlen(out + n);
		w = snprintf(out + n, cap - n, " %s floor=%llu",
			     m->part[i].addrs[0] ? m->part[i].addrs : "-",
			     (unsigned long long)m->part[i].floor);
		if (w < 0 || (size_t)w >= cap - n)
			return 0;
		n += (size_t)w;
		w = m->part[i].gave
			    ? snprintf(out + n, cap - n, " gave=%llu",
				       (unsigned long long)m->part[i].gave)
			    : 0;
		if (w < 0 || (size_t)w >= cap - n)
			return 0;
		n += (size_t)w;
		w = !m->part[i].pend[0] ? snprintf(out + n, cap - n, "\n")
		    : m->part[i].pend_slots[0]
			    ? snprintf(out + n, cap - n, " pend=%s pslots=%s\n",
				       m->part[i].pend, m->part[i].pend_slots)
			    : snprintf(out + n, cap - n, " pend=%s\n",
				       m->part[i].pend);
		if (w < 0 || (size_t)w >= cap - n)
			return 0;
		n += (size_t)w;
	}
	return n;
}

int dl_map_owner(const struct dl_map *m, const char *name, size_t len)
{
	uint16_t o = m->owner[dl_key_slot(name, len)];

	return o == DL_MAP_NOBODY ? -1 : (int)o;
}
