/* SPDX-License-Identifier: MIT */
/*
 * locktab_desc.h -- who a holder is, as its client described itself:
 * host, pid and command (HELLO host= pid= cmd=, proto/desc.h).
 *
 * A description is an immutable, reference-counted value. A connection
 * makes one for each HELLO that describes it and keeps it in its session;
 * each lease granted to that session takes a reference, so a lease shows
 * the description its holder had when it was granted -- also after the
 * connection said another HELLO or closed -- and ten thousand leases of
 * one client cost one copy. A lease restored from Redis gets its own,
 * made from its record (record.h).
 *
 * The text is kept as it was sent: it passed dl_desc_check(), so it is
 * printable ASCII without space and goes into replies, records and logs
 * unchanged; nothing here decodes it.
 *
 * Not thread-safe (the loop's, like the lock table).
 */
#ifndef DL_SERVER_LOCKTAB_DESC_H
#define DL_SERVER_LOCKTAB_DESC_H

#include <stdint.h>

#include "proto/proto.h"

struct dl_desc {
	uint32_t refs;
	uint32_t pid;	  /* 0: not said */
	uint8_t host_len; /* the host is text[0 .. host_len) */
	uint8_t cmd_len;  /* the command follows it */
	char text[];
};

/* A new description (one reference, the caller's) of host, pid (0: none)
 * and cmd, each checked (dl_desc_check, the pid's range): DL_EBADARG if
 * one is invalid, DL_ENOMEM. All three empty: *out is NULL, 0 -- no
 * description. */
int dl_desc_new(struct dl_str host, uint64_t pid, struct dl_str cmd,
		struct dl_desc **out);
/* Another reference to d (NULL: NULL). */
struct dl_desc *dl_desc_ref(struct dl_desc *d);
/* Drop a reference; the last one frees d. NULL is a no-op. */
void dl_desc_unref(struct dl_desc *d);
/* Its parts (len 0 when not said); they live as long as d. */
struct dl_str dl_desc_host(const struct dl_desc *d);
struct dl_str dl_desc_cmd(const struct dl_desc *d);

#endif /* DL_SERVER_LOCKTAB_DESC_H */
