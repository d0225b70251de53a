/* SPDX-License-Identifier: MIT */
/*
 * access.c -- who a connection is, and what it may do (see access.h).
 *
 * A connection's user is a pointer into the users table (or to the
 * default user, which lives here for the daemon's life). A reload makes
 * a new table: every connection is moved to its user's entry in it, or
 * revoked, before the old table is freed, so no pointer outlives it.
 *
 * Failed AUTHs are logged as a summary: the first of a quiet period at
 * once (an operator's typo shows at once), the rest as one line per
 * DL_AUTH_LOG_MS -- how many, from how many addresses, which one most --
 * so that guessing cannot fill the log (one line per failure was 6.4 MB
 * in 5 s from 2,000 guessing connections, found from outside).
 */
#include "server/access.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "server/clock.h"
#include "server/cmd.h"
#include "server/conn.h"
#include "server/locktab/htab.h"
#include "server/watch.h"
#include "server/log.h"
#include "server/server.h"

/* Addresses the summary of failed AUTHs tells apart in one interval; the
 * others are counted, not named. */
#define FAIL_ADDRS 64

/* Unauthenticated connections from one address, and its bucket of new
 * ones (max_connects_per_address): kept while either says something. */
struct addr_count {
	uint32_t n;
	uint64_t credit; /* connects left, in thousandths */
	uint64_t at_ms;	 /* uv_now when credit was counted */
	struct dl_hnode hn;
	char addr[]; /* hn.len bytes + NUL */
};

struct fail_addr {
	char addr[sizeof(((struct dl_conn *)0)->addr)];
	uint64_t n;
};

struct dl_access {
	struct dl_users *users; /* NULL: no users file */
	struct dl_user dflt;	/* the default user */
	uint64_t seed;
	uint64_t nunauth;	       /* connections not authenticated */
	struct dl_conn *uhead, *utail; /* ... oldest first */
	struct dl_htab addrs;	       /* struct addr_count, by address */
	size_t naddrs;
	uint64_t swept_ms; /* the last sweep of idle addresses */
	/* the summary of failed AUTHs: an interval is open from `since`
	 * (uv_now ms; 0: none) */
	uint64_t since, fails, fails_other;
	struct fail_addr fail[FAIL_ADDRS];
	size_t nfail;
};

static struct dl_access *acc(const struct dl_conn *c)
{
	return c->srv->access;
}

int dl_access_new(const struct dl_config *cfg, uint64_t seed,
		  struct dl_access **out, char *err, size_t errlen)
{
	struct dl_access *a = calloc(1, sizeof(*a));
	int r;

	*out = NULL;
	if (!a || dl_htab_init(&a->addrs) != 0) {
		free(a);
		return DL_ENOMEM;
	}
	a->seed = seed;
	dl_user_default(&a->dflt);
	if (cfg->users_file[0] &&
	    (r = dl_users_load(cfg->users_file, &a->users, err, errlen)) != 0) {
		dl_access_free(a);
		return r;
	}
	*out = a;
	return 0;
}

void dl_access_free(struct dl_access *a)
{
	struct dl_hnode *n, *next;
	size_t i;

	if (!a)
		return;
	for (i = 0; i < dl_htab_slots(&a->addrs); i++)
		for (n = *dl_htab_slot(&a->addrs, i); n; n = next) {
			next = n->next;
			free((char *)n - offsetof(struct addr_count, hn));
		}
	dl_htab_free(&a->addrs);
	dl_users_free(a->users);
	free(a);
}

/* Something must be proven before anything is done. */
static int required(const struct dl_server *srv)
{
	return srv->cfg.password[0] || srv->access->users;
}

/* ---- unauthenticated connections ---------------------------------------- */

static uint64_t unauth_max(const struct dl_config *cfg)
{
	uint64_t n = cfg->max_unauth_connections;

	if (n == 0)
		n = cfg->max_connections / DL_UNAUTH_SHARE;
	return n ? n : 1;
}

static struct addr_count *addr_find(struct dl_access *a, const char *addr)
{
	struct dl_str k = {addr, strlen(addr)};
	struct dl_hnode *n =
		dl_htab_find(&a->addrs, dl_hash_bytes(a->seed, k.p, k.len), k);

	return n ? (struct addr_count *)((char *)n -
					 offsetof(struct addr_count, hn))
		 : NULL;
}

static int is_unix(const struct dl_conn *c)
{
	return c->u.handle.type == UV_NAMED_PIPE;
}

/* ac's bucket counted at now: full after a second of rest. */
static void refill(struct addr_count *ac, uint64_t rate, uint64_t now)
{
	uint64_t full = rate * 1000;
	uint64_t credit = ac->credit + (now - ac->at_ms) * rate;

	ac->credit = credit < full ? credit : full; /* rate may have changed */
	ac->at_ms = now;
}

/* Nothing to remember of ac: no connection waits, its bucket is full. */
static int idle(struct addr_count *ac, uint64_t rate, uint64_t now)
{
	if (ac->n)
		return 0;
	refill(ac, rate, now);
	return ac->credit >= rate * 1000;
}

static void addr_drop(struct dl_access *a, struct addr_count *ac)
{
	dl_htab_remove(&a->addrs, &ac->hn);
	free(ac);
	a->naddrs--;
}

/* Forget the idle addresses, at most every 100 ms: O(addresses). */
static void sweep_addrs(struct dl_access *a, uint64_t rate, uint64_t now)
{
	struct dl_hnode *n, *next;
	struct addr_count *ac;
	size_t i;

	if (now - a->swept_ms < 100)
		return;
	a->swept_ms = now;
	for (i = 0; i < dl_htab_slots(&a->addrs); i++)
		for (n = *dl_htab_slot(&a->addrs, i); n; n = next) {
			next = n->next;
			ac = (struct addr_count *)((char *)n -
						   offsetof(struct addr_count,
							    hn));
			if (idle(ac, rate, now))
				addr_drop(a, ac);
		}
}

static void unauth_remove(struct dl_conn *c);

/*
 * At max_unauth_connections a new connection takes the place of the
 * oldest one not authenticated yet, which is closed (reset). Refusing
 * the new one instead let one client hold every place: found from
 * outside, 5,000 silent connections from 625 loopback addresses (8 each,
 * under every per-address cap), renewed as auth_timeout closed them, and
 * nobody -- admins included, unix socket included -- could connect. Now
 * such a client must open max_unauth_connections connections in the time
 * a real client takes to authenticate to push it out, and the per-address
 * rate (max_connects_per_address) makes that many addresses' work.
 */
static void unauth_evict(struct dl_access *a, struct dl_conn *by)
{
	struct dl_conn *old = a->uhead;

	if (!old || old == by)
		return;
	by->srv->st.connections_evicted++;
	dl_info("conn %llu %s: closing, not authenticated after %llu ms: "
		"its place goes to a new connection "
		"(max_unauth_connections)",
		(unsigned long long)old->id, old->peer,
		(unsigned long long)(uv_now(by->srv->loop) - old->accepted_ms));
	unauth_remove(old);
	dl_conn_end(old, DL_END_ABORT, "evicted, not authenticated");
}

/* Count c as unauthenticated; DL_ELIMIT if a cap forbids it. */
static int unauth_add(struct dl_conn *c, const char **why)
{
	struct dl_access *a = acc(c);
	const struct dl_config *cfg = &c->srv->cfg;
	struct addr_count *ac = NULL;
	uint64_t rate = cfg->max_connects_per_address;
	uint64_t now = uv_now(c->srv->loop);
	size_t len = strlen(c->addr);

	if (!is_unix(c)) {
		ac = addr_find(a, c->addr);
		if (ac && ac->n >= cfg->max_unauth_per_address) {
			*why = "too many connections not authenticated yet "
			       "from this address (max_unauth_per_address)";
			return DL_ELIMIT;
		}
		if (ac && rate) {
			refill(ac, rate, now);
			if (ac->credit < 1000) {
				*why = "too many new connections from this "
				       "address (max_connects_per_address a "
				       "second)";
				return DL_ELIMIT;
			}
		}
		if (!ac && a->naddrs >= DL_CONNECT_ADDRS_MAX)
			sweep_addrs(a, rate, now);
		if (!ac) {
			if (!(ac = calloc(1, sizeof(*ac) + len + 1)))
				return DL_ELIMIT;
			ac->hn.hash = dl_hash_bytes(a->seed, c->addr, len);
			ac->hn.len = (uint8_t)len;
			memcpy(ac->addr, c->addr, len);
			ac->credit = rate * 1000;
			ac->at_ms = now;
			dl_htab_insert(&a->addrs, &ac->hn);
			a->naddrs++;
		}
		if (ac->credit >= 1000)
			ac->credit -= 1000;
		ac->n++;
	}
	if (a->nunauth >= unauth_max(cfg))
		unauth_evict(a, c);
	a->nunauth++;
	c->unauth_counted = 1;
	c->unext = NULL;
	c->uprev = a->utail;
	if (a->utail)
		a->utail->unext = c;
	else
		a->uhead = c;
	a->utail = c;
	return 0;
}

static void unauth_remove(struct dl_conn *c)
{
	struct dl_access *a = acc(c);
	struct addr_count *ac;

	if (!c->unauth_counted)
		return;
	c->unauth_counted = 0;
	a->nunauth--;
	if (c->uprev)
		c->uprev->unext = c->unext;
	else
		a->uhead = c->unext;
	if (c->unext)
		c->unext->uprev = c->uprev;
	else
		a->utail = c->uprev;
	c->unext = c->uprev = NULL;
	if (is_unix(c) || !(ac = addr_find(a, c->addr)))
		return;
	--ac->n;
	/* kept while its bucket refills; past DL_CONNECT_ADDRS_MAX
	 * addresses, the idle ones are swept (unauth_add) */
	if (idle(ac, c->srv->cfg.max_connects_per_address,
		 uv_now(c->srv->loop)))
		addr_drop(a, ac);
}

/* ---- sessions ----------------------------------------------------------- */

/* The quotas a user's sessions carry: its own, else the defaults; none
 * for the default user (it is every client at once: only the daemon's
 * limits bound it). */
static uint64_t quota(const struct dl_config *cfg, const struct dl_user *u,
		      enum dl_quota q)
{
	static const size_t defaults[DL_QUOTA_COUNT_] = {
		offsetof(struct dl_config, max_locks_per_user),
		offsetof(struct dl_config, max_waits_per_user),
		offsetof(struct dl_config, max_connections_per_user),
		offsetof(struct dl_config, max_watches_per_user),
	};

	if (!u->name[0])
		return 0;
	if (u->quota[q])
		return u->quota[q];
	return *(const uint64_t *)((const char *)cfg + defaults[q]);
}

uint64_t dl_access_quota(const struct dl_conn *c, enum dl_quota q)
{
	return c->user ? quota(&c->srv->cfg, c->user, q) : 0;
}

static uint32_t u32(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static void set_quota(struct dl_conn *c, const struct dl_config *cfg)
{
	dl_session_set_quota(&c->sess, u32(quota(cfg, c->user, DL_QUOTA_LOCKS)),
			     u32(quota(cfg, c->user, DL_QUOTA_WAITS)));
}

/* A new owner secret: DL_OWNER_SECRET_NEW hex digits from getrandom(2). */
static int secret_new(char out[DL_OWNER_SECRET_NEW + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char r[DL_OWNER_SECRET_NEW / 2];
	size_t i;

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return DL_EINTERNAL;
	for (i = 0; i < sizeof(r); i++) {
		out[2 * i] = hex[r[i] >> 4];
		out[2 * i + 1] = hex[r[i] & 15];
	}
	out[DL_OWNER_SECRET_NEW] = '\0';
	return 0;
}

/* The owner key `k` for session s, proven by `secret`: the owner's
 * proof is the first DL_OWNER_PROOF_LEN bytes of the secret's SHA-256
 * (locktab.h, Identity). 0, DL_EDENIED, or what the table says. */
static int prove(struct dl_conn *c, struct dl_str k, struct dl_str secret,
		 int init)
{
	unsigned char h[DL_SECRET_HASH_LEN];
	int err;

	if (dl_secret_hash(secret, h))
		return DL_EINTERNAL;
	if (init) {
		if ((err = dl_session_init(c->srv->tab, &c->sess, k, c)) != 0)
			return err;
		dl_locktab_bind_proof(c->srv->tab, k, h);
		return 0;
	}
	return dl_session_prove(c->srv->tab, &c->sess, k, h);
}

/* c is user u from now on: its session begins, with an owner of u's. */
static int login(struct dl_conn *c, struct dl_user *u, enum dl_auth_how how,
		 char *why, size_t whylen)
{
	const struct dl_config *cfg = &c->srv->cfg;
	char id[DL_OWNER_MAX + 1], key[DL_OWNER_KEY_MAX + 1];
	uint64_t max = quota(cfg, u, DL_QUOTA_CONNS);
	struct dl_str k;

	if (max && u->rt.conns >= max) {
		snprintf(why, whylen,
			 "limit reached: user %s has %u connections, at most "
			 "%llu (%s)",
			 u->name, (unsigned)u->rt.conns,
			 (unsigned long long)max,
			 u->quota[DL_QUOTA_CONNS] ? "its conns="
						  : "max_connections_per_user");
		return DL_ELIMIT;
	}
	/* An id nobody can guess or take: random, and bound to a secret
	 * only this connection knows (HELLO says it, to resume). */
	if (secret_new(c->owner_secret) != 0) {
		snprintf(why, whylen, "no random numbers");
		return DL_EINTERNAL;
	}
	snprintf(id, sizeof(id), "anon-%.16s", c->owner_secret);
	if (secret_new(c->owner_secret) != 0 ||
	    dl_owner_key(key, u->name, (struct dl_str){id, strlen(id)}, &k) ||
	    prove(c, k, (struct dl_str){c->owner_secret, DL_OWNER_SECRET_NEW},
		  1) != 0) {
		snprintf(why, whylen, "out of memory");
		return DL_ENOMEM;
	}
	unauth_remove(c);
	c->user = u;
	c->auth_how = how;
	c->authed = 1;
	u->rt.conns++;
	dl_conn_share_move(c, NULL, u);
	set_quota(c, cfg);
	return 0;
}

/* The user of the unix peer's uid, if one has it. */
static struct dl_user *peer_user(struct dl_conn *c)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	uv_os_fd_t fd;

	if (!acc(c)->users || uv_fileno(&c->u.handle, &fd) != 0 ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
		return NULL;
	return dl_users_by_uid(acc(c)->users, (uint32_t)cred.uid);
}

int dl_access_accept(struct dl_conn *c, const char **why)
{
	static char text[DL_WHY_MAX];
	struct dl_user *u;
	int r;

	c->accepted_ms = uv_now(c->srv->loop);
	if (!required(c->srv))
		r = login(c, &acc(c)->dflt, DL_AUTH_OPEN, text, sizeof(text));
	else if (is_unix(c) && (u = peer_user(c)) != NULL)
		r = login(c, u, DL_AUTH_UID, text, sizeof(text));
	else
		return unauth_add(c, why);
	*why = text;
	return r ? DL_ELIMIT : 0;
}

void dl_access_conn_end(struct dl_conn *c)
{
	unauth_remove(c);
	if (c->user) {
		c->user->rt.conns--;
		dl_conn_share_move(c, c->user, NULL);
		c->user = NULL;
	}
}

/* ---- AUTH ---------------------------------------------------------------- */

static void fail_note(struct dl_access *a, const char *addr)
{
	size_t i;

	a->fails++;
	for (i = 0; i < a->nfail; i++)
		if (strcmp(a->fail[i].addr, addr) == 0) {
			a->fail[i].n++;
			return;
		}
	if (a->nfail == FAIL_ADDRS) {
		a->fails_other++;
		return;
	}
	snprintf(a->fail[a->nfail].addr, sizeof(a->fail[0].addr), "%s", addr);
	a->fail[a->nfail++].n = 1;
}

static void failed(struct dl_conn *c, const char *what)
{
	struct dl_access *a = acc(c);
	char d[DL_DURATION_TEXT_MAX];

	c->srv->st.auth_failures++;
	if (c->auth_failures < DL_AUTH_FAILURES_MAX)
		c->auth_failures++;
	if (a->since) {
		fail_note(a, c->addr);
		return;
	}
	a->since = uv_now(c->srv->loop);
	dl_notice("conn %llu %s: AUTH failed (%s); further failures are summed "
		  "up every %s",
		  (unsigned long long)c->id, c->peer, what,
		  dl_format_duration(DL_AUTH_LOG_MS, d));
}

void dl_access_tick(struct dl_server *srv, uint64_t now, int force)
{
	struct dl_access *a = srv->access;
	char d[DL_DURATION_TEXT_MAX];
	size_t i, top = 0;

	if (!a || !a->since || (!force && now - a->since < DL_AUTH_LOG_MS))
		return;
	if (!a->fails) {
		a->since = 0; /* a quiet interval: the next one is told */
		return;
	}
	for (i = 1; i < a->nfail; i++)
		if (a->fail[i].n > a->fail[top].n)
			top = i;
	dl_notice("auth: %llu more failed AUTHs from %llu address%s%s in the "
		  "last %s; most from %s (%llu)",
		  (unsigned long long)a->fails, (unsigned long long)a->nfail,
		  a->nfail == 1 ? "" : "es", a->fails_other ? " and more" : "",
		  dl_format_duration(now - a->since, d), a->fail[top].addr,
		  (unsigned long long)a->fail[top].n);
	a->since = now;
	a->fails = a->fails_other = 0;
	a->nfail = 0;
}

int dl_access_auth(struct dl_conn *c, struct dl_str user, struct dl_str secret,
		   char *why, size_t whylen)
{
	struct dl_server *srv = c->srv;
	struct dl_access *a = acc(c);
	struct dl_user *u = NULL;
	enum dl_auth_how how;

	if (c->authed) {
		/* Once per connection; the same again is harmless. Only a
		 * connection that proved a secret has it compared again: one
		 * logged in by its uid or certificate is never told whether
		 * a secret is right (that would be guessing with no delay,
		 * count or log). */
		if (c->auth_how == DL_AUTH_UID || c->auth_how == DL_AUTH_NAME)
			goto already;
		if (c->auth_how == DL_AUTH_OPEN ||
		    (!user.len && c->auth_how == DL_AUTH_PASSWORD &&
		     dl_secret_equal(
			     secret,
			     (struct dl_str){srv->cfg.password,
					     strlen(srv->cfg.password)})))
			return 0;
		u = a->users ? dl_users_find(a->users, user) : NULL;
		if (u && u == c->user &&
		    dl_users_check(a->users, user, secret, &u) == 0)
			return 0;
	already:
		snprintf(why, whylen,
			 "authenticated already (as %s): open another "
			 "connection to be someone else",
			 dl_access_user(c));
		return DL_EBADARG;
	}
	if (a->users) {
		if (!user.len ||
		    dl_users_check(a->users, user, secret, &u) != 0) {
			failed(c, !user.len ? "a password, but users have "
					      "secrets"
				  : dl_users_find(a->users, user)
					  ? "a user's wrong secret"
					  : "an unknown user");
			return DL_EDENIED;
		}
		how = DL_AUTH_SECRET;
	} else {
		if (user.len ||
		    !dl_secret_equal(
			    secret,
			    (struct dl_str){srv->cfg.password,
					    strlen(srv->cfg.password)})) {
			failed(c, user.len ? "a user, but there is no users "
					     "file"
					   : "a wrong password");
			return DL_EDENIED;
		}
		u = &a->dflt;
		how = DL_AUTH_PASSWORD;
	}
	return login(c, u, how, why, whylen);
}

int dl_access_login_name(struct dl_conn *c, const char *name, char *why,
			 size_t whylen)
{
	struct dl_user *u = dl_users_find(acc(c)->users,
					  (struct dl_str){name, strlen(name)});

	if (c->authed || !u) {
		snprintf(why, whylen, "%s",
			 c->authed ? "authenticated already" : "no such user");
		return DL_EDENIED;
	}
	return login(c, u, DL_AUTH_NAME, why, whylen);
}

int dl_access_guessing(const struct dl_conn *c)
{
	return c->auth_failures >= DL_AUTH_FAILURES_MAX;
}

/* ---- rights -------------------------------------------------------------- */

int dl_access_may(const struct dl_conn *c, enum dl_right r, struct dl_str name)
{
	return c->user && dl_user_may(acc(c)->users, c->user, r, name);
}

int dl_access_may_some(const struct dl_conn *c, enum dl_right r,
		       struct dl_str prefix)
{
	return c->user && dl_user_may_some(acc(c)->users, c->user, r, prefix);
}

int dl_access_readable(struct dl_str name, void *conn)
{
	return dl_access_may(conn, DL_RIGHT_READ, name);
}

size_t dl_access_prefixes(const struct dl_conn *c, enum dl_right r,
			  const struct dl_str **out)
{
	*out = NULL;
	return c->user ? dl_user_prefixes(acc(c)->users, c->user, r, out) : 0;
}

const char *dl_access_user(const struct dl_conn *c)
{
	return c->user ? dl_user_name(c->user) : "-";
}

int dl_access_owner_key(const struct dl_conn *c, struct dl_str id, char *buf,
			struct dl_str *out)
{
	return dl_owner_key(buf, c->user ? c->user->name : "", id, out);
}

int dl_access_prove_owner(struct dl_conn *c, struct dl_str id,
			  struct dl_str secret)
{
	char key[DL_OWNER_KEY_MAX + 1], fresh[DL_OWNER_SECRET_NEW + 1];
	struct dl_str k;
	int err;

	if ((err = dl_access_owner_key(c, id, key, &k)) != 0)
		return err;
	/* the session is that owner already: it proved it */
	if (!secret.len && c->sess.owner &&
	    dl_session_owner(&c->sess).len == k.len &&
	    memcmp(dl_session_owner(&c->sess).p, k.p, k.len) == 0)
		return 0;
	if (!secret.len) {
		if ((err = secret_new(fresh)) != 0)
			return err;
		secret = (struct dl_str){fresh, DL_OWNER_SECRET_NEW};
	}
	if ((err = prove(c, k, secret, 0)) != 0)
		return err;
	memcpy(c->owner_secret, secret.p, secret.len);
	c->owner_secret[secret.len] = '\0';
	return 0;
}

int dl_access_sweep(struct dl_conn *c, uint64_t now)
{
	const struct dl_config *cfg = &c->srv->cfg;
	char d[DL_DURATION_TEXT_MAX];

	if (c->authed || !cfg->auth_timeout_ms ||
	    now - c->accepted_ms < cfg->auth_timeout_ms)
		return 0;
	c->srv->st.auth_timeouts++;
	dl_info("conn %llu %s: not authenticated within %s, closing",
		(unsigned long long)c->id, c->peer,
		dl_format_duration(cfg->auth_timeout_ms, d));
	dl_conn_bye(c, "auth-timeout");
	dl_conn_end(c, DL_END_GRACEFUL, "auth timeout");
	return 1;
}

/* ---- reload ------------------------------------------------------------- */

/* End c's session: it is no longer who it proved to be. Its user's count
 * of connections (and of their watches) is given back where it is kept
 * from now on: the default user, or the user of that name in the next
 * table (dl_users_carry). */
static void revoke_session(struct dl_conn *c, struct dl_users *next,
			   const char *why)
{
	struct dl_user *n = NULL;

	dl_notice("conn %llu %s: user %s: %s, closing",
		  (unsigned long long)c->id, c->peer, dl_access_user(c), why);
	if (!c->user->name[0])
		n = c->user;
	else if (next)
		n = dl_users_find(next, (struct dl_str){c->user->name,
							strlen(c->user->name)});
	if (n) {
		n->rt.conns--;
		n->rt.watches -= (uint32_t)dl_watch_conn_count(c);
		dl_conn_share_move(c, n, NULL);
	}
	c->user = NULL;
	dl_conn_bye(c, "revoked");
	dl_conn_end(c, DL_END_GRACEFUL, "revoked");
}

/* What becomes of a session of a file's user in table `next`: NULL (and
 * *why) when it must end. */
static struct dl_user *rebind(const struct dl_conn *c,
			      const struct dl_users *old,
			      const struct dl_users *next, const char **why)
{
	struct dl_user *o = c->user, *n;

	n = next ? dl_users_find(next,
				 (struct dl_str){o->name, strlen(o->name)})
		 : NULL;
	if (!n)
		*why = "gone from the users file";
	else if (c->auth_how == DL_AUTH_SECRET && !dl_user_same_secret(n, o))
		*why = "its secret changed";
	else if (c->auth_how == DL_AUTH_UID &&
		 (!n->has_uid || n->uid != o->uid))
		*why = "its uid changed";
	else if (!dl_user_covers(next, n, old, o))
		*why = "a right it had was taken away";
	else
		return n;
	return NULL;
}

void dl_access_reload(struct dl_server *srv, const struct dl_config *next)
{
	struct dl_access *a = srv->access;
	struct dl_users *nu = a->users, *old = a->users;
	char err[DL_CONFIG_ERR_MAX];
	const char *why;
	struct dl_conn *c;
	struct dl_user *u;
	int pw_changed;

	if (srv->cfg.users_file[0]) {
		if (dl_users_load(srv->cfg.users_file, &nu, err, sizeof(err)) !=
		    0) {
			dl_error("reload: users file unchanged: %s", err);
			nu = old;
		} else {
			dl_users_carry(nu, old);
		}
	}
	pw_changed = !dl_secret_equal(
		(struct dl_str){srv->cfg.password, strlen(srv->cfg.password)},
		(struct dl_str){next->password, strlen(next->password)});
	for (c = srv->conns; c; c = c->next) {
		if (c->end || !c->user)
			continue;
		if (c->auth_how == DL_AUTH_PASSWORD ||
		    c->auth_how == DL_AUTH_OPEN) {
			if (pw_changed)
				revoke_session(
					c, NULL,
					c->auth_how == DL_AUTH_OPEN
						? "a password is now "
						  "required"
						: "the password changed");
			else
				set_quota(c, next);
			continue;
		}
		if (nu == old) {
			set_quota(c, next);
			continue;
		}
		if (!(u = rebind(c, old, nu, &why))) {
			revoke_session(c, nu, why);
			continue;
		}
		c->user = u;
		set_quota(c, next);
	}
	if (nu != old) {
		a->users = nu;
		dl_users_free(old);
		dl_notice("reload: users file %s: %zu users",
			  srv->cfg.users_file, nu->n);
	}
}
