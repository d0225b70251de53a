/* SPDX-License-Identifier: MIT */
/*
 * stats.c -- the list of the daemon's numbers (see stats.h).
 */
#include "server/stats.h"

#include <stddef.h>

#include "proto/proto.h"
#include "server/clock.h"
#include "server/part/part.h"
#include "server/server.h"
#include "server/watch.h"

#define C DL_STAT_COUNTER
#define G DL_STAT_GAUGE

static struct dl_watch_stats watch_stats(const struct dl_server *srv)
{
	struct dl_watch_stats w;

	dl_watch_stats(srv, &w);
	return w;
}

void dl_stats_collect(struct dl_server *srv, dl_stat_fn fn, void *arg)
{
	const struct dl_locktab_stats *t = dl_locktab_stats(srv->tab);
	const struct dl_store_stats *s = dl_store_stats(srv->store);
	const struct dl_server_stats *v = &srv->st;
	const struct dl_leader *l = dl_store_leader(srv->store);
	uint64_t now = dl_mono_ms();
	const struct dl_watch_stats w = watch_stats(srv);
	const struct dl_stat rows[] = {
		{"uptime_ms", uv_now(srv->loop) - srv->start_ms, G,
		 "Seconds since the daemon started.", NULL, NULL, 0},
		{"connections", srv->nconns, G, "Open client connections.",
		 NULL, NULL, 0},
		{"connections_total", v->connections_total, C,
		 "Client connections accepted.", NULL, NULL, 0},
		{"connections_rejected", v->connections_rejected, C,
		 "Connections refused at connect (max_connections, the caps of unauthenticated ones).",
		 NULL, NULL, 0},
		{"connections_evicted", v->connections_evicted, C,
		 "Connections not authenticated yet closed, the oldest first, for new ones at max_unauth_connections.",
		 NULL, NULL, 0},
		{"output_overflows", v->output_overflows, C,
		 "Connections closed for not reading (max_output).", NULL, NULL,
		 0},
		{"output_buffered_bytes", srv->out_unread, G,
		 "Memory held by the replies and events clients have not read yet (max_output_total bounds it).",
		 NULL, NULL, 0},
		{"output_budget_closes", v->output_budget_closes, C,
		 "Connections closed by an event while all clients' unread output was over max_output_total.",
		 NULL, NULL, 0},
		{"commands", v->commands, C, "Requests executed.", NULL, NULL,
		 0},
		{"locks", t->locks, G, "Locks held or waited for.", NULL, NULL,
		 0},
		{"leases", t->leases, G, "Leases held.", NULL, NULL, 0},
		{"waiters", t->waiters, G, "Requests queued for a lock.", NULL,
		 NULL, 0},
		{"owners", t->owners, G,
		 "Owners known (with a connection, a lease or a wait).", NULL,
		 NULL, 0},
		{"grants", t->grants, C, "Leases granted.", NULL, NULL, 0},
		{"reentries", t->reentries, C, "Reentrant LOCKs by a holder.",
		 NULL, NULL, 0},
		{"releases", t->releases, C, "Leases released by UNLOCK.", NULL,
		 NULL, 0},
		{"breaks", t->breaks, C, "Leases ended by BREAK.", NULL, NULL,
		 0},
		{"expiries", t->expiries, C, "Leases that expired.", NULL, NULL,
		 0},
		{"timeouts", t->timeouts, C, "Waits that timed out.", NULL,
		 NULL, 0},
		{"refreshes", t->refreshes, C, "Leases refreshed.", NULL, NULL,
		 0},
		{"cancels", t->cancels, C, "Waits cancelled.", NULL, NULL, 0},
		{"revokes", t->revokes, C,
		 "Grants withdrawn before they were durable (Redis lost).",
		 NULL, NULL, 0},
		{"multi_locks", v->multi_locks, C,
		 "Multi-locks granted (LOCK with several names).", NULL, NULL,
		 0},
		{"deadlocks", t->deadlocks, C,
		 "Waits refused as closing a cycle of owners (NO DEADLOCK).",
		 NULL, NULL, 0},
		{"deadlock_walks_capped", t->walks_capped, C,
		 "Deadlock checks that gave up at their step cap, or were not made for a user whose budget was spent (the LOCK waited).",
		 NULL, NULL, 0},
		{"last_token", dl_locktab_last_token(srv->tab), G,
		 "Last fencing token issued.", NULL, NULL, 0},
		{"auth_failures", v->auth_failures, C, "Failed AUTH attempts.",
		 NULL, NULL, 0},
		{"request_timeouts", v->request_timeouts, C,
		 "Connections closed for a request line not ended within request_timeout.",
		 NULL, NULL, 0},
		{"idle_timeouts", v->idle_timeouts, C,
		 "Connections closed after idle_timeout without a request.",
		 NULL, NULL, 0},
		{"owner_denials", v->owner_denials, C,
		 "HELLO owner= refused: the owner is bound to a key the client did not give.",
		 NULL, NULL, 0},
		{"tls_handshakes", v->tls_handshakes, C,
		 "TLS handshakes completed.", NULL, NULL, 0},
		{"tls_failures", v->tls_failures, C,
		 "TLS connections closed for a TLS error or a handshake not done within handshake_timeout.",
		 NULL, NULL, 0},
		{"auth_timeouts", v->auth_timeouts, C,
		 "Connections closed for not authenticating within auth_timeout.",
		 NULL, NULL, 0},
		{"watches", w.watches, G,
		 "Names and prefixes watched (WATCH), by all connections.",
		 NULL, NULL, 0},
		{"watch_events", w.sent, C, "Events sent to watchers.", NULL,
		 NULL, 0},
		{"watch_events_dropped", w.dropped, C,
		 "Events not sent to watchers that left too much unread or whose user's budget was spent (each told * WATCH-OVERFLOW).",
		 NULL, NULL, 0},
		{"watch_events_capped", w.capped, C,
		 "Of the dropped, those found over their user's max_watch_events_per_user.",
		 NULL, NULL, 0},
		{"wait_ms_count", t->wait.count, C, "Grants (wait histogram).",
		 NULL, NULL, 1},
		{"wait_ms_sum", t->wait.sum_ms, C,
		 "Milliseconds waited before grants.", NULL, NULL, 1},
		{"hold_ms_count", t->hold.count, C,
		 "Leases ended (hold histogram).", NULL, NULL, 1},
		{"hold_ms_sum", t->hold.sum_ms, C,
		 "Milliseconds leases were held.", NULL, NULL, 1},
		{"store_available", (uint64_t)dl_store_available(srv->store), G,
		 "1 if state changes can be persisted now.", NULL, NULL, 0},
		{"store_batches", s->batches, C,
		 "Write pipelines sent to Redis.", NULL, NULL, 0},
		{"store_writes", s->writes, C, "Lock records written to Redis.",
		 NULL, NULL, 0},
		{"store_round_trips", s->round_trips, C,
		 "Redis replies awaited and received.", NULL, NULL, 0},
		{"store_latency_us_avg",
		 s->round_trips ? s->latency_us_sum / s->round_trips : 0, G,
		 "Mean Redis round trip, in seconds.", NULL, NULL, 0},
		{"store_latency_us_max", s->latency_us_max, G,
		 "Slowest Redis round trip, in seconds.", NULL, NULL, 0},
		{"store_backlog", s->backlog, G,
		 "Redis pipelines sent and not yet acknowledged.", NULL, NULL,
		 0},
		{"store_reconnects", s->reconnects, C,
		 "Connections made to Redis.", NULL, NULL, 0},
		{"store_failures", s->failures, C,
		 "Times the Redis link was lost.", NULL, NULL, 0},
		{"redis_aof", s->redis_aof, G,
		 "1 if Redis has AOF on (last read): without it a restart of Redis loses every lease.",
		 NULL, NULL, 0},
		{"redis_fsync_always", s->redis_fsync_always, G,
		 "1 if Redis fsyncs every write (appendfsync always): a grant survives the loss of its machine.",
		 NULL, NULL, 0},
		{"redis_evicting", s->redis_evicting, G,
		 "1 if Redis's maxmemory-policy may evict keys (last read): refused unless allow_evicting_redis.",
		 NULL, NULL, 0},
		{"redis_nondurable_allowed", srv->cfg.allow_nondurable_redis, G,
		 "1 if allow_nondurable_redis lets the daemon serve on a Redis without AOF.",
		 NULL, NULL, 0},
		{"role_active", (uint64_t)dl_store_active(srv->store), G,
		 "1 if this daemon is the active one, 0 a standby.", NULL, NULL,
		 0},
		{"partition_map_epoch",
		 srv->part ? dl_part_map(srv->part)->epoch : 0, G,
		 "Epoch of the partition map this daemon last read (0: none, or no [partition] id).",
		 NULL, NULL, 0},
		{"partition_slots",
		 srv->part ? dl_part_slots(srv->part) : DL_SLOTS, G,
		 "Hash slots of the names this daemon's partition serves (16384 without partitions).",
		 NULL, NULL, 0},
		{"partition_locks_moved_out",
		 srv->part ? dl_part_locks_out(srv->part) : 0, C,
		 "Locks this daemon let go to other partitions with the slots it moved (their leases and places live there).",
		 NULL, NULL, 0},
		{"partition_locks_imported",
		 srv->part ? dl_part_locks_in(srv->part) : 0, C,
		 "Locks this daemon imported from other partitions' moves of slots to its own.",
		 NULL, NULL, 0},
		{"leader_epoch", l->epoch, G,
		 "Epoch of the active daemon's leadership (0: none known).",
		 NULL, NULL, 0},
		{"leader_lease_left_ms",
		 l->until_ms > now ? l->until_ms - now : 0, G,
		 "Seconds of leadership left, as this daemon counts it (active) or last saw it (standby).",
		 NULL, NULL, 0},
		{"leader_takeovers", s->takeovers, C,
		 "Leaderships this daemon took (its start included).", NULL,
		 NULL, 0},
		{"leader_depositions", s->depositions, C,
		 "Leaderships this daemon lost to another.", NULL, NULL, 0},
		{"store_replica_waits", s->replica_waits, C,
		 "WAITs sent for min_replicas_ack.", NULL, NULL, 0},
		{"store_failover_holds", s->failover_holds, C,
		 "Redis failovers announced by a Sentinel, during which the "
		 "link was dropped and no reply released.",
		 NULL, NULL, 0},
		{"store_replica_shortfalls", s->replica_shortfalls, C,
		 "WAITs answered by fewer replicas than min_replicas_ack.",
		 NULL, NULL, 0},
		{"leader_renewals", s->renewals, C,
		 "Leadership renewals confirmed by Redis.", NULL, NULL, 0},
		{"redis_went_back", s->went_back, C,
		 "Takes of the leadership that found Redis holding less than this daemon saw it hold (lost writes: FLUSHALL, eviction, an older AOF, a promoted replica that missed them).",
		 NULL, NULL, 0},
		{"peers_attested", s->attests_proved, C,
		 "Lapses of this daemon's leadership after which every peer ([cluster] peers) vouched that nobody led meanwhile: the table was kept.",
		 NULL, NULL, 0},
		{"peers_bounded", s->attests_bounded, C,
		 "Lapses after which a peer could not vouch (it led, or saw another lead), but every peer bounded the leases it told: the table was dropped, and a closure after a loss lasted no longer than those leases.",
		 NULL, NULL, 0},
		{"peers_unattested", s->attests_failed, C,
		 "Lapses after which a peer could neither vouch nor bound what it told (silent, or restarted since): the table was dropped, and a closure after a loss lasted max_ttl.",
		 NULL, NULL, 0},
		{"grants_closed_ms",
		 srv->closed_until > dl_mono_ms()
			 ? srv->closed_until - dl_mono_ms()
			 : 0,
		 G,
		 "Seconds until new leases are granted again after Redis went back (0: open).",
		 NULL, NULL, 0},
		{"reclaims", t->reclaims, C,
		 "Leases linked again by RECLAIM after Redis forgot them.",
		 NULL, NULL, 0},
		{"retries", t->retries, C,
		 "Requests sent again after a drop (LOCK req=) that found their own grant or wait.",
		 NULL, NULL, 0},
		{"reclaims_refused", v->reclaims_refused, C,
		 "RECLAIMs refused for a proof that is not the cluster's or a lease that ended.",
		 NULL, NULL, 0},
		{"grants_closed_bound", dl_store_closed_bound(srv->store), G,
		 "Why grants are closed: 0 open, 1 until the lease horizon (the leases that may still be believed), 2 max_ttl (nothing bounds them).",
		 NULL, NULL, 0},
		{"lease_horizon_ms", dl_store_horizon_ms(srv->store), G,
		 "Seconds until the lease horizon reserved and made durable outside Redis (how long a loss found now would close grants).",
		 NULL, NULL, 0},
		{"standbys_counted", dl_store_standbys(srv->store), G,
		 "Standbys the active counts: a raise of the horizon waits until each knows it.",
		 NULL, NULL, 0},
		{"standbys_dropped", s->standbys_dropped, C,
		 "Standbys no longer counted because they stopped looking.",
		 NULL, NULL, 0},
	};
	struct dl_stat e = {
		"errors", 0,	C, "ERR (and NO DENIED) replies, by code.",
		"code",	  NULL, 0};
	size_t i;

	for (i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
		fn(&rows[i], arg);
	/* one row per wire code (proto.h, DL_ERR_MAP) */
	for (i = 1; i <= DL_ERR_COUNT_; i++) {
		if (dl_err_wire(-(int)i) != -(int)i)
			continue;
		e.label = dl_err_label(-(int)i);
		e.value = v->errors[i];
		fn(&e, arg);
	}
	for (i = 0; i < DL_QUEUE_BUCKETS; i++) {
		struct dl_stat q = {
			"contended_locks",
			t->contended[i],
			G,
			"Locks with waiters, by how many (1, 2_5, 6_10, 11_100, 101_1000, over_1000); LOCKS by=waiters names them.",
			"waiters",
			dl_queue_labels[i],
			0};

		fn(&q, arg);
	}
}
