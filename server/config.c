/* SPDX-License-Identifier: MIT */
/*
 * config.c -- the key table, INI loading through inih, checks, diffs.
 *
 * Every key is one row of `keys`: adding a key means adding a row, a field
 * in struct dl_config and its paragraph in conf/dlockd.conf. Values are
 * parsed with the protocol's own strict parsers (durations take the same
 * ms/s/m units as on the wire).
 */
#include "server/config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "proto/proto.h"
#include "proto/slot.h"
#include "server/locktab/locktab.h"
#include "server/part/map.h"
#include "server/log.h"

enum ktype { K_STR, K_U64, K_DUR, K_BOOL, K_LEVEL, K_PERSIST };

/* Internal result of dl_config_set: parsed, but outside the key's bounds. */
#define OUT_OF_RANGE 1

struct key {
	const char *section;
	const char *name;
	enum ktype type;
	size_t off;
	uint64_t min, max; /* K_U64, K_DUR */
	unsigned live : 1; /* SIGHUP applies it */
	unsigned secret : 1;
	uint64_t def;	   /* the default: every type but K_STR */
	const char *def_s; /* ... K_STR's ("" when NULL) */
};

#define F(field) offsetof(struct dl_config, field)
static const struct key keys[] = {
	{"server", "bind", K_STR, F(bind), 0, 0, 0, 0, 0, DL_DEFAULT_BIND},
	{"server", "port", K_U64, F(port), 0, 65535, 0, 0, DL_DEFAULT_PORT,
	 NULL},
	{"server", "unix_socket", K_STR, F(unix_socket), 0, 0, 0, 0, 0, ""},
	{"server", "password", K_STR, F(password), 0, 0, 1, 1, 0, ""},
	{"server", "log_level", K_LEVEL, F(log_level), 0, 0, 1, 0,
	 DL_LOG_NOTICE, NULL},
	{"server", "allow_remote_without_password", K_BOOL,
	 F(allow_remote_without_password), 0, 0, 0, 0, 0, NULL},
	{"server", "users_file", K_STR, F(users_file), 0, 0, 0, 0, 0, ""},
	{"server", "auth_timeout", K_DUR, F(auth_timeout_ms), 0,
	 DL_AUTH_TIMEOUT_MAX_MS, 1, 0, DL_DEFAULT_AUTH_TIMEOUT_MS, NULL},
	{"server", "password_file", K_STR, F(password_file), 0, 0, 1, 0, 0, ""},
	{"server", "allow_short_password", K_BOOL, F(allow_short_password), 0,
	 0, 0, 0, 0, NULL},
	{"limits", "max_connections", K_U64, F(max_connections), 1,
	 DL_MAX_CONNECTIONS_MAX, 1, 0, DL_DEFAULT_MAX_CONNECTIONS, NULL},
	{"limits", "max_waiters_per_lock", K_U64, F(max_waiters), 1,
	 DL_MAX_WAITERS_MAX, 1, 0, DL_DEFAULT_MAX_WAITERS, NULL},
	{"limits", "max_locks_per_owner", K_U64, F(max_locks_per_owner), 1,
	 DL_MAX_LOCKS_PER_OWNER_MAX, 1, 0, DL_DEFAULT_MAX_LOCKS_PER_OWNER,
	 NULL},
	{"limits", "max_output", K_U64, F(max_output), DL_MAX_OUTPUT_MIN,
	 DL_MAX_OUTPUT_MAX, 1, 0, DL_DEFAULT_MAX_OUTPUT, NULL},
	{"limits", "max_output_total", K_U64, F(max_output_total),
	 DL_MAX_OUTPUT_MIN, DL_MAX_OUTPUT_TOTAL_MAX, 1, 0,
	 DL_DEFAULT_MAX_OUTPUT_TOTAL, NULL},
	{"limits", "max_output_per_user", K_U64, F(max_output_per_user), 0,
	 DL_MAX_OUTPUT_TOTAL_MAX, 1, 0, 0, NULL},
	{"limits", "default_ttl", K_DUR, F(default_ttl_ms), 1, DL_TTL_STORE_MAX,
	 1, 0, DL_DEFAULT_TTL_MS, NULL},
	{"limits", "max_ttl", K_DUR, F(max_ttl_ms), 1, DL_TTL_STORE_MAX, 1, 0,
	 DL_DEFAULT_MAX_TTL_MS, NULL},
	{"limits", "tick", K_DUR, F(tick_ms), DL_TICK_MS_MIN, DL_TICK_MS_MAX, 0,
	 0, DL_DEFAULT_TICK_MS, NULL},
	{"limits", "auth_delay", K_DUR, F(auth_delay_ms), 0,
	 DL_AUTH_DELAY_MAX_MS, 1, 0, DL_DEFAULT_AUTH_DELAY_MS, NULL},
	{"limits", "request_timeout", K_DUR, F(request_timeout_ms), 0,
	 DL_REQUEST_TIMEOUT_MAX_MS, 1, 0, DL_DEFAULT_REQUEST_TIMEOUT_MS, NULL},
	{"limits", "idle_timeout", K_DUR, F(idle_timeout_ms), 0,
	 DL_IDLE_TIMEOUT_MAX_MS, 1, 0, DL_DEFAULT_IDLE_TIMEOUT_MS, NULL},
	{"limits", "max_locks", K_U64, F(max_locks), 1, DL_MAX_LOCKS_MAX, 1, 0,
	 DL_DEFAULT_MAX_LOCKS, NULL},
	{"limits", "max_unauth_connections", K_U64, F(max_unauth_connections),
	 0, DL_MAX_CONNECTIONS_MAX, 1, 0, 0, NULL},
	{"limits", "max_unauth_per_address", K_U64, F(max_unauth_per_address),
	 1, DL_MAX_CONNECTIONS_MAX, 1, 0, DL_DEFAULT_MAX_UNAUTH_PER_ADDRESS,
	 NULL},
	{"limits", "max_connects_per_address", K_U64,
	 F(max_connects_per_address), 0, DL_MAX_CONNECTS_PER_ADDRESS_MAX, 1, 0,
	 DL_DEFAULT_MAX_CONNECTS_PER_ADDRESS, NULL},
	{"limits", "max_locks_per_user", K_U64, F(max_locks_per_user), 1,
	 DL_MAX_LOCKS_MAX, 1, 0, DL_DEFAULT_MAX_LOCKS_PER_USER, NULL},
	{"limits", "max_waits_per_user", K_U64, F(max_waits_per_user), 1,
	 DL_MAX_LOCKS_MAX, 1, 0, DL_DEFAULT_MAX_WAITS_PER_USER, NULL},
	{"limits", "max_connections_per_user", K_U64,
	 F(max_connections_per_user), 1, DL_MAX_CONNECTIONS_MAX, 1, 0,
	 DL_DEFAULT_MAX_CONNECTIONS_PER_USER, NULL},
	{"limits", "max_watches_per_user", K_U64, F(max_watches_per_user), 1,
	 DL_WATCHES_MAX, 1, 0, DL_DEFAULT_MAX_WATCHES_PER_USER, NULL},
	{"limits", "max_deadlock_steps_per_user", K_U64,
	 F(max_deadlock_steps_per_user), 0, DL_DEADLOCK_STEPS_MAX, 1, 0,
	 DL_DEFAULT_MAX_DEADLOCK_STEPS_PER_USER, NULL},
	{"limits", "max_watch_events_per_user", K_U64,
	 F(max_watch_events_per_user), 0, DL_WATCH_EVENTS_MAX, 1, 0,
	 DL_DEFAULT_MAX_WATCH_EVENTS_PER_USER, NULL},
	{"persistence", "persist", K_PERSIST, F(persist), 0, 0, 0, 0,
	 DL_PERSIST_REDIS, NULL},
	{"persistence", "redis", K_STR, F(redis), 0, 0, 0, 1, 0,
	 "redis://127.0.0.1:6379/0"},
	{"persistence", "redis_password_file", K_STR, F(redis_password_file), 0,
	 0, 0, 0, 0, ""},
	{"persistence", "redis_prefix", K_STR, F(redis_prefix), 0, 0, 0, 0, 0,
	 "dlock:"},
	{"persistence", "redis_timeout", K_DUR, F(redis_timeout_ms),
	 DL_REDIS_TIMEOUT_MIN_MS, DL_REDIS_TIMEOUT_MAX_MS, 0, 0,
	 DL_DEFAULT_REDIS_TIMEOUT_MS, NULL},
	{"persistence", "min_replicas_ack", K_U64, F(min_replicas_ack), 0,
	 DL_MIN_REPLICAS_ACK_MAX, 0, 0, 0, NULL},
	{"persistence", "restore_grace", K_DUR, F(restore_grace_ms), 0,
	 DL_RESTORE_GRACE_MAX_MS, 0, 0, DL_DEFAULT_RESTORE_GRACE_MS, NULL},
	{"persistence", "allow_nondurable_redis", K_BOOL,
	 F(allow_nondurable_redis), 0, 0, 0, 0, 0, NULL},
	{"persistence", "allow_evicting_redis", K_BOOL, F(allow_evicting_redis),
	 0, 0, 0, 0, 0, NULL},
	{"persistence", "state_dir", K_STR, F(state_dir), 0, 0, 0, 0, 0, ""},
	{"persistence", "accept_token_jump", K_BOOL, F(accept_token_jump), 0, 0,
	 0, 0, 0, NULL},
	{"persistence", "durable_release", K_BOOL, F(durable_release), 0, 0, 1,
	 0, 0, NULL},
	{"metrics", "listen", K_STR, F(metrics), 0, 0, 0, 0, 0, ""},
	{"metrics", "allow_remote_without_tls", K_BOOL, F(metrics_allow_plain),
	 0, 0, 0, 0, 0, NULL},
	{"tls", "cert", K_STR, F(tls_cert), 0, 0, 1, 0, 0, ""},
	{"tls", "key", K_STR, F(tls_key), 0, 0, 1, 0, 0, ""},
	{"tls", "ca", K_STR, F(tls_ca), 0, 0, 1, 0, 0, ""},
	{"tls", "verify_clients", K_BOOL, F(tls_verify_clients), 0, 0, 1, 0, 0,
	 NULL},
	{"tls", "handshake_timeout", K_DUR, F(tls_handshake_timeout_ms),
	 DL_TLS_HANDSHAKE_TIMEOUT_MIN_MS, DL_TLS_HANDSHAKE_TIMEOUT_MAX_MS, 1, 0,
	 DL_DEFAULT_TLS_HANDSHAKE_TIMEOUT_MS, NULL},
	{"cluster", "node_id", K_STR, F(node_id), 0, 0, 0, 0, 0, ""},
	{"cluster", "advertise", K_STR, F(advertise), 0, 0, 0, 0, 0, ""},
	{"cluster", "peers", K_STR, F(peers), 0, 0, 0, 0, 0, ""},
	{"cluster", "leader_lease", K_DUR, F(leader_lease_ms),
	 DL_LEADER_LEASE_MIN_MS, DL_LEADER_LEASE_MAX_MS, 0, 0,
	 DL_DEFAULT_LEADER_LEASE_MS, NULL},
	{"cluster", "max_clock_skew", K_DUR, F(max_clock_skew_ms), 0,
	 DL_MAX_CLOCK_SKEW_MAX_MS, 0, 0, DL_DEFAULT_MAX_CLOCK_SKEW_MS, NULL},
	{"partition", "id", K_STR, F(partition), 0, 0, 0, 0, 0, ""},
};
#undef F

#define NKEYS (sizeof(keys) / sizeof(keys[0]))

static char **str_at(struct dl_config *c, const struct key *k)
{
	return (char **)((char *)c + k->off);
}

static uint64_t *u64_at(struct dl_config *c, const struct key *k)
{
	return (uint64_t *)((char *)c + k->off);
}

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int set_str(char **dst, const char *v)
{
	char *s = strdup(v);

	if (!s)
		return DL_ENOMEM;
	free(*dst);
	*dst = s;
	return 0;
}

void dl_config_defaults(struct dl_config *c)
{
	size_t i;

	memset(c, 0, sizeof(*c));
	for (i = 0; i < NKEYS; i++) {
		if (keys[i].type == K_STR)
			*str_at(c, &keys[i]) =
				strdup(keys[i].def_s ? keys[i].def_s : "");
		else
			*u64_at(c, &keys[i]) = keys[i].def;
	}
	c->redis_password = strdup("");
	/* systemd's StateDirectory= says where (seen.h) */
	if (getenv("STATE_DIRECTORY")) {
		free(c->state_dir);
		c->state_dir = strdup(getenv("STATE_DIRECTORY"));
	}
}

void dl_config_free(struct dl_config *c)
{
	size_t i;

	for (i = 0; i < NKEYS; i++)
		if (keys[i].type == K_STR) {
			free(*str_at(c, &keys[i]));
			*str_at(c, &keys[i]) = NULL;
		}
	if (c->redis_password)
		explicit_bzero(c->redis_password, strlen(c->redis_password));
	free(c->redis_password);
	c->redis_password = NULL;
	free(c->store_prefix);
	c->store_prefix = NULL;
}

static int parse_bool(const char *v, uint64_t *out)
{
	static const char *const yes[] = {"yes", "true", "on", "1"};
	static const char *const no[] = {"no", "false", "off", "0"};
	size_t i;

	for (i = 0; i < 4; i++) {
		if (strcasecmp(v, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(v, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return DL_EBADARG;
}

int dl_config_set(struct dl_config *c, const char *section, const char *key,
		  const char *value, char *err, size_t errlen)
{
	const struct key *k = NULL;
	uint64_t v = 0;
	size_t i;
	int r;

	for (i = 0; i < NKEYS; i++)
		if (strcmp(keys[i].section, section) == 0 &&
		    strcmp(keys[i].name, key) == 0)
			k = &keys[i];
	if (!k) {
		for (i = 0; i < NKEYS; i++)
			if (strcmp(keys[i].section, section) == 0)
				break;
		if (i == NKEYS)
			seterr(err, errlen, "unknown section [%s]", section);
		else
			seterr(err, errlen, "unknown key '%s' in [%s]", key,
			       section);
		return DL_EBADARG;
	}
	switch (k->type) {
	case K_STR:
		return set_str(str_at(c, k), value);
	case K_U64:
		r = dl_parse_u64(value, strlen(value), &v);
		break;
	case K_DUR:
		/* A bare number is ms on the wire, but in a file "30" is more
		 * often meant as seconds than as 30 ms (found by a new user):
		 * a duration here says its unit; 0 (off) needs none. */
		if (value[0] && strspn(value, "0123456789") == strlen(value) &&
		    strspn(value, "0") != strlen(value)) {
			seterr(err, errlen,
			       "%s: '%s' needs a unit: %sms, %ss, %sm or %sh",
			       key, value, value, value, value, value);
			return DL_EBADARG;
		}
		r = dl_parse_duration(value, strlen(value), &v);
		break;
	case K_BOOL:
		r = parse_bool(value, &v);
		if (r)
			seterr(err, errlen, "%s: expected yes or no", key);
		break;
	case K_LEVEL:
		r = dl_log_parse_level(value);
		v = (uint64_t)r;
		r = r < 0 ? DL_EBADARG : 0;
		if (r)
			seterr(err, errlen,
			       "%s: expected error, warn, notice, info or debug",
			       key);
		break;
	case K_PERSIST:
		r = 0;
		if (strcmp(value, "none") == 0)
			v = DL_PERSIST_NONE;
		else if (strcmp(value, "redis") == 0)
			v = DL_PERSIST_REDIS;
		else
			r = DL_EBADARG;
		if (r)
			seterr(err, errlen, "%s: expected none or redis", key);
		break;
	default:
		r = DL_EBADARG;
	}
	if (r == 0 && (k->type == K_U64 || k->type == K_DUR) &&
	    (v < k->min || v > k->max))
		r = OUT_OF_RANGE;
	if (r == OUT_OF_RANGE) {
		seterr(err, errlen, "%s: %s out of range [%llu, %llu]%s", key,
		       value, (unsigned long long)k->min,
		       (unsigned long long)k->max,
		       k->type == K_DUR ? " ms" : "");
		return DL_EBADARG;
	}
	if (r) {
		if (k->type == K_U64)
			seterr(err, errlen, "%s: '%s' is not a number", key,
			       value);
		else if (k->type == K_DUR)
			seterr(err, errlen,
			       "%s: '%s' is not a duration (e.g. 500ms, 30s, 5m)",
			       key, value);
		return DL_EBADARG;
	}
	*u64_at(c, k) = v;
	return 0;
}

/* inih tells a handler no line number (Debian builds it without
 * INI_HANDLER_LINENO), so the file is read through a reader that counts
 * lines: when a key reaches the handler, its line was the last one read. */
struct ini_ctx {
	struct dl_config *c;
	FILE *f;
	int line;	       /* lines read so far */
	char raw[DL_LINE_MAX]; /* the last line read, as it was */
	int seen[NKEYS];       /* the line each key was given on, 0: not yet */
	char err[DL_CONFIG_ERR_MAX];
	int failed;
};

static char *read_line(char *buf, int size, void *stream)
{
	struct ini_ctx *x = stream;
	char *s = fgets(buf, size, x->f);

	if (s && strchr(s, '\n'))
		x->line++;
	if (s)
		snprintf(x->raw, sizeof(x->raw), "%s", s);
	return s;
}

/* A secret written in the file: refused if inih may have cut it (a
 * comment starts at " ;") or if it holds '#', loudly, rather than used
 * shorter than written. */
static int secret_cut(const struct ini_ctx *x)
{
	const char *v = strchr(x->raw, '=');

	return v && strpbrk(v + 1, ";#") != NULL;
}

static int on_ini_key(void *user, const char *section, const char *name,
		      const char *value)
{
	struct ini_ctx *x = user;
	size_t i;

	for (i = 0; i < NKEYS; i++)
		if (strcmp(keys[i].section, section) == 0 &&
		    strcmp(keys[i].name, name) == 0)
			break;
	if (i < NKEYS && x->seen[i]) {
		if (!x->failed)
			seterr(x->err, sizeof(x->err),
			       "'%s' in [%s] given twice, lines %d and %d: keep one",
			       name, section, x->seen[i], x->line);
		x->failed = 1;
		return 0;
	}
	if (i < NKEYS)
		x->seen[i] = x->line;
	if (i < NKEYS && keys[i].secret && secret_cut(x)) {
		if (!x->failed)
			seterr(x->err, sizeof(x->err),
			       "%s: a secret here may not contain ';' or '#' "
			       "(';' starts a comment): put it in a file of "
			       "its own (password_file, redis_password_file)",
			       name);
		x->failed = 1;
		return 0;
	}
	if (dl_config_set(x->c, section, name, value, x->failed ? NULL : x->err,
			  sizeof(x->err)) != 0) {
		x->failed = 1;
		return 0;
	}
	return 1;
}

/* A node id: letters, digits and . _ - : only (it is a word in the
 * leadership record and on the wire). */
static int node_id_ok(const char *s)
{
	size_t n = strlen(s), i;

	if (n > DL_NODE_ID_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-:", s[i]))
			return 0;
	return 1;
}

/* [cluster] peers: node ids, blank or comma separated, at most
 * DL_PEERS_MAX, none twice and none this daemon's own; only with a
 * node_id (a standalone daemon has no peers). */
static int check_peers(const struct dl_config *c, char *err, size_t errlen)
{
	char ids[DL_PEERS_MAX][DL_NODE_ID_MAX + 1];
	const char *p = c->peers;
	int n = 0, i;
	size_t len;

	for (;;) {
		p += strspn(p, " ,\t");
		if (!*p)
			break;
		len = strcspn(p, " ,\t");
		if (n == DL_PEERS_MAX || len > DL_NODE_ID_MAX) {
			seterr(err, errlen,
			       "[cluster] peers: at most %d node ids of at most %d bytes",
			       DL_PEERS_MAX, DL_NODE_ID_MAX);
			return DL_EBADARG;
		}
		memcpy(ids[n], p, len);
		ids[n][len] = '\0';
		p += len;
		if (!node_id_ok(ids[n])) {
			seterr(err, errlen,
			       "[cluster] peers: %s is not a node id (letters, digits and . _ - :)",
			       ids[n]);
			return DL_EBADARG;
		}
		for (i = 0; i < n; i++)
			if (strcmp(ids[i], ids[n]) == 0) {
				seterr(err, errlen,
				       "[cluster] peers: %s is named twice",
				       ids[n]);
				return DL_EBADARG;
			}
		if (strcmp(ids[n], c->node_id) == 0) {
			seterr(err, errlen,
			       "[cluster] peers: %s is this daemon's own node_id; name the other nodes",
			       ids[n]);
			return DL_EBADARG;
		}
		n++;
	}
	if (n && !c->node_id[0]) {
		seterr(err, errlen,
		       "[cluster] peers needs node_id: a daemon without one is standalone, and has no peers");
		return DL_EBADARG;
	}
	return 0;
}

/* [tls] keys go together; the metrics page leaves loopback only over TLS
 * (it tells how busy which locks are), unless the operator says so. The
 * files themselves are read by tls.c (start-up, --check-config, SIGHUP). */
static int check_tls(const struct dl_config *c, char *err, size_t errlen)
{
	char host[256];
	int port;

	if (!c->tls_cert[0] != !c->tls_key[0]) {
		seterr(err, errlen,
		       "[tls] cert and key go together: set both, or neither");
		return DL_EBADARG;
	}
	if (!c->tls_cert[0] && (c->tls_ca[0] || c->tls_verify_clients)) {
		seterr(err, errlen,
		       "[tls] ca and verify_clients need cert and key (TLS is off without them)");
		return DL_EBADARG;
	}
	if (c->tls_verify_clients && !c->tls_ca[0]) {
		seterr(err, errlen,
		       "[tls] verify_clients needs ca: the CA that signs the client certificates");
		return DL_EBADARG;
	}
	if (c->metrics[0] && !c->tls_cert[0] && !c->metrics_allow_plain &&
	    dl_hostport_parse(c->metrics, host, sizeof(host), &port) == 0 &&
	    !dl_addr_is_loopback(host)) {
		seterr(err, errlen,
		       "[metrics] listen = %s is not a loopback address and TLS is off: the page would cross the network in the clear; set [tls] cert and key, or [metrics] allow_remote_without_tls = yes",
		       c->metrics);
		return DL_EBADARG;
	}
	return 0;
}

static int check(const struct dl_config *c, char *err, size_t errlen)
{
	struct dl_redis_addr a;
	char host[256];
	size_t off, taglen;
	int port, tagged;

	if (c->default_ttl_ms > c->max_ttl_ms) {
		seterr(err, errlen,
		       "default_ttl (%llu ms) above max_ttl (%llu ms)",
		       (unsigned long long)c->default_ttl_ms,
		       (unsigned long long)c->max_ttl_ms);
		return DL_EBADARG;
	}
	if (c->port == 0 && !c->unix_socket[0]) {
		seterr(err, errlen,
		       "port 0 and no unix_socket: nothing to listen on");
		return DL_EBADARG;
	}
	if (c->persist == DL_PERSIST_REDIS) {
		if (dl_redis_url_parse(c->redis, &a) != 0) {
			seterr(err, errlen,
			       "redis: bad URL (expected redis://[:password@]host[:port][/db], unix:///path.sock, sentinel://[:password@]host:port,host:port/master or redis-cluster://[:password@]host:port,host:port)");
			return DL_EBADARG;
		}
		tagged = dl_hash_tag(c->redis_prefix, strlen(c->redis_prefix),
				     &off, &taglen);
		if (c->partition[0] && tagged) {
			dl_redis_addr_free(&a);
			seterr(err, errlen,
			       "redis_prefix \"%s\" holds a hash tag: with [partition] id it is the base of every partition's keys, each under its own {<id>}",
			       c->redis_prefix);
			return DL_EBADARG;
		}
		if (a.cluster && !tagged && !c->partition[0]) {
			dl_redis_addr_free(&a);
			seterr(err, errlen,
			       "redis_prefix \"%s\" holds no hash tag: with a Redis Cluster every key of the lock table must be in one slot, so the prefix needs a {tag} (e.g. dlock:{locks}:)",
			       c->redis_prefix);
			return DL_EBADARG;
		}
		dl_redis_addr_free(&a);
	}
	if (c->metrics[0] &&
	    dl_hostport_parse(c->metrics, host, sizeof(host), &port) != 0) {
		seterr(err, errlen, "[metrics] listen: expected host:port");
		return DL_EBADARG;
	}
	if (check_tls(c, err, errlen) != 0)
		return DL_EBADARG;
	if (c->partition[0] &&
	    (!dl_map_id_valid(c->partition, strlen(c->partition)) ||
	     strcmp(c->partition, "map") == 0)) {
		seterr(err, errlen,
		       "[partition] id: 1 to %d of A-Z a-z 0-9 _ -, not \"map\"",
		       DL_PART_ID_MAX);
		return DL_EBADARG;
	}
	if (c->partition[0] && c->persist != DL_PERSIST_REDIS) {
		seterr(err, errlen,
		       "[partition] id needs persist = redis: the partition map is kept there");
		return DL_EBADARG;
	}
	if (!node_id_ok(c->node_id)) {
		seterr(err, errlen,
		       "[cluster] node_id: at most %d letters, digits and . _ - :",
		       DL_NODE_ID_MAX);
		return DL_EBADARG;
	}
	if (check_peers(c, err, errlen) != 0)
		return DL_EBADARG;
	if (c->advertise[0] &&
	    (strlen(c->advertise) > DL_ADVERTISE_MAX ||
	     strpbrk(c->advertise, " \t") ||
	     dl_hostport_parse(c->advertise, host, sizeof(host), &port) != 0)) {
		seterr(err, errlen,
		       "[cluster] advertise: expected host:port (at most %d bytes)",
		       DL_ADVERTISE_MAX);
		return DL_EBADARG;
	}
	if (c->port && !dl_addr_is_loopback(c->bind) && c->password[0] &&
	    strlen(c->password) < DL_PASSWORD_MIN && !c->allow_short_password) {
		seterr(err, errlen,
		       "the password is shorter than %d characters and %s is "
		       "not loopback: use a longer one (dlockd --new-secret "
		       "makes one), or allow_short_password = yes",
		       DL_PASSWORD_MIN, c->bind);
		return DL_EBADARG;
	}
	if (c->users_file[0] && c->password[0]) {
		seterr(err, errlen,
		       "password and users_file are both set: with a users "
		       "file every client is a user (give the password's "
		       "holders a line of their own: dlockd --new-secret)");
		return DL_EBADARG;
	}
	if (c->port && !dl_addr_is_loopback(c->bind) && !c->password[0] &&
	    !c->users_file[0] && !c->allow_remote_without_password) {
		seterr(err, errlen,
		       "refusing to listen on %s without a password: set password, or allow_remote_without_password = yes",
		       c->bind);
		return DL_EBADARG;
	}
	return 0;
}

/* ---- secrets from files -------------------------------------------------- */

/* The secret in the first line of `path` (newline stripped) into *out.
 * `what` names the key in errors. */
static int read_secret(const char *what, const char *path, char **out,
		       char *err, size_t errlen)
{
	char buf[DL_LINE_MAX + 2];
	FILE *f = fopen(path, "r");
	size_t n;

	if (!f) {
		seterr(err, errlen, "%s %s: cannot open: %s", what, path,
		       strerror(errno));
		return DL_EBADARG;
	}
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	n = strcspn(buf, "\r\n");
	buf[n] = '\0';
	if (n == 0 || n > DL_LINE_MAX / 2) {
		explicit_bzero(buf, sizeof(buf));
		seterr(err, errlen, "%s %s: %s", what, path,
		       n ? "the secret is too long"
			 : "no secret on its first line");
		return DL_EBADARG;
	}
	free(*out);
	*out = strdup(buf);
	explicit_bzero(buf, sizeof(buf));
	return *out ? 0 : DL_ENOMEM;
}

/* $CREDENTIALS_DIRECTORY/<name> if it exists, into path. */
static int credential(const char *name, char *path, size_t len)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");

	if (!dir || !dir[0])
		return 0;
	snprintf(path, len, "%s/%s", dir, name);
	return access(path, R_OK) == 0;
}

/* A Redis URL as it may be shown: the password in it (after "user:" and
 * before "@", or a password= option) replaced by ***. */
static const char *masked_url(const char *u, char *out, size_t cap)
{
	const char *at = strrchr(u, '@'), *pw = strstr(u, "password="), *colon,
		   *end;
	size_t skip = strncmp(u, "sentinel://", 11) == 0 ? 11
		      : strncmp(u, "redis://", 8) == 0	 ? 8
							 : 0;

	if (at && skip &&
	    (colon = memchr(u + skip, ':', (size_t)(at - u - skip))))
		snprintf(out, cap, "%.*s:***%s", (int)(colon - u), u, at);
	else if (pw) {
		end = strchr(pw, '&');
		snprintf(out, cap, "%.*s***%s", (int)(pw + 9 - u), u,
			 end ? end : "");
	} else
		snprintf(out, cap, "%s", u);
	return out;
}

/* The secrets kept out of dlockd.conf: their files, then the systemd
 * credentials for what the file does not give. */
static int load_secrets(struct dl_config *c, char *err, size_t errlen)
{
	char path[4096];
	struct dl_redis_addr a;
	int r, url_pw = 0;

	if (c->persist == DL_PERSIST_REDIS &&
	    dl_redis_url_parse(c->redis, &a) == 0) {
		url_pw = a.password != NULL;
		dl_redis_addr_free(&a);
	}
	if (c->password_file[0] && c->password[0]) {
		seterr(err, errlen,
		       "password and password_file are both set: keep one");
		return DL_EBADARG;
	}
	if (c->password_file[0] &&
	    (r = read_secret("password_file", c->password_file, &c->password,
			     err, errlen)) != 0)
		return r;
	if (!c->password[0] && !c->users_file[0] &&
	    credential("dlockd.password", path, sizeof(path)) &&
	    (r = read_secret("credential", path, &c->password, err, errlen)) !=
		    0)
		return r;
	if (!c->users_file[0] && !c->password[0] &&
	    credential("dlockd.users", path, sizeof(path)) &&
	    set_str(&c->users_file, path) != 0)
		return DL_ENOMEM;
	if (c->redis_password_file[0] && url_pw) {
		seterr(err, errlen,
		       "a password in the redis URL and redis_password_file: "
		       "keep the file");
		return DL_EBADARG;
	}
	if (c->redis_password_file[0])
		return read_secret("redis_password_file",
				   c->redis_password_file, &c->redis_password,
				   err, errlen);
	if (!url_pw && credential("dlockd.redis-password", path, sizeof(path)))
		return read_secret("credential", path, &c->redis_password, err,
				   errlen);
	return 0;
}

const char *dl_config_store_prefix(const struct dl_config *c)
{
	return c->store_prefix ? c->store_prefix : c->redis_prefix;
}

/* The prefix of the lock table's keys: redis_prefix, or for a partition
 * <redis_prefix>{<id>}: (one slot per partition). */
static int store_prefix(struct dl_config *c, char *err, size_t errlen)
{
	size_t n = strlen(c->redis_prefix) + strlen(c->partition) + 4;

	free(c->store_prefix);
	if (!(c->store_prefix = malloc(n))) {
		seterr(err, errlen, "out of memory");
		return DL_ENOMEM;
	}
	if (c->partition[0])
		snprintf(c->store_prefix, n, "%s{%s}:", c->redis_prefix,
			 c->partition);
	else
		snprintf(c->store_prefix, n, "%s", c->redis_prefix);
	return 0;
}

int dl_config_load(struct dl_config *c, const char *path,
		   const struct dl_override *ov, size_t nov, char *err,
		   size_t errlen)
{
	struct ini_ctx x = {.c = c};
	char kerr[DL_CONFIG_ERR_MAX];
	size_t i;
	int line, r;

	dl_config_defaults(c);
	if (path) {
		if (!(x.f = fopen(path, "r"))) {
			seterr(err, errlen, "%s: cannot open: %s", path,
			       strerror(errno));
			return DL_EBADARG;
		}
		line = ini_parse_stream(read_line, &x, on_ini_key, &x);
		fclose(x.f);
		if (line == -2) {
			seterr(err, errlen, "%s: out of memory", path);
			return DL_ENOMEM;
		}
		if (line > 0) {
			seterr(err, errlen, "%s:%d: %s", path, line,
			       x.failed ? x.err : "syntax error");
			return DL_EBADARG;
		}
	}
	for (i = 0; i < nov; i++) {
		if (dl_config_set(c, ov[i].section, ov[i].key, ov[i].value,
				  kerr, sizeof(kerr)) != 0) {
			seterr(err, errlen, "command line: %s", kerr);
			return DL_EBADARG;
		}
	}
	if ((r = load_secrets(c, err, errlen)) != 0)
		return r;
	if ((r = check(c, err, errlen)) != 0)
		return r;
	return store_prefix(c, err, errlen);
}

size_t dl_config_diff(const struct dl_config *old, const struct dl_config *new,
		      void (*report)(const char *section, const char *key,
				     int live, void *arg),
		      void *arg)
{
	struct dl_config *o = (struct dl_config *)old;
	struct dl_config *n = (struct dl_config *)new;
	size_t i, count = 0;
	int differ;

	for (i = 0; i < NKEYS; i++) {
		if (keys[i].type == K_STR)
			differ = strcmp(*str_at(o, &keys[i]),
					*str_at(n, &keys[i])) != 0;
		else
			differ = *u64_at(o, &keys[i]) != *u64_at(n, &keys[i]);
		if (differ) {
			count++;
			report(keys[i].section, keys[i].name, keys[i].live,
			       arg);
		}
	}
	return count;
}

int dl_config_apply_live(struct dl_config *cur, const struct dl_config *next)
{
	struct dl_config *n = (struct dl_config *)next;
	size_t i;

	for (i = 0; i < NKEYS; i++) {
		if (!keys[i].live)
			continue;
		if (keys[i].type == K_STR) {
			if (set_str(str_at(cur, &keys[i]),
				    *str_at(n, &keys[i])) != 0)
				return DL_ENOMEM;
		} else {
			*u64_at(cur, &keys[i]) = *u64_at(n, &keys[i]);
		}
	}
	return 0;
}

void dl_config_dump(const struct dl_config *c, int fd)
{
	struct dl_config *m = (struct dl_config *)c;
	const char *section = "";
	const struct key *k;
	char buf[512], url[512];
	uint64_t v;
	size_t i;
	int n;

	for (i = 0; i < NKEYS; i++) {
		k = &keys[i];
		if (strcmp(section, k->section) != 0) {
			section = k->section;
			n = snprintf(buf, sizeof(buf), "%s[%s]\n",
				     i ? "\n" : "", section);
			if (write(fd, buf, (size_t)n) < 0)
				return;
		}
		v = k->type == K_STR ? 0 : *u64_at(m, k);
		if (k->type == K_STR &&
		    k->off == offsetof(struct dl_config, redis))
			n = snprintf(
				buf, sizeof(buf), "%s = %s\n", k->name,
				masked_url(*str_at(m, k), url, sizeof(url)));
		else if (k->type == K_STR)
			n = snprintf(buf, sizeof(buf), "%s = %s\n", k->name,
				     k->secret && (*str_at(m, k))[0]
					     ? "(set)"
					     : *str_at(m, k));
		else if (k->type == K_DUR)
			n = snprintf(buf, sizeof(buf), "%s = %llums\n", k->name,
				     (unsigned long long)v);
		else if (k->type == K_BOOL)
			n = snprintf(buf, sizeof(buf), "%s = %s\n", k->name,
				     v ? "yes" : "no");
		else if (k->type == K_LEVEL)
			n = snprintf(buf, sizeof(buf), "%s = %s\n", k->name,
				     dl_log_level_name((int)v));
		else if (k->type == K_PERSIST)
			n = snprintf(buf, sizeof(buf), "%s = %s\n", k->name,
				     v == DL_PERSIST_REDIS ? "redis" : "none");
		else
			n = snprintf(buf, sizeof(buf), "%s = %llu\n", k->name,
				     (unsigned long long)v);
		if (n > 0 && write(fd, buf, (size_t)n) < 0)
			return;
	}
}

/* ---- addresses --------------------------------------------------------- */

void dl_redis_addr_free(struct dl_redis_addr *a)
{
	int i;

	free(a->host);
	free(a->path);
	free(a->password);
	free(a->user);
	free(a->master);
	free(a->sentinel_password);
	for (i = 0; i < a->nseeds; i++)
		free(a->seed_host[i]);
	memset(a, 0, sizeof(*a));
}

static int parse_int(const char *s, size_t len, uint64_t max, int *out)
{
	uint64_t v;

	if (dl_parse_u64(s, len, &v) || v > max)
		return DL_EBADARG;
	*out = (int)v;
	return 0;
}

static char *strndup_or_null(const char *s, size_t n)
{
	return n ? strndup(s, n) : NULL;
}

/* ?db=N&user=U&password=P */
static int parse_query(const char *q, struct dl_redis_addr *a)
{
	const char *opt, *amp, *eq;

	for (opt = q ? q + 1 : NULL; opt && *opt; opt = amp ? amp + 1 : NULL) {
		amp = strchr(opt, '&');
		eq = strchr(opt, '=');
		if (!eq || (amp && eq > amp))
			return DL_EBADARG;
		size_t vlen = amp ? (size_t)(amp - eq - 1) : strlen(eq + 1);
		if (strncmp(opt, "db=", 3) == 0) {
			if (parse_int(eq + 1, vlen, 1000000, &a->db))
				return DL_EBADARG;
		} else if (strncmp(opt, "password=", 9) == 0) {
			free(a->password);
			a->password = strndup_or_null(eq + 1, vlen);
		} else if (strncmp(opt, "user=", 5) == 0) {
			free(a->user);
			a->user = strndup_or_null(eq + 1, vlen);
		} else {
			return DL_EBADARG;
		}
	}
	return 0;
}

static int parse_unix_url(const char *p, struct dl_redis_addr *a)
{
	const char *q = strchr(p, '?');
	size_t plen = q ? (size_t)(q - p) : strlen(p);

	if (plen == 0 || p[0] != '/')
		return DL_EBADARG;
	a->path = strndup(p, plen);
	if (!a->path)
		return DL_ENOMEM;
	return parse_query(q, a);
}

/* One host[:port] of a list of Sentinels or cluster nodes ([v6]:port
 * too); `port` when it says none. */
static int parse_seed(const char *p, size_t n, struct dl_redis_addr *a,
		      int port)
{
	const char *colon = NULL, *h = p, *close;
	size_t hlen = n;

	if (n == 0 || a->nseeds == DL_SEEDS_MAX)
		return DL_EBADARG;
	if (p[0] == '[') {
		close = memchr(p, ']', n);
		if (!close)
			return DL_EBADARG;
		h = p + 1;
		hlen = (size_t)(close - p - 1);
		if (close + 1 < p + n) {
			if (close[1] != ':')
				return DL_EBADARG;
			colon = close + 1;
		}
	} else if ((colon = memchr(p, ':', n)) != NULL) {
		hlen = (size_t)(colon - p);
	}
	if (hlen == 0 ||
	    (colon &&
	     parse_int(colon + 1, (size_t)(p + n - colon - 1), 65535, &port)) ||
	    port == 0)
		return DL_EBADARG;
	a->seed_host[a->nseeds] = strndup(h, hlen);
	if (!a->seed_host[a->nseeds])
		return DL_ENOMEM;
	a->seed_port[a->nseeds++] = port;
	return 0;
}

static int parse_sentinel_url(const char *p, struct dl_redis_addr *a)
{
	const char *at = strchr(p, '@'), *slash, *q, *comma, *colon;
	int r;

	slash = strchr(p, '/');
	if (at && slash && at > slash)
		at = NULL; /* an @ in the master's name or the query */
	if (at) {
		colon = memchr(p, ':', (size_t)(at - p));
		if (!colon)
			return DL_EBADARG;
		a->sentinel_password =
			strndup_or_null(colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	if (!slash || slash == p)
		return DL_EBADARG;
	while (p < slash) {
		comma = memchr(p, ',', (size_t)(slash - p));
		if ((r = parse_seed(p, (size_t)((comma ? comma : slash) - p), a,
				    DL_SENTINEL_DEFAULT_PORT)) != 0)
			return r;
		p = comma ? comma + 1 : slash;
	}
	q = strchr(slash + 1, '?');
	a->master = strndup(slash + 1,
			    q ? (size_t)(q - slash - 1) : strlen(slash + 1));
	if (!a->master)
		return DL_ENOMEM;
	if (!a->master[0] || strpbrk(a->master, " /"))
		return DL_EBADARG;
	a->port = 0;
	return parse_query(q, a);
}

/* [[user]:password@]host[:port][,host[:port]...][/][?user=U&password=P] */
static int parse_cluster_url(const char *p, struct dl_redis_addr *a)
{
	const char *q = strchr(p, '?'), *end, *at, *colon, *comma;
	int r;

	end = q ? q : p + strlen(p);
	if (end > p && end[-1] == '/')
		end--;
	if (memchr(p, '/', (size_t)(end - p)))
		return DL_EBADARG; /* no db: a cluster has db 0 only */
	at = memchr(p, '@', (size_t)(end - p));
	if (at) {
		colon = memchr(p, ':', (size_t)(at - p));
		if (!colon)
			return DL_EBADARG;
		a->user = strndup_or_null(p, (size_t)(colon - p));
		a->password =
			strndup_or_null(colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	if (p == end)
		return DL_EBADARG;
	while (p < end) {
		comma = memchr(p, ',', (size_t)(end - p));
		if ((r = parse_seed(p, (size_t)((comma ? comma : end) - p), a,
				    DL_REDIS_DEFAULT_PORT)) != 0)
			return r;
		p = comma ? comma + 1 : end;
	}
	a->cluster = 1;
	a->port = 0;
	if ((r = parse_query(q, a)) != 0)
		return r;
	return a->db ? DL_EBADARG : 0;
}

int dl_redis_url_parse(const char *url, struct dl_redis_addr *a)
{
	const char *p, *at, *slash, *colon, *host;
	size_t hlen;
	int r;

	memset(a, 0, sizeof(*a));
	a->port = DL_REDIS_DEFAULT_PORT;
	if (strncmp(url, "unix://", 7) == 0) {
		r = parse_unix_url(url + 7, a);
		if (r)
			dl_redis_addr_free(a);
		return r;
	}
	if (strncmp(url, "sentinel://", 11) == 0) {
		r = parse_sentinel_url(url + 11, a);
		if (r)
			dl_redis_addr_free(a);
		return r;
	}
	if (strncmp(url, "redis-cluster://", 16) == 0) {
		r = parse_cluster_url(url + 16, a);
		if (r)
			dl_redis_addr_free(a);
		return r;
	}
	if (strncmp(url, "redis://", 8) != 0)
		return DL_EBADARG;
	p = url + 8;
	at = strrchr(p, '@');
	if (at) {
		/* [user]:password@: a Redis ACL user (AUTH user password),
		 * or the default user with only a password */
		colon = memchr(p, ':', (size_t)(at - p));
		if (!colon)
			goto bad;
		a->user = strndup_or_null(p, (size_t)(colon - p));
		a->password =
			strndup_or_null(colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	slash = strchr(p, '/');
	hlen = slash ? (size_t)(slash - p) : strlen(p);
	host = p;
	if (hlen && host[0] == '[') { /* [::1]:6379 */
		const char *close = memchr(host, ']', hlen);
		if (!close)
			goto bad;
		a->host = strndup(host + 1, (size_t)(close - host - 1));
		colon = close + 1 < host + hlen && close[1] == ':' ? close + 1
								   : NULL;
	} else {
		colon = memchr(host, ':', hlen);
		a->host = strndup(host, colon ? (size_t)(colon - host) : hlen);
	}
	if (!a->host || !a->host[0])
		goto bad;
	if (colon && parse_int(colon + 1, (size_t)(host + hlen - colon - 1),
			       65535, &a->port))
		goto bad;
	if (slash && slash[1] &&
	    parse_int(slash + 1, strlen(slash + 1), 1000000, &a->db))
		goto bad;
	return 0;
bad:
	dl_redis_addr_free(a);
	return DL_EBADARG;
}

int dl_hostport_parse(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');
	const char *h = s;
	size_t n;

	if (!colon || colon == s)
		return DL_EBADARG;
	n = (size_t)(colon - s);
	if (s[0] == '[') {
		if (n < 3 || s[n - 1] != ']')
			return DL_EBADARG;
		h = s + 1;
		n -= 2;
	}
	if (n >= hostlen ||
	    parse_int(colon + 1, strlen(colon + 1), 65535, port) != 0 ||
	    *port == 0)
		return DL_EBADARG;
	memcpy(host, h, n);
	host[n] = '\0';
	return 0;
}

int dl_addr_is_loopback(const char *addr)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (strcmp(addr, "localhost") == 0)
		return 1;
	if (inet_pton(AF_INET, addr, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, addr, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return 0;
}
