/* SPDX-License-Identifier: MIT */
/*
 * store_find.c -- finding the Redis primary before each connection.
 *
 * Host names are resolved on the loop (uv_getaddrinfo on libuv's thread
 * pool), never by a blocking call: hiredis is only given addresses. With
 * a sentinel:// URL the primary is asked of the Sentinels, in turn, on
 * every connection (so every link error ends with asking again):
 *
 *   resolve sentinel i -> connect -> [AUTH] -> SENTINEL
 *   get-master-addr-by-name <master> -> resolve the primary -> connect
 *
 * A Sentinel that cannot be reached or does not know the master passes
 * the question to the next; when all of them failed once, the link fails
 * and is retried with backoff (store.c). The connection to the primary
 * then checks ROLE (store.c's handshake): a Sentinel may name a primary
 * that has just been demoted.
 *
 * A failover can also happen while the link works: a subscription to
 * every Sentinel (the subscription, below) ends the link as soon as one
 * announces a failover of our master, and keeps it down until the
 * failover is over. The next connection finds the new primary and, as
 * after any loss, rewrites the whole table to it (it may lack the last
 * writes of the old one).
 *
 * With a redis-cluster:// URL the seeds are Redis Cluster nodes, asked
 * in turn which primary serves the slot of the key prefix's hash tag
 * (every key of the table is in that slot: config.c insists on the tag):
 *
 *   resolve node i -> connect -> [AUTH] -> CLUSTER SLOTS -> the primary
 *   of our slot -> resolve it -> connect
 *
 * and asked again on every connection. A shard's fail-over or the slot's
 * migration shows as an error on the link (MOVED, ASK, TRYAGAIN,
 * CLUSTERDOWN, READONLY, or a primary that stops answering): the link
 * fails, the next one asks the cluster anew, finds the new primary, and
 * rewrites the whole table to it, as after any loss. Nothing follows a
 * redirection without asking: a MOVED names a node, not whether that
 * node's own view of the slot agrees, and ROLE is checked either way.
 *
 * Every step checks that it still belongs to the current attempt
 * (st->find.gen): an attempt abandoned by a timeout or a stop leaves its
 * late callbacks nothing to do.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"
#include "server/store/store_private.h"
#include "server/store/store_uv.h"

struct resolve {
	uv_getaddrinfo_t req;
	struct dl_store *st;
	unsigned gen;
	int port;
	int seed; /* resolving a Sentinel or cluster node, not the primary */
	char host[256];
};

static void seed_ask(struct dl_store *st, const char *ip, int port);
static void next_seed(struct dl_store *st, const char *why);
static void on_slots(redisAsyncContext *c, void *reply, void *priv);

/* The attempt is still the current one. */
static int current(const struct dl_store *st, unsigned gen)
{
	return gen == st->find.gen && st->link == LINK_CONNECTING &&
	       !st->stopping;
}

/* Resolved: ask the seed (a Sentinel or a cluster node), or connect. */
static void go(struct dl_store *st, const char *ip, int port, int seed)
{
	if (seed)
		seed_ask(st, ip, port);
	else
		dl__link_open(st, ip, port);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct resolve *r = req->data;
	struct dl_store *st = r->st;
	char ip[INET6_ADDRSTRLEN] = "", why[320];

	if (status == 0 && res) {
		if (res->ai_family == AF_INET6)
			uv_ip6_name((struct sockaddr_in6 *)res->ai_addr, ip,
				    sizeof(ip));
		else
			uv_ip4_name((struct sockaddr_in *)res->ai_addr, ip,
				    sizeof(ip));
	}
	if (res)
		uv_freeaddrinfo(res);
	if (current(st, r->gen)) {
		st->find.resolving = NULL;
		if (ip[0]) {
			go(st, ip, r->port, r->seed);
		} else {
			snprintf(why, sizeof(why), "cannot resolve %s: %s",
				 r->host,
				 status ? uv_strerror(status) : "no address");
			if (r->seed)
				next_seed(st, why);
			else
				dl__link_fail(st, why);
		}
	}
	free(r);
}

/* host -> an address, then go on (at once when host is one). */
static void resolve(struct dl_store *st, const char *host, int port, int seed)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
	unsigned char buf[sizeof(struct in6_addr)];
	struct resolve *r;
	int e;

	if (inet_pton(AF_INET, host, buf) == 1 ||
	    inet_pton(AF_INET6, host, buf) == 1) {
		go(st, host, port, seed);
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		dl__link_fail(st, "out of memory");
		return;
	}
	r->st = st;
	r->gen = st->find.gen;
	r->port = port;
	r->seed = seed;
	snprintf(r->host, sizeof(r->host), "%s", host);
	r->req.data = r;
	e = uv_getaddrinfo(st->loop, &r->req, on_resolved, r->host, NULL,
			   &hints);
	if (e != 0) {
		free(r);
		dl__link_fail(st, uv_strerror(e));
		return;
	}
	st->find.resolving = r;
}

/* ---- Sentinel: who is the primary ---------------------------------------- */

static void free_ctx(redisAsyncContext **cp)
{
	redisAsyncContext *c = *cp;

	*cp = NULL;
	if (c)
		redisAsyncFree(c); /* deferred when inside its callback */
}

static void on_master(redisAsyncContext *c, void *reply, void *priv)
{
	struct dl_store *st = priv;
	redisReply *r = reply;
	char why[300];

	if (!r || c != st->find.sac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
	    r->element[0]->type == REDIS_REPLY_STRING &&
	    r->element[1]->type == REDIS_REPLY_STRING &&
	    r->element[0]->len < sizeof(st->find.primary_host) &&
	    atoi(r->element[1]->str) > 0 && atoi(r->element[1]->str) < 65536) {
		memcpy(st->find.primary_host, r->element[0]->str,
		       r->element[0]->len);
		st->find.primary_host[r->element[0]->len] = '\0';
		st->find.primary_port = atoi(r->element[1]->str);
		st->find.sentinel_tries = 0;
		free_ctx(&st->find.sac);
		resolve(st, st->find.primary_host, st->find.primary_port, 0);
		return;
	}
	snprintf(why, sizeof(why), "SENTINEL get-master-addr-by-name %s: %s",
		 st->addr.master,
		 r->type == REDIS_REPLY_ERROR ? r->str
		 : r->type == REDIS_REPLY_NIL ? "unknown master"
					      : "not an address");
	next_seed(st, why);
}

static void on_seed_auth(redisAsyncContext *c, void *reply, void *priv)
{
	struct dl_store *st = priv;
	redisReply *r = reply;
	char why[300];

	if (!r || c != st->find.sac || r->type != REDIS_REPLY_ERROR)
		return;
	snprintf(why, sizeof(why), "AUTH: %s", r->str);
	next_seed(st, why);
}

static void on_sac_connect(const redisAsyncContext *c, int status)
{
	struct dl_store *st = c->data;

	if (c != st->find.sac || status == REDIS_OK)
		return;
	st->find.sac = NULL; /* hiredis frees it */
	next_seed(st, c->errstr[0] ? c->errstr : "cannot connect");
}

static void on_sac_disconnect(const redisAsyncContext *c, int status)
{
	struct dl_store *st = c->data;

	(void)status;
	if (c != st->find.sac)
		return;
	st->find.sac = NULL;
	next_seed(st, c->errstr[0] ? c->errstr : "connection closed");
}

/* AUTH and the question, on a connection of its own. */
static redisAsyncContext *seed_connect(struct dl_store *st, const char *ip,
				       int port, redisConnectCallback *on_conn,
				       redisDisconnectCallback *on_disc,
				       redisCallbackFn *on_auth)
{
	const struct dl_redis_addr *a = &st->addr;
	redisAsyncContext *c = redisAsyncConnect(ip, port);

	if (!c || c->err) {
		if (c)
			redisAsyncFree(c);
		return NULL;
	}
	c->data = st;
	if (dl__uv_attach(c, st->loop, 0) != 0) {
		redisAsyncFree(c);
		return NULL;
	}
	redisAsyncSetConnectCallback(c, on_conn);
	redisAsyncSetDisconnectCallback(c, on_disc);
	if (a->cluster && a->password && a->user)
		redisAsyncCommand(c, on_auth, st, "AUTH %s %s", a->user,
				  a->password);
	else if (a->cluster && a->password)
		redisAsyncCommand(c, on_auth, st, "AUTH %s", a->password);
	else if (!a->cluster && a->sentinel_password)
		redisAsyncCommand(c, on_auth, st, "AUTH %s",
				  a->sentinel_password);
	return c;
}

/* Ask seed ip:port which primary to connect to: a Sentinel, of the
 * master's address; a cluster node, of the slots' primaries. */
static void seed_ask(struct dl_store *st, const char *ip, int port)
{
	redisAsyncContext *c;
	int r;

	c = seed_connect(st, ip, port, on_sac_connect, on_sac_disconnect,
			 on_seed_auth);
	if (!c) {
		next_seed(st, "cannot create a connection");
		return;
	}
	st->find.sac = c;
	snprintf(st->find.sentinel_ip, sizeof(st->find.sentinel_ip), "%s", ip);
	st->find.sentinel_port = port;
	r = st->addr.cluster
		    ? redisAsyncCommand(c, on_slots, st, "CLUSTER SLOTS")
		    : redisAsyncCommand(c, on_master, st,
					"SENTINEL get-master-addr-by-name %s",
					st->addr.master);
	if (r != REDIS_OK)
		next_seed(st, "cannot queue a command");
}

/* ---- Redis Cluster: which primary serves our slot ------------------------ */

/* The primary of `slot` in a CLUSTER SLOTS reply: each element is
 * [first, last, [ip, port, id, ...], replicas...]; an empty ip is the
 * node asked (`asked`). 0 and host, port set; -1 if no range holds it. */
int dl__slots_primary(const redisReply *r, unsigned slot, const char *asked,
		      char *host, size_t hostlen, int *port)
{
	const redisReply *e, *p;
	size_t i;

	if (!r || r->type != REDIS_REPLY_ARRAY)
		return -1;
	for (i = 0; i < r->elements; i++) {
		e = r->element[i];
		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    slot < (unsigned long long)e->element[0]->integer ||
		    slot > (unsigned long long)e->element[1]->integer)
			continue;
		p = e->element[2];
		if (p->type != REDIS_REPLY_ARRAY || p->elements < 2 ||
		    p->element[0]->type != REDIS_REPLY_STRING ||
		    p->element[1]->type != REDIS_REPLY_INTEGER ||
		    p->element[1]->integer <= 0 ||
		    p->element[1]->integer > 65535 ||
		    p->element[0]->len >= hostlen)
			return -1;
		if (p->element[0]->len == 0 ||
		    strcmp(p->element[0]->str, "?") == 0)
			snprintf(host, hostlen, "%s", asked);
		else
			memcpy(host, p->element[0]->str,
			       p->element[0]->len + 1);
		*port = (int)p->element[1]->integer;
		return 0;
	}
	return -1;
}

static void on_slots(redisAsyncContext *c, void *reply, void *priv)
{
	struct dl_store *st = priv;
	redisReply *r = reply;
	char why[300];

	if (!r || c != st->find.sac)
		return;
	st->last_reply_ms = uv_now(st->loop);
	if (dl__slots_primary(r, st->find.slot, st->find.sentinel_ip,
			      st->find.primary_host,
			      sizeof(st->find.primary_host),
			      &st->find.primary_port) == 0) {
		st->find.sentinel_tries = 0;
		free_ctx(&st->find.sac);
		resolve(st, st->find.primary_host, st->find.primary_port, 0);
		return;
	}
	snprintf(why, sizeof(why), "CLUSTER SLOTS: %s",
		 r->type == REDIS_REPLY_ERROR
			 ? r->str
			 : "no primary serves the slot of the prefix");
	next_seed(st, why);
}

/* The seed asked could not say: ask the next, or fail the link once
 * every one was asked in this round. */
static void next_seed(struct dl_store *st, const char *why)
{
	const struct dl_redis_addr *a = &st->addr;
	const char *what = a->cluster ? "cluster node" : "Sentinel";
	int i = st->find.sentinel_i;

	dl_info("redis: %s %s:%d: %s", what, a->seed_host[i], a->seed_port[i],
		why);
	free_ctx(&st->find.sac);
	st->find.sentinel_i = (i + 1) % a->nseeds;
	if (++st->find.sentinel_tries >= a->nseeds) {
		st->find.sentinel_tries = 0;
		dl__link_fail(
			st,
			a->cluster
				? "no cluster node named the primary of the slot"
				: "no Sentinel named the primary");
		return;
	}
	i = st->find.sentinel_i;
	resolve(st, a->seed_host[i], a->seed_port[i], 1);
}

void dl__find_primary(struct dl_store *st)
{
	const struct dl_redis_addr *a = &st->addr;
	int i = st->find.sentinel_i;

	st->find.gen++;
	if (a->master || a->cluster) {
		resolve(st, a->seed_host[i], a->seed_port[i], 1);
	} else if (a->path) {
		dl__link_open(st, NULL, 0);
	} else {
		snprintf(st->find.primary_host, sizeof(st->find.primary_host),
			 "%s", a->host);
		st->find.primary_port = a->port;
		resolve(st, a->host, a->port, 0);
	}
}

void dl__find_cancel(struct dl_store *st)
{
	st->find.gen++; /* a resolution under way finds itself stale */
	if (st->find.resolving) {
		uv_cancel((uv_req_t *)&((struct resolve *)st->find.resolving)
				  ->req);
		st->find.resolving = NULL;
	}
	free_ctx(&st->find.sac);
}

/* ---- the subscription: every Sentinel's announcements -----------------
 *
 * Why every Sentinel, and why more than +switch-master. A failover is
 * announced by +switch-master only once it is over; until then the old
 * primary keeps accepting writes, and a WAIT on it can be answered by a
 * replica that still follows it, while another replica has already been
 * promoted. A write acknowledged then is lost when the old primary is
 * demoted (the fault campaign found it: a grant acknowledged under
 * min_replicas_ack = 1 went missing in two failovers 2 s apart). The
 * Sentinel that leads a failover announces it before it promotes anyone
 * (+try-failover, +elected-leader, +failover-state-*); any Sentinel that
 * sees the primary objectively down says +odown. Only the leader says the
 * first ones, and any Sentinel may lead: hence one subscription per
 * Sentinel. On such an event the link is dropped at once (changes refused,
 * replies held, and withdrawn after redis_timeout as for any loss) and no
 * new link is made until the failover ends (+switch-master, +failover-end,
 * -failover-abort-*) or DL_FAILOVER_HOLD_MS after the last announcement.
 * The next link finds the primary anew and rewrites the whole table to it.
 *
 * This narrows the window; it cannot close it (an announcement travels
 * while the leader proceeds, and a daemon paused across it learns late):
 * Redis replication is not consensus. docs/ha.md, "Limits, plainly". */

static const char *const hold_events[] = {
	"+odown",
	"+try-failover",
	"+elected-leader",
	"+failover-state-select-slave",
	"+selected-slave",
	"+failover-state-send-slaveof-noone",
	"+failover-state-wait-promotion",
	"+promoted-slave",
	"+failover-state-reconf-slaves",
};
static const char *const end_events[] = {
	"+failover-end",
	"+failover-end-for-timeout",
	"-failover-abort-not-elected",
	"-failover-abort-no-good-slave",
	"-failover-abort-slave-timeout",
};

static int in(const char *word, const char *const *list, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcmp(word, list[i]) == 0)
			return 1;
	return 0;
}

/* The master an event is about: "master <name> <ip> <port> ..." or
 * "<type> <name> <ip> <port> @ <master> <ip> <port>". */
static int about_ours(const struct dl_store *st, const char *payload)
{
	char kind[16], name[128];
	const char *at;

	if (sscanf(payload, "%15s %127s", kind, name) != 2)
		return 0;
	if (strcmp(kind, "master") == 0)
		return strcmp(name, st->addr.master) == 0;
	at = strstr(payload, " @ ");
	return at && sscanf(at + 3, "%127s", name) == 1 &&
	       strcmp(name, st->addr.master) == 0;
}

static void on_switch(struct dl_store *st, const struct dl_sentinel_sub *w,
		      const char *payload)
{
	char name[128], from[64], to[64], why[320];
	int fport, tport;

	if (sscanf(payload, "%127s %63s %d %63s %d", name, from, &fport, to,
		   &tport) != 5 ||
	    strcmp(name, st->addr.master) != 0)
		return;
	if (st->find.failover_hold_until)
		dl_notice("redis: Sentinel %s:%d: the failover of %s is over",
			  st->addr.seed_host[w->i], st->addr.seed_port[w->i],
			  name);
	st->find.failover_hold_until = 0;
	/* every Sentinel says it: once on the new primary, stay */
	if (st->link != LINK_DOWN && tport == st->find.primary_port &&
	    strcmp(to, st->find.primary_host) == 0)
		return;
	dl_notice("redis: Sentinel: primary %s moved from %s:%d to %s:%d", name,
		  from, fport, to, tport);
	snprintf(why, sizeof(why), "the primary moved to %s:%d", to, tport);
	if (st->link != LINK_DOWN)
		dl__link_fail(st, why);
}

static void on_event(redisAsyncContext *c, void *reply, void *priv)
{
	struct dl_sentinel_sub *w = priv;
	struct dl_store *st = w->st;
	redisReply *r = reply;
	const char *chan, *payload;
	char why[320];

	if (!r || c != w->c || r->type != REDIS_REPLY_ARRAY ||
	    r->elements != 3 || r->element[0]->type != REDIS_REPLY_STRING ||
	    strcmp(r->element[0]->str, "message") != 0 ||
	    r->element[1]->type != REDIS_REPLY_STRING ||
	    r->element[2]->type != REDIS_REPLY_STRING)
		return;
	chan = r->element[1]->str;
	payload = r->element[2]->str;
	if (strcmp(chan, "+switch-master") == 0) {
		on_switch(st, w, payload);
	} else if (in(chan, hold_events,
		      sizeof(hold_events) / sizeof(hold_events[0]))) {
		if (!about_ours(st, payload))
			return;
		if (!st->find.failover_hold_until) {
			st->st.failover_holds++;
			dl_warn("redis: Sentinel %s:%d: %s %s: a failover of the primary is under way; no writes and no replies until it ends",
				st->addr.seed_host[w->i],
				st->addr.seed_port[w->i], chan, payload);
		}
		st->find.failover_hold_until =
			uv_now(st->loop) + DL_FAILOVER_HOLD_MS;
		snprintf(why, sizeof(why), "Sentinel: %s", chan);
		if (st->link != LINK_DOWN)
			dl__link_fail(st, why);
	} else if (in(chan, end_events,
		      sizeof(end_events) / sizeof(end_events[0]))) {
		if (!about_ours(st, payload) || !st->find.failover_hold_until)
			return;
		dl_notice("redis: Sentinel %s:%d: %s: the failover of %s ended",
			  st->addr.seed_host[w->i], st->addr.seed_port[w->i],
			  chan, st->addr.master);
		st->find.failover_hold_until = 0;
	}
}

static void on_sub_connect(const redisAsyncContext *c, int status)
{
	struct dl_sentinel_sub *w = c->data;

	if (c == w->c && status != REDIS_OK) {
		w->c = NULL; /* hiredis frees it */
		w->retry_at_ms = uv_now(w->st->loop) + DL_WATCH_RETRY_MS;
	}
}

static void on_sub_disconnect(const redisAsyncContext *c, int status)
{
	struct dl_sentinel_sub *w = c->data;

	(void)status;
	if (c == w->c) {
		w->c = NULL;
		w->retry_at_ms = uv_now(w->st->loop) + DL_WATCH_RETRY_MS;
	}
}

static void on_sub_auth(redisAsyncContext *c, void *reply, void *priv)
{
	(void)c;
	(void)reply;
	(void)priv; /* a refused AUTH makes the SUBSCRIBE fail: logged there */
}

static void sub_open(struct dl_sentinel_sub *w, const char *ip)
{
	struct dl_store *st = w->st;
	redisAsyncContext *c;
	size_t k;

	w->retry_at_ms = uv_now(st->loop) + DL_WATCH_RETRY_MS;
	c = seed_connect(st, ip, st->addr.seed_port[w->i], on_sub_connect,
			 on_sub_disconnect, on_sub_auth);
	if (!c)
		return;
	c->data = w; /* its callbacks find the subscription; seed_connect
			set st */
	w->c = c;
	if (redisAsyncCommand(c, on_event, w, "SUBSCRIBE +switch-master") !=
	    REDIS_OK) {
		free_ctx(&w->c);
		return;
	}
	for (k = 0; k < sizeof(hold_events) / sizeof(hold_events[0]); k++)
		redisAsyncCommand(c, on_event, w, "SUBSCRIBE %s",
				  hold_events[k]);
	for (k = 0; k < sizeof(end_events) / sizeof(end_events[0]); k++)
		redisAsyncCommand(c, on_event, w, "SUBSCRIBE %s",
				  end_events[k]);
}

struct sub_resolve {
	uv_getaddrinfo_t req;
	struct dl_sentinel_sub *w; /* NULL: the store stopped meanwhile */
};

static void on_sub_resolved(uv_getaddrinfo_t *req, int status,
			    struct addrinfo *res)
{
	struct sub_resolve *r = req->data;
	char ip[INET6_ADDRSTRLEN] = "";

	if (status == 0 && res) {
		if (res->ai_family == AF_INET6)
			uv_ip6_name((struct sockaddr_in6 *)res->ai_addr, ip,
				    sizeof(ip));
		else
			uv_ip4_name((struct sockaddr_in *)res->ai_addr, ip,
				    sizeof(ip));
	}
	if (res)
		uv_freeaddrinfo(res);
	if (r->w) {
		r->w->resolving = NULL;
		if (ip[0] && !r->w->st->stopping)
			sub_open(r->w, ip);
	}
	free(r);
}

void dl__sentinel_subscribe(struct dl_store *st)
{
	const struct dl_redis_addr *a = &st->addr;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
	unsigned char buf[sizeof(struct in6_addr)];
	uint64_t now = uv_now(st->loop);
	struct sub_resolve *r;
	struct dl_sentinel_sub *w;
	int i;

	if (!a->master || st->stopping)
		return;
	for (i = 0; i < a->nseeds; i++) {
		w = &st->find.sub[i];
		w->st = st;
		w->i = i;
		if (w->c || w->resolving || now < w->retry_at_ms)
			continue;
		w->retry_at_ms = now + DL_WATCH_RETRY_MS;
		if (inet_pton(AF_INET, a->seed_host[i], buf) == 1 ||
		    inet_pton(AF_INET6, a->seed_host[i], buf) == 1) {
			sub_open(w, a->seed_host[i]);
			continue;
		}
		r = calloc(1, sizeof(*r));
		if (!r)
			continue;
		r->w = w;
		r->req.data = r;
		if (uv_getaddrinfo(st->loop, &r->req, on_sub_resolved,
				   a->seed_host[i], NULL, &hints) != 0) {
			free(r);
			continue;
		}
		w->resolving = r;
	}
}

/* The link may be made now (no failover is being waited out). */
int dl__sentinel_allows_link(struct dl_store *st)
{
	if (!st->find.failover_hold_until)
		return 1;
	if (uv_now(st->loop) < st->find.failover_hold_until)
		return 0;
	dl_warn("redis: no Sentinel said the failover of %s ended within %d ms; connecting again",
		st->addr.master, DL_FAILOVER_HOLD_MS);
	st->find.failover_hold_until = 0;
	return 1;
}

void dl__find_stop(struct dl_store *st)
{
	int i;

	dl__find_cancel(st);
	for (i = 0; i < DL_SEEDS_MAX; i++) {
		struct dl_sentinel_sub *w = &st->find.sub[i];

		if (w->resolving) {
			struct sub_resolve *r = w->resolving;

			r->w = NULL; /* its callback frees it */
			uv_cancel((uv_req_t *)&r->req);
			w->resolving = NULL;
		}
		free_ctx(&w->c);
	}
}

/* ---- the same, blocking (the start-up load) ------------------------------ */

/* Seed i's answer: 0 and host, port set, or -1 with err set. */
static int ask_seed_sync(const struct dl_redis_addr *a, int i, unsigned slot,
			 struct timeval tv, char *host, size_t hostlen,
			 int *port, char *err, size_t errlen)
{
	const char *what = a->cluster ? "cluster node" : "Sentinel";
	redisContext *c;
	redisReply *r = NULL;
	int ok = -1;

	c = redisConnectWithTimeout(a->seed_host[i], a->seed_port[i], tv);
	if (!c || c->err) {
		snprintf(err, errlen, "%s %s:%d: %s", what, a->seed_host[i],
			 a->seed_port[i], c ? c->errstr : "out of memory");
		redisFree(c);
		return -1;
	}
	redisSetTimeout(c, tv);
	/* a cluster node knows the primary's user; a Sentinel has its own
	 * password */
	if (a->cluster && a->password)
		r = a->user ? redisCommand(c, "AUTH %s %s", a->user,
					   a->password)
			    : redisCommand(c, "AUTH %s", a->password);
	else if (!a->cluster && a->sentinel_password)
		r = redisCommand(c, "AUTH %s", a->sentinel_password);
	freeReplyObject(r);
	if (a->cluster) {
		r = redisCommand(c, "CLUSTER SLOTS");
		ok = dl__slots_primary(r, slot, a->seed_host[i], host, hostlen,
				       port);
	} else {
		r = redisCommand(c, "SENTINEL get-master-addr-by-name %s",
				 a->master);
		if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		    r->element[0]->type == REDIS_REPLY_STRING &&
		    r->element[1]->type == REDIS_REPLY_STRING) {
			snprintf(host, hostlen, "%s", r->element[0]->str);
			*port = atoi(r->element[1]->str);
			ok = 0;
		}
	}
	if (ok != 0)
		snprintf(err, errlen, "%s %s:%d: %s: %s", what, a->seed_host[i],
			 a->seed_port[i],
			 a->cluster ? "CLUSTER SLOTS"
				    : "SENTINEL get-master-addr-by-name",
			 !r				? c->errstr
			 : r->type == REDIS_REPLY_ERROR ? r->str
			 : a->cluster
				 ? "no primary serves the slot of the prefix"
				 : "unknown master");
	freeReplyObject(r);
	redisFree(c);
	return ok;
}

int dl_store_primary_sync(const struct dl_redis_addr *a, unsigned slot,
			  uint64_t timeout_ms, int *seed, char *host,
			  size_t hostlen, int *port, char *err, size_t errlen)
{
	struct timeval tv = {(time_t)(timeout_ms / 1000),
			     (suseconds_t)(timeout_ms % 1000) * 1000};
	int k, i;

	if (!a->master && !a->cluster) {
		snprintf(host, hostlen, "%s", a->host ? a->host : "");
		*port = a->port;
		return 0;
	}
	snprintf(err, errlen, "no %s answered",
		 a->cluster ? "cluster node" : "Sentinel");
	for (k = 0; k < a->nseeds; k++) {
		i = (*seed + k) % a->nseeds;
		if (ask_seed_sync(a, i, slot, tv, host, hostlen, port, err,
				  errlen) == 0) {
			*seed = i;
			return 0;
		}
	}
	return DL_EUNAVAILABLE;
}

int dl__find_primary_sync(struct dl_store *st, char *host, size_t hostlen,
			  int *port, char *err, size_t errlen)
{
	return dl_store_primary_sync(
		&st->addr, st->find.slot, st->cfg->redis_timeout_ms,
		&st->find.sentinel_i, host, hostlen, port, err, errlen);
}
