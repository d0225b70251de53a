/* SPDX-License-Identifier: MIT */
/*
 * store_resync.h -- the re-sync after a lost link (store_resync.c):
 * the whole table written back, bucket by bucket, before the link comes
 * up. Private to the store's files (store_private.h).
 */
#ifndef DL_SERVER_STORE_RESYNC_H
#define DL_SERVER_STORE_RESYNC_H

#include <stddef.h>
#include <stdint.h>

#include "server/store/store_batch.h"

struct dl_store;

/* A re-sync under way (store.c): first the table is indexed by bucket, a
 * step per loop iteration; then the calls go, each formatted when it is
 * sent, DL_STORE_RESYNC_WINDOW in flight. */
struct resync {
	struct bucket_index bi;
	int pinned;	 /* the table is pinned for bi (resync_free unpins) */
	int indexing;	 /* walking the table: the idle handle runs */
	size_t cursor;	 /* that walk's (dl_locktab_walk) */
	uint32_t next;	 /* the first bucket not yet sent */
	int last_sent;	 /* the call with the last bucket is sent */
	size_t inflight; /* sent, not answered */
};

/* Begin one (the take answered on a new link): pin and index the table,
 * then send the calls. */
void dl__resync_start(struct dl_store *st);
/* Send the next calls, DL_STORE_RESYNC_WINDOW in flight. 0 or an error:
 * the link is to be failed. */
int dl__resync_pump(struct dl_store *st);
/* Every call is answered: the link comes up. */
void dl__resynced(struct dl_store *st);
/* End it (link lost, stopped, or done): the index goes, the table is
 * unpinned. */
void dl__resync_free(struct dl_store *st);

#endif /* DL_SERVER_STORE_RESYNC_H */
