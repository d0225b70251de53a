/* SPDX-License-Identifier: MIT */
/*
 * config.h -- dlockd's configuration: defaults, the INI file, flags.
 *
 * One table in config.c describes every key (section, name, type, bounds,
 * whether SIGHUP can change it live); loading, validation, command-line
 * overrides and the reload report are all driven by it, so a key exists in
 * exactly one place. conf/dlockd.conf documents each key.
 *
 * Order of precedence: defaults < file < command-line flags. Flags are
 * kept as overrides so that a SIGHUP reload re-applies them over the
 * re-read file.
 *
 * Strings in struct dl_config are owned by it (dl_config_free).
 *
 * Secrets. A secret may come from the file (password, the redis URL), but
 * better from a file of its own (password_file, redis_password_file: the
 * whole first line, its newline stripped) or from systemd's credentials
 * ($CREDENTIALS_DIRECTORY/dlockd.password, dlockd.redis-password and
 * dlockd.users, used when the file names no other source), so that
 * dlockd.conf holds none and may stay readable. A secret written in
 * dlockd.conf with ';' or '#' is refused: inih takes " ;" for the start
 * of a comment and would cut it silently.
 */
#ifndef DL_SERVER_CONFIG_H
#define DL_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "proto/limits.h"

enum dl_persist { DL_PERSIST_NONE = 0, DL_PERSIST_REDIS = 1 };

struct dl_config {
	/* [server] */
	char *bind;	    /* address of the TCP listener */
	uint64_t port;	    /* 0: no TCP listener */
	char *unix_socket;  /* path, "" for none */
	char *password;	    /* "" for none: AUTH not required */
	uint64_t log_level; /* enum dl_log_level */
	uint64_t allow_remote_without_password; /* bool */
	char *users_file;			/* "" none (users.h) */
	uint64_t auth_timeout_ms; /* not authenticated: closed; 0 off */
	char *password_file;	  /* "" none: the password is its 1st line */
	uint64_t allow_short_password; /* bool: below DL_PASSWORD_MIN, on a
					  non-loopback bind */
	/* [limits] */
	uint64_t max_connections;
	uint64_t max_waiters; /* per lock */
	uint64_t max_locks_per_owner;
	uint64_t max_output;	      /* bytes queued per connection */
	uint64_t max_output_total;    /* ... and for all of them (conn.h) */
	uint64_t max_output_per_user; /* ... of one user's; 0: a share */
	uint64_t default_ttl_ms;
	uint64_t max_ttl_ms;
	uint64_t tick_ms;
	uint64_t auth_delay_ms;		 /* after a failed AUTH */
	uint64_t request_timeout_ms;	 /* an incomplete line, 0 off */
	uint64_t idle_timeout_ms;	 /* no request at all, 0 off */
	uint64_t max_locks;		 /* locks at once, all clients */
	uint64_t max_unauth_connections; /* 0: max_connections / 2 */
	uint64_t max_unauth_per_address;
	uint64_t max_connects_per_address; /* a second; 0: no limit */
	uint64_t max_locks_per_user; /* quotas of a user without its own */
	uint64_t max_waits_per_user;
	uint64_t max_connections_per_user;
	uint64_t max_watches_per_user;
	uint64_t max_deadlock_steps_per_user; /* a second's, cmd.c */
	uint64_t max_watch_events_per_user;   /* a second's, watch.c */
	/* [persistence] */
	uint64_t persist;	   /* enum dl_persist */
	char *redis;		   /* URL, see dl_redis_url_parse */
	char *redis_password_file; /* "" none */
	char *redis_password;	   /* read from redis_password_file (or the
				      systemd credential): not a key; "" none */
	char *redis_prefix;
	uint64_t redis_timeout_ms;
	uint64_t restore_grace_ms;
	uint64_t min_replicas_ack; /* WAIT for this many replicas: 0 off */
	uint64_t allow_nondurable_redis; /* bool: serve on a Redis without
					    AOF (store_durable.c) */
	uint64_t allow_evicting_redis;	 /* bool: serve on a Redis whose
					    maxmemory-policy may evict keys */
	char *state_dir; /* dlockd.<id>.state's directory (seen.h), "" none */
	uint64_t accept_token_jump; /* bool: go on from a token mark or epoch
				       no daemon could have written */
	uint64_t durable_release;   /* bool: UNLOCK replies wait for Redis
				       (locktab.h, durable_release) */
	/* [metrics] */
	char *metrics; /* host:port of the Prometheus page, "" off */
	uint64_t metrics_allow_plain; /* bool: a non-loopback page without
					 TLS (allow_remote_without_tls) */
	/* [tls] (server/tls.h): on the TCP port and the metrics page */
	char *tls_cert; /* PEM certificate chain; "" TLS off */
	char *tls_key;	/* its private key (PEM) */
	char *tls_ca;	/* CA of client certificates; "" none asked */
	uint64_t tls_verify_clients;	   /* bool: a certificate required */
	uint64_t tls_handshake_timeout_ms; /* a handshake not done closes */
	/* [cluster]: a node id makes this daemon a cluster member, which
	 * becomes a standby while another holds the leadership */
	char *node_id;	 /* "" standalone */
	char *peers;	 /* the other nodes' ids, blank or comma separated
			    ("" none: no attestation, store_attest.c) */
	char *advertise; /* host:port clients should use, "" derived */
	uint64_t leader_lease_ms;
	/* how far apart the nodes' wall clocks may be (store_load.c) */
	uint64_t max_clock_skew_ms;
	/* [partition] (server/part/part.h): this daemon serves the names
	 * the partition map gives partition `partition` */
	char *partition; /* "" the whole namespace, no map */
	/* Not a key: the prefix of the lock table's keys, set by
	 * dl_config_load: redis_prefix, or <redis_prefix>{<partition>}: */
	char *store_prefix;
};

/* A command-line override of one key, kept for reloads. */
struct dl_override {
	const char *section;
	const char *key;
	const char *value; /* borrowed from argv */
};

#define DL_CONFIG_ERR_MAX 256

/* [cluster] max_clock_skew: how far apart the wall clocks of the daemons
 * of one keyspace may be. Tokens taken up after Redis went back start at
 * least this far ahead of this machine's clock (store_load.c). Far below
 * the day after which a stored mark is not believed (DL_TOKEN_AHEAD_MAX_MS
 * in store_batch.h), so that a node whose clock is behind by this much
 * still believes the mark. */
#define DL_DEFAULT_MAX_CLOCK_SKEW_MS 300000
#define DL_MAX_CLOCK_SKEW_MAX_MS     3600000

void dl_config_defaults(struct dl_config *c);
/* The prefix of the lock table's keys (store_prefix, or redis_prefix
 * for a configuration that dl_config_load did not finish). */
const char *dl_config_store_prefix(const struct dl_config *c);
/* Defaults, then `path` (NULL: none), then the overrides; then checks
 * the whole. On failure returns DL_EBADARG and `err` says what and where
 * ("dlockd.conf:12: unknown key 'prot' in [server]"). */
int dl_config_load(struct dl_config *c, const char *path,
		   const struct dl_override *ov, size_t nov, char *err,
		   size_t errlen);
void dl_config_free(struct dl_config *c);

/* Set one key from text, as the file would. */
int dl_config_set(struct dl_config *c, const char *section, const char *key,
		  const char *value, char *err, size_t errlen);

/* Calls report(key, live) for each key whose value differs between old and
 * new; `live` says whether it applies without a restart. Secrets are
 * reported by name only. Returns the number of differing keys. */
size_t dl_config_diff(const struct dl_config *old, const struct dl_config *new,
		      void (*report)(const char *section, const char *key,
				     int live, void *arg),
		      void *arg);

/* Copy into `cur` the keys of `next` that apply without a restart. */
int dl_config_apply_live(struct dl_config *cur, const struct dl_config *next);

/* Writes the effective configuration as an INI file (secrets masked). */
void dl_config_dump(const struct dl_config *c, int fd);

/* A parsed redis URL: redis://[[user]:password@]host[:port][/db],
 * unix:///path.sock[?db=N][&user=U][&password=P],
 * sentinel://[:sentinel-password@]host[:port][,host[:port]...]/master[?db=N][&user=U][&password=P]
 * (the primary is asked of the Sentinels; host and port are then NULL
 * and 0), or
 * redis-cluster://[[user]:password@]host[:port][,host[:port]...][?user=U][&password=P]
 * (a Redis Cluster: the seeds are asked which primary serves the slot of
 * the prefix's hash tag; db 0 only). Strings are owned (free with
 * dl_redis_addr_free). */
struct dl_redis_addr {
	char *host; /* NULL for unix sockets, Sentinel and a cluster */
	int port;
	char *path;	/* unix socket path, NULL for TCP */
	char *password; /* the primary's; NULL when none */
	char *user;	/* its Redis ACL user; NULL: the default user */
	int db;
	char *master; /* Sentinel's name of the primary; NULL: no Sentinel */
	char *sentinel_password;
	int cluster; /* redis-cluster://: the seeds are cluster nodes */
	int nseeds;  /* the Sentinels or cluster nodes, asked in turn */
	char *seed_host[DL_SEEDS_MAX];
	int seed_port[DL_SEEDS_MAX];
};
int dl_redis_url_parse(const char *url, struct dl_redis_addr *a);
void dl_redis_addr_free(struct dl_redis_addr *a);

/* Split "host:port" or "[v6]:port"; host is NUL-terminated in `host`. */
int dl_hostport_parse(const char *s, char *host, size_t hostlen, int *port);

/* 1 if the address is a loopback address (127/8, ::1, localhost). */
int dl_addr_is_loopback(const char *addr);

#endif /* DL_SERVER_CONFIG_H */
