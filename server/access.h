/* SPDX-License-Identifier: MIT */
/*
 * access.h -- who a connection is, and what it may do.
 *
 * Owns the users table (users.h) and the default user, the counts of
 * connections that have not authenticated (in all and per address), and
 * the summary of failed AUTHs. cmd.c asks it whether a request is
 * allowed and formats the replies; conn.c tells it when a connection
 * comes and goes; server.c when the configuration is reloaded.
 *
 * Who a connection is:
 *   - nothing configured (no password, no users file): the default user,
 *     with every right, from the start;
 *   - a password: nobody until AUTH <password>, then the default user;
 *   - a users file: nobody until AUTH <user> <secret>, or, on the unix
 *     socket, the user whose uid= is the peer's (SO_PEERCRED), or, under
 *     TLS, the user named by the verified client certificate
 *     (dl_access_login_name, from conn.c). The two do not mix: a password
 *     beside a users file is a configuration error.
 * A connection that is nobody has no session (no owner, so no lease, no
 * wait, no event), may only AUTH, HELLO (which says nothing but the
 * version and that AUTH is required), HELP, PING and QUIT, and is closed
 * after auth_timeout or DL_AUTH_FAILURES_MAX failed AUTHs. Such
 * connections get at most max_unauth_connections slots, and at most
 * max_unauth_per_address from one address (unix peers excepted).
 *
 * Owners live inside their user: a session's owner key is
 * <user>=<owner id> (the default user's are plain ids), and it carries
 * the user's quotas (locks=, waits=, or [limits] max_*_per_user; the
 * default user has none but the daemon's own limits).
 *
 * A reload (SIGHUP) re-reads the users file -- one that does not parse
 * changes nothing -- and ends, with * BYE revoked, every session whose
 * user is gone, whose secret or uid changed, or who lost a right it had;
 * a changed password ends the sessions that gave the old one.
 */
#ifndef DL_SERVER_ACCESS_H
#define DL_SERVER_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"
#include "server/config.h"
#include "server/users.h"

struct dl_conn;
struct dl_server;
struct dl_access;

/* How a connection proved who it is. */
enum dl_auth_how {
	DL_AUTH_NOBODY = 0, /* not yet */
	DL_AUTH_OPEN,	    /* nothing to prove: nothing is configured */
	DL_AUTH_PASSWORD,   /* AUTH <password> */
	DL_AUTH_SECRET,	    /* AUTH <user> <secret> */
	DL_AUTH_UID,	    /* its uid, on the unix socket */
	DL_AUTH_NAME,	    /* a name proven outside the protocol (TLS) */
};

/* Loads the users file (if any). DL_EBADARG with err ("<file>:<line>:
 * ..."), DL_ENOMEM. */
int dl_access_new(const struct dl_config *cfg, uint64_t seed,
		  struct dl_access **out, char *err, size_t errlen);
void dl_access_free(struct dl_access *a);

/* A new connection (its peer known): 0, the connection authenticated
 * already if it needs nothing or its uid stands for a user; or
 * DL_ELIMIT, *why saying which limit (the connection is refused). */
int dl_access_accept(struct dl_conn *c, const char **why);
/* The connection ends: its counts are given back. */
void dl_access_conn_end(struct dl_conn *c);

/* AUTH (user.len 0: the one-word form). 0: authenticated (c->user set,
 * a session made); DL_EDENIED: refused (counted, logged in the summary);
 * DL_ELIMIT: the user is at its conns= quota (why says so);
 * DL_EBADARG: authenticated already as someone else. */
int dl_access_auth(struct dl_conn *c, struct dl_str user, struct dl_str secret,
		   char *why, size_t whylen);
/* The hook for a name proven outside the protocol (a verified client
 * certificate's, under TLS): c becomes the user of that name in the
 * users file. 0, or DL_EDENIED (no users file, no such user: c stays
 * nobody and may still AUTH), DL_ELIMIT (its conns= quota; why says so).
 * A reload treats it as a uid login: revoked if the user is gone or
 * lost a right. */
int dl_access_login_name(struct dl_conn *c, const char *name, char *why,
			 size_t whylen);
/* 1 once the connection has failed DL_AUTH_FAILURES_MAX times. */
int dl_access_guessing(const struct dl_conn *c);

/* c may `r` on `name` (DL_RIGHT_ADMIN: on the daemon). */
int dl_access_may(const struct dl_conn *c, enum dl_right r, struct dl_str name);
/* c may `r` on some name under `prefix` (LOCKS: a listing with nothing
 * to show walks nothing). */
int dl_access_may_some(const struct dl_conn *c, enum dl_right r,
		       struct dl_str prefix);
/* c may read `name` (the signature of a filter callback: arg is c). */
int dl_access_readable(struct dl_str name, void *conn);
/* The prefixes c may `r` on (dl_user_prefixes): a LOCKS filter for a
 * connection that may not read every name under the prefix. */
size_t dl_access_prefixes(const struct dl_conn *c, enum dl_right r,
			  const struct dl_str **out);
/* The name of c's user ("default" for the default user). */
const char *dl_access_user(const struct dl_conn *c);
/* The quota `q` of c's user (its line's, else [limits] max_*_per_user),
 * 0 when it has none (the default user; c not authenticated). */
uint64_t dl_access_quota(const struct dl_conn *c, enum dl_quota q);
/* The owner key of `id` for c's user into buf (DL_OWNER_KEY_MAX + 1). */
int dl_access_owner_key(const struct dl_conn *c, struct dl_str id, char *buf,
			struct dl_str *out);

/* HELLO owner=<id> [key=<secret>]: c's session becomes owner `id` of
 * its user, proven by `secret` (len 0: the owner must be new, or have no
 * proof yet, and a new secret is made). c->owner_secret is then the one
 * to present again. DL_EDENIED when the owner is bound to another secret
 * (locktab.h, Identity), DL_EBADARG while c waits for a lock. */
int dl_access_prove_owner(struct dl_conn *c, struct dl_str id,
			  struct dl_str secret);

/* Every DL_SWEEP_MS: closes c if it did not authenticate within
 * auth_timeout (1 if it did). */
int dl_access_sweep(struct dl_conn *c, uint64_t now);
/* Every DL_SWEEP_MS, and at shutdown (force): the summary of failed
 * AUTHs, once per DL_AUTH_LOG_MS. */
void dl_access_tick(struct dl_server *srv, uint64_t now, int force);

/* SIGHUP, before `next` is applied: re-read the users file, end the
 * sessions whose rights are gone, and those of an old password. */
void dl_access_reload(struct dl_server *srv, const struct dl_config *next);

#endif /* DL_SERVER_ACCESS_H */
