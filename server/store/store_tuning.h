/* SPDX-License-Identifier: MIT */
/*
 * store_tuning.h -- the store's own tuning: how it reconnects, batches,
 * loads, re-syncs and renews the leadership. Numbers no operator sets and
 * no client sees (the wire's limits and the configuration's defaults are
 * in proto/limits.h); each says why it is what it is.
 */
#ifndef DL_SERVER_STORE_TUNING_H
#define DL_SERVER_STORE_TUNING_H

/* At start-up the daemon waits for Redis as long as it takes; it says so
 * in the log this often. */
#define DL_STORE_WAIT_LOG_MS 10000

/* Reconnect backoff after Redis was lost: doubles from MIN up to MAX, so a
 * returning Redis is back in service within about a second. */
#define DL_STORE_BACKOFF_MIN_MS 50
#define DL_STORE_BACKOFF_MAX_MS 1000
/* ... at most this while the active's leadership still holds. */
#define DL_STORE_BACKOFF_LEADING_MS 200

/* Lazy writes (server/store/store.c): a change no reply waits for is written
 * with the next batch that must go, or after this long, or as soon as
 * this many such locks are dirty. */
#define DL_STORE_LAZY_MS  5
#define DL_STORE_LAZY_MAX 1024
/* Replies from Redis awaited before the next write batch is sent: while
 * one is in flight the changes of the following loop iterations collect
 * into one batch (group commit). make bench, 50 connections: one in
 * flight against unbounded pipelining, 4.5k instead of 10k batches/s,
 * Redis CPU 0.24 instead of 0.32 cores, pairs/s +10% (everysec). */
#define DL_STORE_INFLIGHT_MAX 1
/* The link is checked this often; an idle link is PINGed every
 * DL_STORE_PING_MS so that a hung Redis is noticed without traffic. */
#define DL_STORE_TICK_MS 100
#define DL_STORE_PING_MS 1000
/* How often a link reads Redis's appendonly and maxmemory-policy again
 * (store_durable.c): a CONFIG SET that turns AOF off or lets Redis evict
 * the daemon's keys is refused within about this long. */
#define DL_STORE_CONFIG_MS 1000

/* Loading at start-up (server/store/store_load.c): replies kept in flight so
 * that Redis builds the next while the daemon parses one (HGETALLs of
 * buckets, ~1000 records each at 10^6 locks; MGETs when migrating from
 * layout 1), and keys per MGET, and per deleting call, of layout 1. */
#define DL_STORE_LOAD_WINDOW 3
#define DL_STORE_LOAD_BATCH  10000
/* Re-sync and migration (server/store/store.c, server/store/store_migrate.c):
 * lock records per call of the replace function (whole buckets, so a little
 * more: about one bucket per call at 10^6 locks), and calls of a re-sync
 * in flight: a few, so that the leadership's renewals are not queued
 * behind a re-sync that takes seconds, and Redis always has the next call
 * in hand. A re-sync formats each call when it sends it, ~0.6 ms of the
 * loop's time per 1000 records; it first indexes the table
 * DL_STORE_RESYNC_WALK hash slots (about as many locks) per loop
 * iteration, ~1 ms. Measured by hand at 10^6 locks (timers around each
 * step in a scratch build): the longest step of either 1.1-1.4 ms, the
 * re-sync as fast as with 10,000 records per call (2.45-2.54 s), where
 * indexing and formatting it all at once blocked the loop for 0.3-0.4 s. */
#define DL_STORE_RESYNC_CHUNK  1000
#define DL_STORE_RESYNC_WINDOW 2
#define DL_STORE_RESYNC_WALK   2048
/* A whole bucket goes in one re-sync call, however many records it has:
 * names chosen to fall into one bucket make a call of 10^6 records, which
 * took Redis 2-2.8 s. Its reply is given redis_timeout plus this much per
 * record (30 s for 10^6), so that the re-sync ends (server/store/store.c).
 * 10 us was too little for a Redis sharing its cores: 120,000 records took
 * 1,423 ms with two other processes spinning on a 2-core machine. Only a
 * silence while SYNCING, when changes are refused anyway. */
#define DL_STORE_RECORD_US 30

/* Leadership (docs/design.md, "Leadership and fencing"). The active
 * daemon holds a lease in Redis, renews it every third of it, and counts
 * its own leadership from each renewal's send time, DL_LEADER_MARGIN_PCT
 * percent short of the lease (clock rates differ a little; Redis counts
 * from when it ran the renewal, later than the send). */
#define DL_LEADER_MARGIN_PCT 20
/* A standby looks at the leadership at least this often (and right after
 * the holder's lease would end), so that a leadership given up at a clean
 * shutdown is taken over within it. */
#define DL_LEADER_LOOK_MS 500

#endif /* DL_SERVER_STORE_TUNING_H */
