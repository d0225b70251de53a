/* SPDX-License-Identifier: MIT */
/*
 * users.h -- who may do what: the users file, its grants, and secrets.
 *
 * A users file ([server] users_file) names each user on one line:
 *
 *   <user> [sha256:<64 hex>] [uid=<n>|<login>] [lock=<prefix>[,<prefix>...]]
 *          [read=<prefix>,...] [break=<prefix>,...] [admin]
 *          [locks=<n>] [waits=<n>] [conns=<n>] [watches=<n>]
 *
 * `#` starts a comment line; blank lines are skipped; words are separated
 * by spaces or tabs. A grant lists name prefixes; `*` alone is every name
 * (prefixes are literal: a '*' anywhere else is an error). What a right
 * allows is the daemon's business (cmd.c): `lock` to take and act on
 * leases, `read` to look at locks, `break` to end other owners' leases,
 * `admin` to operate the daemon. Nothing is allowed that is not granted.
 *
 * A user proves who it is with its secret (AUTH <user> <secret>), of which
 * the file keeps only the SHA-256 (`dlockd --new-secret` makes a secret
 * and its hash line), or, on the unix socket, by the uid of its process
 * (uid=). A line with neither cannot log in and is refused. locks=,
 * waits=, conns= and watches= are the user's quotas; absent, the
 * configuration's defaults apply ([limits] max_*_per_user).
 *
 * This module is pure: it parses, matches and compares, and does no I/O
 * but reading the file in dl_users_load() (and resolving uid=<login>).
 * Secrets are compared as SHA-256 digests with CRYPTO_memcmp: time does
 * not depend on where a guess differs, nor on its length.
 *
 * The table is immutable once loaded, except for the runtime fields of
 * each user (struct dl_user_rt), which the daemon updates and carries
 * over to the next table at a reload (dl_users_carry).
 */
#ifndef DL_SERVER_USERS_H
#define DL_SERVER_USERS_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

/* The users file: at most this many bytes, and this many prefixes in one
 * grant (a grant is checked by walking its prefixes). */
#define DL_USERS_FILE_MAX   (4 * 1024 * 1024)
#define DL_GRANT_PREFIX_MAX 64

/* Bytes of a secret's SHA-256, and of its text "sha256:<hex>". */
#define DL_SECRET_HASH_LEN  32
#define DL_SECRET_HASH_TEXT (7 + 2 * DL_SECRET_HASH_LEN)
/* Random bytes of a secret made by dlockd --new-secret, and its hex. */
#define DL_SECRET_BYTES 32
#define DL_SECRET_TEXT	(2 * DL_SECRET_BYTES)

/* Names a users file may not give: the quarantine's owner account
 * (locktab.h), the name shown for the default user, and who ended a lease
 * a RECLAIM dropped (* EXPIRED broken_by=reclaimed; locktab_ops.c), which
 * must not read as a user's BREAK. */
#define DL_USER_RESERVED  "dlockd"
#define DL_USER_DEFAULT	  "default"
#define DL_USER_RECLAIMED "reclaimed"

enum dl_right {
	DL_RIGHT_LOCK = 0, /* LOCK TRYLOCK UNLOCK REFRESH RECLAIM CANCEL */
	DL_RIGHT_READ,	   /* STATUS HOLDERS CHECK LOCKS */
	DL_RIGHT_BREAK,	   /* BREAK */
	DL_RIGHT_ADMIN,	   /* STATS (a right on the daemon, not on names) */
	DL_RIGHT_COUNT_
};

/* A user's quotas, in the order of enum dl_quota. */
enum dl_quota {
	DL_QUOTA_LOCKS = 0, /* leases held plus requests queued */
	DL_QUOTA_WAITS,	    /* requests queued */
	DL_QUOTA_CONNS,	    /* connections authenticated as the user */
	DL_QUOTA_WATCHES,   /* its connections' watches (watch.c) */
	DL_QUOTA_COUNT_
};

/* A grant: prefixes[first .. first+n) of the table, or every name. */
struct dl_grant {
	uint32_t first, n;
	unsigned all : 1;
};

/* What the daemon keeps per user while it runs (carried over reloads). */
struct dl_user_rt {
	uint32_t conns;		/* connections authenticated as it */
	uint32_t watches;	/* their watches (watch.c) */
	uint64_t locks_next_us; /* LOCKS refused before this (cmd.c) */
	uint64_t locks_last_us; /* what its last listing cost */
	uint64_t out_unread;	/* its connections' in srv->out_unread */
	uint32_t walk_left;	/* deadlock-check steps it may spend */
	uint64_t walk_at_ms;	/* when that was last refilled (cmd.c) */
	uint64_t turn_iter;	/* the loop iteration of turn_work (conn.c) */
	uint64_t turn_work;	/* the work of its requests in it */
	uint32_t events_left;	/* watch events its watchers may be handed */
	uint64_t events_at_ms;	/* when that was last refilled (watch.c) */
};

struct dl_user {
	char name[DL_USER_MAX + 1]; /* "" for the default user */
	unsigned char hash[DL_SECRET_HASH_LEN];
	unsigned has_secret : 1;
	unsigned has_uid : 1;
	unsigned admin : 1;
	uint32_t uid;
	struct dl_grant grant[DL_RIGHT_ADMIN]; /* lock, read, break */
	uint64_t quota[DL_QUOTA_COUNT_];       /* 0: the default */
	int line;			       /* in the file, for logs */
	struct dl_user_rt rt;		       /* the daemon's */
};

struct dl_users {
	struct dl_user *v; /* sorted by name */
	size_t n;
	struct dl_str *prefixes; /* into text */
	size_t nprefixes;
	char *text; /* the file's bytes, owned */
};

/* Parse the text of a users file (`file` names it in errors). On success
 * *out is a table to free with dl_users_free(). DL_EBADARG with `err`
 * saying "<file>:<line>: <what>", DL_ENOMEM. */
int dl_users_parse(const char *text, size_t len, const char *file,
		   struct dl_users **out, char *err, size_t errlen);
/* Read and parse the file at `path` (at most DL_USERS_FILE_MAX bytes). */
int dl_users_load(const char *path, struct dl_users **out, char *err,
		  size_t errlen);
/* NULL is a no-op. */
void dl_users_free(struct dl_users *u);

/* The user of that name, or NULL. Borrowed from the table. */
struct dl_user *dl_users_find(const struct dl_users *u, struct dl_str name);
/* The user mapped to that uid (uid=), or NULL. */
struct dl_user *dl_users_by_uid(const struct dl_users *u, uint32_t uid);

/* AUTH <user> <secret>: 0 and *out when the user exists and the secret's
 * SHA-256 is its hash, DL_EDENIED otherwise (a user without a secret is
 * refused). The work done is the same whether the user exists or not. */
int dl_users_check(const struct dl_users *u, struct dl_str name,
		   struct dl_str secret, struct dl_user **out);

/* Predicates. u may `r` on lock `name` (DL_RIGHT_ADMIN ignores name).
 * A user made by dl_user_default() may do everything. */
int dl_user_may(const struct dl_users *u, const struct dl_user *user,
		enum dl_right r, struct dl_str name);
/* u may read every name that starts with `prefix`. */
int dl_user_may_all(const struct dl_users *u, const struct dl_user *user,
		    enum dl_right r, struct dl_str prefix);
/* The prefixes of user's grant of r, into *out (valid until the users
 * are freed); how many. 0 for a grant of every name: see dl_user_may. */
size_t dl_user_prefixes(const struct dl_users *u, const struct dl_user *user,
			enum dl_right r, const struct dl_str **out);
/* u may `r` on some name that starts with `prefix` (a granted prefix
 * and `prefix` are one a prefix of the other). */
int dl_user_may_some(const struct dl_users *u, const struct dl_user *user,
		     enum dl_right r, struct dl_str prefix);
/* `now` (of table nu) may do all that `before` (of table bu) could:
 * every right, every prefix (same or shorter). Quotas are not rights. */
int dl_user_covers(const struct dl_users *nu, const struct dl_user *now,
		   const struct dl_users *bu, const struct dl_user *before);
/* Both have the same secret (or both none). */
int dl_user_same_secret(const struct dl_user *a, const struct dl_user *b);

/* The default user: the one every client is when there is no users file
 * (after the password, if any). Every right; name "". */
void dl_user_default(struct dl_user *u);
/* Its name for logs and events: DL_USER_DEFAULT for "". */
const char *dl_user_name(const struct dl_user *u);

/* Copy each user's runtime fields from `old` to the user of the same
 * name in `next` (a reload). */
void dl_users_carry(struct dl_users *next, const struct dl_users *old);

/* ---- secrets ------------------------------------------------------------ */

/* SHA-256 of s (via OpenSSL's libcrypto). 0 or DL_EINTERNAL. */
int dl_secret_hash(struct dl_str s, unsigned char out[DL_SECRET_HASH_LEN]);
/* a equals b, in time that depends on neither (both are hashed, the
 * digests compared with CRYPTO_memcmp). For the one shared password. */
int dl_secret_equal(struct dl_str a, struct dl_str b);
/* A new secret: DL_SECRET_BYTES from getrandom(2), as lower-case hex
 * (DL_SECRET_TEXT chars and a NUL), and its hash line "sha256:<hex>"
 * (DL_SECRET_HASH_TEXT chars and a NUL). 0 or DL_EINTERNAL. */
int dl_secret_new(char secret[DL_SECRET_TEXT + 1],
		  char hash[DL_SECRET_HASH_TEXT + 1]);
/* The hash line of a secret the caller chose. */
int dl_secret_hash_text(struct dl_str s, char hash[DL_SECRET_HASH_TEXT + 1]);

#endif /* DL_SERVER_USERS_H */
