/* SPDX-License-Identifier: MIT */
/*
 * proof.h -- a grant's proof: what lets a holder reclaim its lease after
 * Redis forgot it (docs/design.md, "Reclaim").
 *
 * Every reply that tells a lease's end (OK GRANTED, * GRANTED, OK
 * REFRESHED, OK RECLAIMED) carries proof=<32 hex digits> until=<unix ms>:
 * the first 16 bytes of HMAC-SHA256, under the keyspace's proof key (P
 * proofkey, 32 random bytes, kept by every daemon of the cluster and in
 * their state files), of the cluster id, the lock's name, the token, the
 * owner's key (its user and id), the hash of the secret the owner is
 * bound to (HELLO key=), the mode and limit, and `until`, the lease's
 * end on the granting daemon's wall clock. A client that still believes
 * its lease when a daemon no longer knows it (Redis went back, grants are
 * closed) sends RECLAIM with them; the daemon restores the lease only if
 * the proof is its own and `until` has not passed. Nobody can make a
 * proof without the key, which never leaves the daemons and Redis.
 */
#ifndef DL_SERVER_PROOF_H
#define DL_SERVER_PROOF_H

#include <stddef.h>
#include <stdint.h>

#include "proto/proto.h"

#define DL_PROOF_KEY_LEN 32	      /* bytes */
#define DL_PROOF_HEX	 DL_PROOF_LEN /* hex digits of a proof (limits.h) */
#define DL_PROOF_KEY_HEX (2 * DL_PROOF_KEY_LEN) /* ... of a key */

/* What a proof covers. */
struct dl_proof_in {
	struct dl_str cluster, name, owner;
	/* the owner's binding: its proof (locktab.h, Identity) in hex, empty
	 * if it has none. Redis may forget the binding with the lease; then
	 * whoever takes the owner id with another secret cannot use the
	 * proof its holder was given. */
	struct dl_str bind;
	uint64_t token;
	int shared;
	uint32_t limit;
	uint64_t until; /* unix ms */
};

/* The proof of `in` under `key` into out (DL_PROOF_HEX + 1 bytes). */
void dl_proof_make(const unsigned char key[DL_PROOF_KEY_LEN],
		   const struct dl_proof_in *in, char *out);
/* 1 if `proof` (hex, any length) is in's proof under key; compared in
 * constant time. */
int dl_proof_check(const unsigned char key[DL_PROOF_KEY_LEN],
		   const struct dl_proof_in *in, struct dl_str proof);
/* A key from its hex form: 0, or -1 if it is not one. */
int dl_proof_key_parse(const char *hex, unsigned char key[DL_PROOF_KEY_LEN]);
/* A new random key, hex (DL_PROOF_KEY_HEX + 1 bytes): 0, or -1. */
int dl_proof_key_new(char *hex);

#endif /* DL_SERVER_PROOF_H */
