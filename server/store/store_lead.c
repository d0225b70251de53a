/* SPDX-License-Identifier: MIT */
/*
 * store_lead.c -- the leadership: which dlockd on a Redis is the active
 * one, the writer (docs/design.md, "Leadership and fencing").
 *
 * Two keys, under the prefix P:
 *
 *   P leader  "<epoch> <node id> <address> <instance>", with a Redis
 *             expiry of leader_lease: the active daemon, for as long as it
 *             renews (instance: random, one per process);
 *   P fence   "<epoch>/2": raised by every take, and checked by every
 *             write (store_batch.c), so that only the connection that
 *             took the leadership last can change anything.
 *
 * Both are changed only by the function dlock_lead_v11 (its source is
 * dl__lua_lead below; store_batch.c puts the library together),
 * atomically, in one of four modes:
 *
 *   look   what the leadership is now (a standby polls with it);
 *   renew  extend the lease if this daemon still holds it: its epoch is
 *          in the record and is the fence;
 *   take   take it if nobody holds it, or if this daemon does (each new
 *          connection of the active takes it again, which raises the
 *          fence and so fences whatever its older connections still have
 *          in flight);
 *   start  take, and also when the record names this daemon's node id:
 *          its previous run, killed before its lease ran out, so that a
 *          restart does not wait out its own lease. Used at process start
 *          only; two daemons given the same node id by mistake then take
 *          it from each other once per start, never both write (the fence
 *          decides), and the one deposed stays a standby;
 *   resign give it up (a clean shutdown, every write done): a standby
 *          takes over at once instead of after the lease.
 *
 * A take answers `kept`: whether the fence was still this daemon's epoch,
 * that is, whether nobody else has written since. An active that takes
 * its leadership again with kept = 0 holds a stale table and must load
 * the state afresh. Every way to keep the table, this first one
 * included, also needs the daemon's leadership never to have lapsed on
 * its own clock (`held`, sent by the daemon: its last confirmation plus
 * the lease, less the margin, is still ahead): only then can nobody else
 * have taken it -- a standby takes a leadership only once its record is
 * gone, and one that finds Redis behind waits a lease first. A daemon
 * paused or cut off past its lease cannot know whether another took
 * over, and a Redis that forgot since (FLUSHALL, an older copy, a
 * replica that missed the take) may have lost that take and its fence,
 * and show this daemon's own epoch as the fence, or its own record,
 * again: found from outside, the old active "wrote its table back" over
 * the new one's grants (once for a fence below its epoch, and once for a
 * copy of its own epoch, taken before its last writes: it then granted
 * a lock the new active had granted, and nothing closed grants, as its
 * table was "kept"). It loads instead, and a Redis behind what it saw
 * closes grants for max_ttl. A record counts as this daemon's only if it
 * names this process (the instance), never by epoch alone: after a Redis
 * fail-over a standby may have taken over on the promoted replica with
 * the very epoch this daemon had on the lost primary. A promoted replica
 * that missed this daemon's last writes (its record of this instance, the
 * fence behind) is taken again with the state kept: the new epoch is set
 * above both, and the whole table rewritten to it. So is a record of this
 * instance with an epoch above this daemon's: only this process writes
 * its instance id, so that is a take of its own whose reply it lost (the
 * link failed after sending it); without this rule the daemon took itself
 * for deposed by another. And so is a Redis with no record at all and a
 * fence not above this daemon's epoch: the leadership key expired while a
 * fail-over took longer than the lease, and nobody took it since (a taker
 * raises the fence); without this rule the active dropped its table for
 * the promoted replica's, which may lack its last grants (the Sentinel
 * tests caught both).
 *
 * The fence's "/2" is the store layout (store.c), and a barrier. Layout
 * 1 kept the epoch as a bare number, and every daemon of layout 1 reads
 * it as one: dlock_lead_v3/v4 do tonumber(GET fence), which gives nil for
 * "7/2", so their take fails in Lua (math.max and the comparisons with
 * nil) and a standby of theirs never becomes active, while their look
 * still works (it reads only the leader key: their clients are still sent
 * to the active); dlock_lead_v2 and the daemons before functions INCR the
 * fence ("not an integer"); every dlock_apply_v1..v4 compares the fence
 * as a string, and refuses. That matters: a daemon of layout 1 on a Redis
 * in layout 2 would find no locks, and grant every lock again. So the
 * first take of this version over a Redis of layout 1 (a numeric fence)
 * starts the epoch above it and writes it as "<epoch>/2", before anything
 * is loaded or migrated (store_load.c), and there is no way back but a
 * tool that does not exist yet (docs/operations.md, upgrading). The
 * function reads both forms; any other (a later layout) it refuses, which
 * bars it from a Redis whose layout it does not know.
 *
 * The active counts its leadership from each renewal's send time, for
 * DL_LEADER_MARGIN_PCT percent less than the lease (Redis starts the
 * expiry later, when it runs the renewal); past that moment it refuses
 * changes until a take confirms it again (store.c).
 *
 * The timing is here too, at the end: when to renew or look
 * (dl__lead_tick, dl__lead_next_look), what a renewal's or a look's reply
 * does (dl__lead_on_reply: renewed, deposed, Redis went back, a standby
 * waiting for the active to write its table back), and stepping down
 * (dl__lead_depose). store.c's link calls them; the take's reply stays
 * there, as the last step of bringing a link up. Owns st->lead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "server/clock.h"
#include "server/log.h"
#include "server/store/store_private.h"

static const char *const mode_names[] = {
	[LEAD_LOOK] = "look",	[LEAD_RENEW] = "renew",	  [LEAD_TAKE] = "take",
	[LEAD_START] = "start", [LEAD_RESIGN] = "resign",
};

/* The leadership function, dlock_lead_v11, in the library that
 * store_batch.c puts together (dl__store_library); it uses the library's
 * LAYOUT and EPOCH_MAX. What its modes do is at the top of this file. */
/* clang-format off */
const char dl__lua_lead[] =
	"-- the epoch in a fence: '<n>' (layout 1, before any take by this\n"
	"-- version) or '<n>/<LAYOUT>'; nil for anything else (another layout)\n"
	"local function epoch_of(s)\n"
	"  return tonumber(string.match(s, '^(%d+)$') or\n"
	"    string.match(s, '^(%d+)/' .. LAYOUT .. '$'))\n"
	"end\n"
	"-- keys: leader, fence, gen, token, closed, horizon, standbys, base,\n"
	"-- proofkey, challenge, answers\n"
	"-- args: mode, mine, node, addr, lease, instance, seen epoch,\n"
	"-- seen gen, hold (the closure '<inst> <n> <ms> <why>' a take sets if\n"
	"-- it finds Redis went back and keeps no table; '' none), held (1:\n"
	"-- the caller's leadership never lapsed on its clock), keep (a\n"
	"-- closure in force, kept in Redis), raise (the active's horizon\n"
	"-- '<inst> <n> <ms>'), echo ('<inst>:<n>' of the horizon a standby\n"
	"-- counted), drop (standbys the active stopped counting), known (the\n"
	"-- instance a standby last saw lead), proofkey (a take writes it if\n"
	"-- Redis has none: server/proof.h), proof (a take: the nonce of the\n"
	"-- challenge its peers answered, store_attest.c; '' none), attest (a\n"
	"-- look: '<instance> <epoch> <took> <bound> <age> <mark>', its answer\n"
	"-- to challenges), void and peers (a take whose closure the peers'\n"
	"-- answers to its challenge bound: the closure if that challenge no\n"
	"-- longer stands, and the one if Redis is not behind; '' '': the proof\n"
	"-- is of a leadership that never lapsed)\n"
	"local function lead(keys, args)\n"
	"  local mode, node, inst = args[1], args[3], args[6]\n"
	"  local mine = epoch_of(args[2])\n"
	"  local seen_e, seen_g = tonumber(args[7]) or 0, tonumber(args[8]) or 0\n"
	"  local held = args[10] == '1'\n"
	"  local hold = args[9]\n"
	"  -- challenges of lapsed actives: node -> '<nonce> <epoch> <inst>'\n"
	"  local chs = redis.call('HGETALL', keys[10])\n"
	"  -- one without a life (its PEXPIRE lost with the link) is no\n"
	"  -- challenge: nobody would stop deferring to it\n"
	"  if redis.call('PTTL', keys[10]) < 0 then chs = {} end\n"
	"  -- the peers answered this process's challenge, which still stands:\n"
	"  -- nobody led since its leadership lapsed (store_attest.c)\n"
	"  local mych\n"
	"  for i = 1, #chs, 2 do\n"
	"    if chs[i] == node then mych = chs[i + 1] end\n"
	"  end\n"
	"  local stands = args[17] ~= '' and mych and\n"
	"    string.sub(mych, 1, #args[17] + 1) == args[17] .. ' '\n"
	"  local bounded = args[19] ~= ''\n"
	"  if stands and not bounded then held = true end\n"
	"  local cur = redis.call('GET', keys[1])\n"
	"  local fence = epoch_of(redis.call('GET', keys[2]) or '0')\n"
	"  if not mine or not fence then\n"
	"    return redis.error_reply('dlockd: ' .. keys[2] ..\n"
	"      ' is not a writer fence of layout 1 or ' .. LAYOUT)\n"
	"  end\n"
	"  -- Lua's numbers print exactly to 14 digits: no take gets there\n"
	"  if fence > EPOCH_MAX then\n"
	"    return redis.error_reply('dlockd: ' .. keys[2] ..\n"
	"      ' holds an epoch above ' .. EPOCH_MAX ..\n"
	"      ', which no take made (a SET by someone else?)')\n"
	"  end\n"
	"  local gen = tonumber(redis.call('GET', keys[3]) or '0') or 0\n"
	"  local epoch, holder, hinst\n"
	"  if cur then\n"
	"    epoch, holder, hinst = string.match(cur, '^(%d+) (%S+) %S+ (%S+)$')\n"
	"    epoch = tonumber(epoch)\n"
	"  end\n"
	"  -- behind what the caller saw: an older epoch, or its epoch with\n"
	"  -- fewer writes (a write generation counts within an epoch: a\n"
	"  -- take that kept its table starts a new one, whatever it wrote)\n"
	"  local behind = 0\n"
	"  if seen_e > fence or (seen_e == fence and seen_g > gen) then\n"
	"    behind = 1\n"
	"  end\n"
	"  -- a closure: P closed lives at least as long as v says\n"
	"  local function close_for(v)\n"
	"    local ms = tonumber(string.match(v, '^%S+ %d+ (%d+)'))\n"
	"    if ms and ms > 0 and redis.call('PTTL', keys[5]) < ms then\n"
	"      redis.call('SET', keys[5], v, 'PX', ms)\n"
	"    end\n"
	"  end\n"
	"  local function answer(ok, v, k)\n"
	"    return {ok, v, k, gen, redis.call('GET', keys[5]) or '', behind,\n"
	"      redis.call('GET', keys[4]) or '',\n"
	"      redis.call('GET', keys[6]) or '', redis.call('HGETALL', keys[7]),\n"
	"      redis.call('GET', keys[9]) or '', chs}\n"
	"  end\n"
	"  local this = cur and hinst == inst\n"
	"  local ours = this and epoch == mine and fence == mine\n"
	"  -- only this process writes its instance id: a record of it with a\n"
	"  -- larger epoch is a take of its own whose reply it lost\n"
	"  local mine_late = this and mine > 0 and epoch > mine\n"
	"  if mode == 'look' then\n"
	"    -- a daemon other than the one this standby saw lead took the\n"
	"    -- leadership of a Redis that lost what the standby saw: that\n"
	"    -- taker could not know (a restart without a state file); the\n"
	"    -- standby closes grants for what it can bound (store_horizon.c)\n"
	"    -- (the base: what Redis held when the leader's process first took\n"
	"    -- it; a take sets the epoch above what its taker saw, which may\n"
	"    -- be above what this standby saw too, and hide the loss)\n"
	"    local bi, be, bg = string.match(redis.call('GET', keys[8]) or '',\n"
	"      '^(%S+) (%d+) (%d+)$')\n"
	"    be, bg = tonumber(be) or 0, tonumber(bg) or 0\n"
	"    local lost = behind == 1 or (epoch and bi == hinst and\n"
	"      (seen_e > be or (seen_e == be and seen_g > bg)))\n"
	"    if lost and cur and hinst ~= args[15] then\n"
	"      close_for(args[9])\n"
	"    end\n"
	"    -- what this standby knows of the horizon, and that it looks:\n"
	"    -- the active counts it until it stops looking (store_horizon.c)\n"
	"    -- challenges stand: this node answers each, from what it kept\n"
	"    -- outside Redis (store_attest.c)\n"
	"    for i = 1, #chs, 2 do\n"
	"      local nonce = string.match(chs[i + 1], '^(%x+) ')\n"
	"      if chs[i] ~= node and nonce then\n"
	"        redis.call('HSET', keys[11], nonce .. ':' .. node, args[18])\n"
	"      end\n"
	"    end\n"
	"    if #chs > 0 then\n"
	"      redis.call('PEXPIRE', keys[11],\n"
	"        math.max(redis.call('PTTL', keys[10]), 1))\n"
	"    end\n"
	"    local was = redis.call('HGET', keys[7], node)\n"
	"    if was or redis.call('HLEN', keys[7]) < STANDBYS_MAX then\n"
	"      local n = was and tonumber(string.match(was, ' (%d+)$')) or 0\n"
	"      redis.call('HSET', keys[7], node, args[13] .. ' ' .. (n + 1))\n"
	"    end\n"
	"  end\n"
	"  if mode == 'renew' and ours then\n"
	"    redis.call('PEXPIRE', keys[1], args[5])\n"
	"    close_for(args[11])\n"
	"    if args[12] ~= '' then redis.call('SET', keys[6], args[12]) end\n"
	"    for s in string.gmatch(args[14], '%S+') do\n"
	"      redis.call('HDEL', keys[7], s)\n"
	"    end\n"
	"    return answer(1, tostring(mine), 1)\n"
	"  end\n"
	"  if mode == 'resign' and ours then\n"
	"    redis.call('DEL', keys[1])\n"
	"    return answer(1, tostring(mine), 1)\n"
	"  end\n"
	"  -- a Redis behind this daemon: its record (or none: the leadership\n"
	"  -- key expired during a fail-over, or Redis forgot it) and a fence\n"
	"  -- nobody raised since -- which only counts while its leadership\n"
	"  -- never lapsed: another may have taken over meanwhile, and Redis\n"
	"  -- lost that take too (store_lead.c)\n"
	"  local lagged = held and mine > 0 and fence <= mine and\n"
	"    ((this and epoch <= mine) or not cur)\n"
	"  if mode == 'renew' and (lagged or mine_late) then\n"
	"    return answer(2, tostring(fence), 0)\n"
	"  end\n"
	"  if (mode == 'take' or mode == 'start') and (not cur or ours or lagged or\n"
	"      mine_late or (mode == 'start' and holder == node)) then\n"
	"    -- kept only while the caller's leadership never lapsed (held):\n"
	"    -- past that, even its own epoch as the fence or its own record\n"
	"    -- proves nothing: another may have taken over and granted, and\n"
	"    -- Redis lost that take (store_lead.c)\n"
	"    local kept = 0\n"
	"    if held and mine > 0 and (fence == mine or lagged or mine_late) then\n"
	"      kept = 1\n"
	"    end\n"
	"    -- went back, and the taker has no table to write it back from:\n"
	"    -- nobody grants until every lease that may exist has ended\n"
	"    if bounded and kept == 0 then\n"
	"      -- a peer led or saw another lead since this daemon's lapse (or\n"
	"      -- was silent: max_ttl), and Redis may have lost that take\n"
	"      -- unseen: closed, behind or not, until the leases the peers told\n"
	"      -- before their answers have ended; a take since (the challenge\n"
	"      -- is gone) may have told more: max_ttl (store_attest.c)\n"
	"      if not stands then hold = args[19]\n"
	"      elseif behind == 0 then hold = args[20] end\n"
	"      close_for(hold)\n"
	"    elseif behind == 1 and kept == 0 then\n"
	"      close_for(hold)\n"
	"    end\n"
	"    close_for(args[11])\n"
	"    if args[16] ~= '' then redis.call('SET', keys[9], args[16], 'NX') end\n"
	"    -- a take voids every challenge that stands: a challenger proved\n"
	"    -- nobody led before its take, not that nobody will\n"
	"    redis.call('DEL', keys[10])\n"
	"    -- above anything seen: Redis is ahead of every observer again\n"
	"    -- the base of this process's first take (a standby's look)\n"
	"    if not string.find(redis.call('GET', keys[8]) or '', inst .. ' ',\n"
	"        1, true) then\n"
	"      redis.call('SET', keys[8], inst .. ' ' .. fence .. ' ' .. gen)\n"
	"    end\n"
	"    local e = math.max(fence, mine, epoch or 0, seen_e) + 1\n"
	"    if gen < seen_g then redis.call('SET', keys[3], seen_g) end\n"
	"    redis.call('SET', keys[2], e .. '/' .. LAYOUT)\n"
	"    redis.call('SET', keys[1], e .. ' ' .. node .. ' ' .. args[4] ..\n"
	"      ' ' .. inst, 'PX', args[5])\n"
	"    gen = redis.call('INCR', keys[3])\n"
	"    return answer(1, tostring(e), kept)\n"
	"  end\n"
	"  return answer(0, cur or '', redis.call('PTTL', keys[1]))\n"
	"end\n";
/* clang-format on */

/* host:port, or the unix socket's path when there is no TCP listener. */
static void own_place(const struct dl_config *cfg, const char *host, char *out,
		      size_t len)
{
	if (cfg->port)
		snprintf(out, len, "%s:%llu", host,
			 (unsigned long long)cfg->port);
	else
		snprintf(out, len, "unix:%s", cfg->unix_socket);
}

/* Keep what fits a word of the record: no blanks. */
static void wordify(char *s)
{
	for (; *s; s++)
		if (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
			*s = '_';
}

void dl__lead_identity(struct dl_store *st)
{
	const struct dl_config *cfg = st->cfg;
	char host[128] = "localhost";
	uint64_t rnd;
	int wild = strcmp(cfg->bind, "0.0.0.0") == 0 ||
		   strcmp(cfg->bind, "::") == 0 || !cfg->bind[0];

	if (gethostname(host, sizeof(host) - 1) != 0)
		strcpy(host, "localhost");
	host[sizeof(host) - 1] = '\0';
	if (cfg->node_id[0])
		snprintf(st->lead.node, sizeof(st->lead.node), "%s",
			 cfg->node_id);
	else
		own_place(cfg, host, st->lead.node, sizeof(st->lead.node));
	if (cfg->advertise[0])
		snprintf(st->lead.self_addr, sizeof(st->lead.self_addr), "%s",
			 cfg->advertise);
	else
		own_place(cfg, wild ? host : cfg->bind, st->lead.self_addr,
			  sizeof(st->lead.self_addr));
	wordify(st->lead.node);
	wordify(st->lead.self_addr);
	snprintf(st->lead.client_name, sizeof(st->lead.client_name),
		 "dlockd:%s", st->lead.node);
	if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
		rnd = dl_mono_ms() ^ ((uint64_t)getpid() << 32);
	snprintf(st->lead.instance, sizeof(st->lead.instance), "%016llx",
		 (unsigned long long)rnd);
	snprintf(st->lead.lease_arg, sizeof(st->lead.lease_arg), "%llu",
		 (unsigned long long)cfg->leader_lease_ms);
}

int dl__lead_argv(struct dl_store *st, enum lead_mode mode, const char *mine,
		  const char **argv, size_t *lens)
{
	int k = 0, held;

#ifdef DL_PLANT_FORGET
	/* A planted bug for the fault campaign's self-test (tests/faults):
	 * the daemon forgets what it saw Redis hold, and takes whatever
	 * Redis has for the truth, as dlockd once did. Never in a real
	 * build. */
	st->lead.seen.v.epoch = st->lead.seen.v.gen = 0;
#endif
	/* a take of a keyspace without a proof key writes one (SET NX) */
	if ((mode == LEAD_TAKE || mode == LEAD_START) &&
	    !st->lead.seen.v.proofkey[0]) {
		char hex[DL_PROOF_KEY_HEX + 1];

		if (dl_proof_key_new(hex) == 0)
			dl_seen_note_proofkey(&st->lead.seen, hex);
	}
	snprintf(st->lead.seen_arg[0], sizeof(st->lead.seen_arg[0]), "%llu",
		 (unsigned long long)st->lead.seen.v.epoch);
	snprintf(st->lead.seen_arg[1], sizeof(st->lead.seen_arg[1]), "%llu",
		 (unsigned long long)st->lead.seen.v.gen);
	dl__hz_args(st, mode);
	/* held: this daemon's leadership has not lapsed on its own clock
	 * (module comment: only then may a take keep the table) -- or this
	 * daemon is standalone (no node_id), the only writer of its keyspace
	 * by configuration: nobody can have taken over while it was cut
	 * off, so a Redis restart that outlasts the lease, or comes back
	 * from an older copy, costs neither its table nor its clients
	 * (found from outside: Redis down 6 s and back from a copy 1.3 s
	 * old, it dropped a held lease and closed grants for a day). A
	 * second daemon started on its keyspace by mistake meanwhile is
	 * still seen (its take raised the fence), unless Redis lost that
	 * take too (docs/ha.md). */
	held = st->lead.active && mine && mine[0] &&
	       (dl_mono_ms() < st->lead.leader.until_ms ||
		!st->cfg->node_id[0]);
#define ARG(p) (argv[k] = (p), lens[k] = strlen(argv[k]), k++)
	ARG("FCALL");
	ARG(DL_STORE_LEAD_FN);
	ARG("11");
	ARG(st->keys.leader);
	ARG(st->keys.fence);
	ARG(st->keys.gen);
	ARG(st->keys.token);
	ARG(st->keys.closed);
	ARG(st->keys.horizon);
	ARG(st->keys.standbys);
	ARG(st->keys.base);
	ARG(st->keys.proofkey);
	ARG(st->keys.challenge);
	ARG(st->keys.answers);
	ARG(mode_names[mode]);
	ARG(mine && mine[0] ? mine : "0");
	ARG(st->lead.node);
	ARG(st->lead.self_addr);
	ARG(st->lead.lease_arg);
	ARG(st->lead.instance);
	ARG(st->lead.seen_arg[0]);
	ARG(st->lead.seen_arg[1]);
	ARG(st->hz.hold_arg);
	ARG(held ? "1" : "0");
	ARG(st->hz.keep_arg);
	ARG(st->hz.raise_arg);
	ARG(st->hz.echo_arg);
	ARG(st->hz.drop_arg);
	ARG(st->lead.leader_inst);
	ARG(mode == LEAD_TAKE || mode == LEAD_START ? st->lead.seen.v.proofkey
						    : "");
	ARG(mode == LEAD_TAKE || mode == LEAD_START ? dl__attest_proof(st)
						    : "");
	ARG(mode == LEAD_LOOK ? dl__attest_answer(st) : "");
	ARG(mode == LEAD_TAKE || mode == LEAD_START ? st->hz.void_arg : "");
	ARG(mode == LEAD_TAKE || mode == LEAD_START ? st->hz.peers_arg : "");
#undef ARG
	return k;
}

void dl__fence_format(char *buf, size_t len, uint64_t epoch)
{
	snprintf(buf, len, "%llu/" DL_STORE_LAYOUT, (unsigned long long)epoch);
}

uint64_t dl__lead_until(const struct dl_store *st, uint64_t sent_ms)
{
	uint64_t lease = st->cfg->leader_lease_ms;

	return sent_ms + lease - lease * DL_LEADER_MARGIN_PCT / 100;
}

/* An epoch no take could have made, after `seen` (0: none seen). */
static int epoch_jumped(uint64_t seen, uint64_t epoch)
{
	return epoch > DL_EPOCH_MAX ||
	       (seen && epoch > seen + DL_EPOCH_JUMP_MAX);
}

/* The proof key Redis holds (server/proof.h), if it is one: the one this
 * daemon knows from now on (seen.h keeps the one before). */
static void proof_key_seen(struct dl_store *st, const redisReply *e)
{
	unsigned char k[DL_PROOF_KEY_LEN];

	if (e->len == DL_PROOF_KEY_HEX && dl_proof_key_parse(e->str, k) == 0)
		dl_seen_note_proofkey(&st->lead.seen, e->str);
}

/* "<epoch> <node> <addr> <instance>" into l and inst; 0 if it is not
 * that. */
static int parse_record(const char *s, size_t len, struct dl_leader *l,
			char inst[17])
{
	char buf[64 + DL_NODE_ID_MAX + DL_ADVERTISE_MAX];
	char *sp1, *sp2, *sp3, *end;

	if (len == 0 || len >= sizeof(buf))
		return 0;
	memcpy(buf, s, len);
	buf[len] = '\0';
	sp1 = strchr(buf, ' ');
	sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	sp3 = sp2 ? strchr(sp2 + 1, ' ') : NULL;
	if (!sp3 || (size_t)(sp2 - sp1 - 1) > DL_NODE_ID_MAX ||
	    (size_t)(sp3 - sp2 - 1) > DL_ADVERTISE_MAX)
		return 0;
	*sp1 = *sp2 = *sp3 = '\0';
	l->epoch = strtoull(buf, &end, 10);
	if (*end || l->epoch == 0)
		return 0;
	snprintf(l->node, sizeof(l->node), "%s", sp1 + 1);
	snprintf(l->addr, sizeof(l->addr), "%s", sp2 + 1);
	snprintf(inst, 17, "%.16s", sp3 + 1);
	return 1;
}

int dl__lead_reply(struct dl_store *st, enum lead_mode mode,
		   const redisReply *r, uint64_t sent_ms,
		   struct lead_reply *out)
{
	const redisReply *e0, *e1, *e2;
	char num[24], inst[17] = "";

	memset(out, 0, sizeof(*out));
	out->saw_epoch = st->lead.seen.v.epoch;
	out->saw_gen = st->lead.seen.v.gen;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 11)
		return DL_EPROTO;
	e0 = r->element[0];
	e1 = r->element[1];
	e2 = r->element[2];
	if (e0->type != REDIS_REPLY_INTEGER || e1->type != REDIS_REPLY_STRING ||
	    e2->type != REDIS_REPLY_INTEGER ||
	    r->element[3]->type != REDIS_REPLY_INTEGER ||
	    r->element[4]->type != REDIS_REPLY_STRING ||
	    r->element[5]->type != REDIS_REPLY_INTEGER ||
	    r->element[6]->type != REDIS_REPLY_STRING ||
	    r->element[7]->type != REDIS_REPLY_STRING ||
	    r->element[8]->type != REDIS_REPLY_ARRAY ||
	    r->element[9]->type != REDIS_REPLY_STRING ||
	    r->element[10]->type != REDIS_REPLY_ARRAY)
		return DL_EPROTO;
	proof_key_seen(st, r->element[9]);
	out->gen = r->element[3]->integer > 0 ? (uint64_t)r->element[3]->integer
					      : 0;
	out->behind = r->element[5]->integer == 1;
	if (r->element[6]->len > 0 &&
	    dl_parse_u64(r->element[6]->str, r->element[6]->len, &out->mark))
		out->mark = 0; /* not a number: the loader says so */
	if (e0->integer == 2) {
		/* renew: Redis went back under this daemon */
		out->behind = out->lagged = 1;
		dl__hz_reply(st, mode, r, sent_ms, 0);
		return 0;
	}
	out->ok = e0->integer == 1;
	dl__hz_reply(st, mode, r, sent_ms, out->ok);
	if (out->ok) {
		if (e1->len == 0 || e1->len >= sizeof(num))
			return DL_EPROTO;
		memcpy(num, e1->str, e1->len);
		num[e1->len] = '\0';
		if (dl_parse_u64(num, e1->len, &out->epoch) != 0 ||
		    out->epoch == 0)
			return DL_EPROTO;
		out->kept = e2->integer == 1;
		/* its epoch once it is found plausible (dl__lead_took) */
		dl_seen_note(&st->lead.seen, 0, out->gen);
		st->lead.leader.epoch = out->epoch;
		snprintf(st->lead.leader.node, sizeof(st->lead.leader.node),
			 "%s", st->lead.node);
		snprintf(st->lead.leader.addr, sizeof(st->lead.leader.addr),
			 "%s", st->lead.self_addr);
		st->lead.leader.until_ms = dl__lead_until(st, sent_ms);
		if (mode == LEAD_TAKE || mode == LEAD_START)
			dl__attest_took(st);
		/* a restart before then knows nobody took over (seen.h) */
		if (mode != LEAD_RESIGN)
			dl_seen_note_leading(&st->lead.seen,
					     st->lead.leader.until_ms);
		return 0;
	}
	memset(&st->lead.leader, 0, sizeof(st->lead.leader));
	if (e1->len > 0 &&
	    !parse_record(e1->str, e1->len, &st->lead.leader, inst))
		return DL_EPROTO;
	/* the active this standby saw lead, on a Redis that did not go back
	 * (a report of a loss names any other: the look's function) */
	if (!out->behind && e1->len > 0)
		memcpy(st->lead.leader_inst, inst, sizeof(inst));
	/* what its answer to a lapsed active's challenge says, and whether
	 * one stands (store_attest.c) */
	if (!out->behind && e1->len > 0)
		dl__attest_saw(st, inst, st->lead.leader.epoch);
	if (mode == LEAD_LOOK)
		dl__attest_challenges(st, r->element[10]);
	out->pttl = e2->integer;
	st->lead.leader.until_ms =
		dl_mono_ms() + (e2->integer > 0 ? (uint64_t)e2->integer : 0);
	/* a standby's look: what it sees now is what Redis held (an epoch
	 * or a mark that jumped is refused at a take, dl__plausible: not
	 * noted) */
	if (!out->behind &&
	    out->mark <=
		    (dl_wall_ms() + DL_TOKEN_AHEAD_MAX_MS) * DL_TOKEN_PER_MS)
		dl_seen_note_mark(&st->lead.seen, out->mark);
	if (!out->behind)
		dl_seen_note(&st->lead.seen,
			     epoch_jumped(st->lead.seen.v.epoch,
					  st->lead.leader.epoch)
				     ? 0
				     : st->lead.leader.epoch,
			     out->gen);
	return 0;
}

int dl__plausible(struct dl_store *st, uint64_t mark, uint64_t epoch, char *why,
		  size_t len)
{
	uint64_t wall = dl_wall_ms(), ceiling;

	ceiling = (wall + DL_TOKEN_AHEAD_MAX_MS) * DL_TOKEN_PER_MS;
	if (mark > ceiling)
		snprintf(
			why, len,
			"the stored token mark %llu is more than a day ahead of this machine's clock (tokens now start at %llu): this clock is behind by a day or more, or someone else wrote %s (a Redis tenant?), which could exhaust the token space. Fix the clock, or check who writes the key; to go on from it anyway, accept_token_jump = yes",
			(unsigned long long)mark,
			(unsigned long long)(wall * DL_TOKEN_PER_MS),
			st->keys.token);
	else if (epoch_jumped(st->lead.seen.v.epoch, epoch))
		snprintf(
			why, len,
			"the writer fence's epoch %llu jumped far above the %llu this daemon saw: not raised by a take. Check who writes %s; to go on from it anyway, accept_token_jump = yes",
			(unsigned long long)epoch,
			(unsigned long long)st->lead.seen.v.epoch,
			st->keys.fence);
	else
		return 0;
	if (st->cfg->accept_token_jump) {
		dl_warn("redis: %s (accepted: accept_token_jump = yes)", why);
		return 0;
	}
	dl_error("redis: %s", why);
	return DL_EBADARG;
}

int dl__lead_took(struct dl_store *st, struct lead_reply *lr, char *why,
		  size_t len)
{
	const struct dl_seen *seen = &st->lead.seen;

	if (dl__plausible(st, lr->mark, lr->epoch, why, len))
		return DL_EBADARG;
	dl_seen_note_lead(&st->lead.seen, lr->epoch,
			  strtoull(st->lead.instance, NULL, 16));
	dl_seen_note_mark(&st->lead.seen, lr->mark);
	if (lr->behind) {
		st->st.went_back++;
		dl_error(
			"redis: WENT BACK: it holds less than this daemon saw it hold (epoch %llu, write generation %llu): FLUSHALL, an eviction, a restart from an older AOF or snapshot, a replica promoted without the last writes, or an empty Redis in place of the old one. %s",
			(unsigned long long)lr->saw_epoch,
			(unsigned long long)lr->saw_gen,
			lr->kept
				? "This daemon holds its table and nobody else took over since: writing it back"
				: "This daemon cannot vouch for any lock: no new lease is granted until every lease granted before may have ended");
	}
	dl__hz_took(st, lr->kept);
	lr->closed_ms = (int64_t)dl__hz_closure_left(st);
	if (lr->closed_ms > 0) {
		dl_warn("redis: grants closed for %lld ms more (%s): no new lease until every lease that may have been told before has ended",
			(long long)lr->closed_ms, seen->v.why);
		st->hooks.closed((uint64_t)lr->closed_ms, seen->v.why,
				 st->hooks.ctx);
	}
	if (lr->kept && lr->mark)
		dl_locktab_raise_token(st->tab, lr->mark);
	return 0;
}

int dl__lead_describe(const struct dl_store *st, char *buf, size_t len)
{
	const struct dl_leader *l = &st->lead.leader;
	uint64_t now = dl_mono_ms();

	if (!l->epoch)
		return snprintf(buf, len, "nobody");
	return snprintf(
		buf, len, "node %s at %s (epoch %llu, lease ends in %llu ms)",
		l->node, l->addr, (unsigned long long)l->epoch,
		(unsigned long long)(l->until_ms > now ? l->until_ms - now
						       : 0));
}

/* ---- the leadership's timing on the link (store.c calls these) ---------- */

/* This daemon is not the active one any more: another holds the
 * leadership, or took it and wrote meanwhile. Changes stop at once (the
 * link goes, and with it every write in flight: they would be fenced),
 * and the server steps down (hook). */
void dl__lead_depose(struct dl_store *st, enum dl_store_role_event ev,
		     const char *how)
{
	char who[320];

	dl__lead_describe(st, who, sizeof(who));
	dl_error("redis: leadership lost (%s); the active daemon is %s", how,
		 who);
	dl__link_fail(st, "leadership lost");
	st->lead.active = 0;
	dl_seen_note_leading(&st->lead.seen, 0);
	dl__hz_role(st, 0);
	st->synced = 0;
	st->st.depositions++;
	st->hooks.role(ev, st->hooks.ctx);
}

/* A standby found the leadership free on a Redis that went back (the
 * active's record gone with what it wrote): the active, if it lives,
 * still holds its table and takes the leadership again to write it back
 * within its renewal period. A standby that took over first would have
 * nothing to vouch for (grants closed for max_ttl) and would depose it.
 * So it waits one leadership lease first; 1 while it waits. */
int dl__lead_lapse_wait(struct dl_store *st, const struct lead_reply *lr)
{
	uint64_t now = dl_mono_ms();

	if (dl__attest_defers(st)) {
		/* this standby answered a lapsed active's challenge: the
		 * active may be about to keep its table (store_attest.c) */
		st->lead.next_ms = now + DL_LEADER_LOOK_MS;
		return 1;
	}
	if (!lr->behind) {
		st->lead.lapse_wait_until = 0;
		return 0;
	}
	if (!st->lead.lapse_wait_until) {
		st->lead.lapse_wait_until = now + st->cfg->leader_lease_ms;
		dl_error(
			"redis: WENT BACK: no leadership record, and less than this daemon saw (epoch %llu, write generation %llu); waiting %llu ms for the active daemon to write its table back before taking over",
			(unsigned long long)st->lead.seen.v.epoch,
			(unsigned long long)st->lead.seen.v.gen,
			(unsigned long long)st->cfg->leader_lease_ms);
	}
	if (now >= st->lead.lapse_wait_until)
		return 0;
	st->lead.next_ms = now + DL_LEADER_LOOK_MS;
	return 1;
}

/* A renewal's or a look's reply. */
void dl__lead_on_reply(struct dl_store *st, enum batch_kind kind,
		       const redisReply *r, uint64_t sent_ms)
{
	struct lead_reply lr;
	char who[320];

	st->lead.busy = 0;
	if (dl__lead_reply(st, kind == BATCH_RENEW ? LEAD_RENEW : LEAD_LOOK, r,
			   sent_ms, &lr) != 0) {
		dl__link_fail(st,
			      "leadership: not a reply of " DL_STORE_LEAD_FN);
		return;
	}
	if (kind == BATCH_RENEW) {
		if (lr.lagged) {
			/* Its record or fence is gone and nobody took over
			 * since: Redis forgot. Not deposed: the next link
			 * takes the leadership again with the table kept and
			 * writes it back (store_lead.c). */
			dl_error(
				"redis: WENT BACK: this daemon's leadership record or fence is gone, and nobody took over since; taking it again to write the table back");
			dl__link_fail(st, "Redis went back");
			return;
		}
		if (lr.behind && !lr.ok) {
			/* Redis went back, and the record is another's (a
			 * daemon that took over, maybe with this daemon's own
			 * epoch) or gone while this daemon's leadership
			 * lapsed: nothing says nobody took over. The next
			 * link's take decides (store_lead.c); until then this
			 * daemon's leadership is not confirmed. */
			dl__lead_describe(st, who, sizeof(who));
			dl_error(
				"redis: WENT BACK: it holds less than this daemon saw, and the leadership is not this daemon's (it is %s); taking it again if it is free, keeping the table only if this daemon's leadership never lapsed",
				who);
			st->lead.leader.until_ms = 0;
			dl__link_fail(st, "Redis went back");
			return;
		}
		if (!lr.ok) {
			dl__lead_depose(st, DL_STORE_DEPOSED,
					"the renewal found another epoch");
			return;
		}
		st->st.renewals++;
		st->lead.next_ms = sent_ms + st->cfg->leader_lease_ms / 3;
		if (dl__hz_tick(st))
			dl__lead_send(st); /* the standbys' answers */
		return;
	}
	if (!st->lead.leader.epoch && dl__lead_lapse_wait(st, &lr))
		return;
	if (!st->lead.leader.epoch) {
		st->lead.next_ms = dl_mono_ms() + st->cfg->leader_lease_ms / 3;
		st->hooks.role(DL_STORE_LAPSED, st->hooks.ctx);
		return;
	}
	st->lead.lapse_wait_until = 0;
	dl__lead_next_look(st, &lr);
}

/* When to look next: next_look's time, or at once to pass a new horizon
 * back (store_horizon.c). */
void dl__lead_next_look(struct dl_store *st, const struct lead_reply *lr)
{
	uint64_t third = st->cfg->leader_lease_ms / 3;

	if (third > DL_LEADER_LOOK_MS)
		third = DL_LEADER_LOOK_MS;
	if (st->hz.relook) {
		st->hz.relook = 0;
		st->lead.next_ms = dl_mono_ms();
		return;
	}
	st->lead.next_ms =
		dl_mono_ms() + (lr->pttl > 0 && (uint64_t)lr->pttl < third
					? (uint64_t)lr->pttl + 1
					: third);
}

/* The leadership's turn on the link: renew it (the active) or look at it
 * (a standby) when due, one request at a time. */
void dl__lead_tick(struct dl_store *st)
{
	if (dl__hz_tick(st) || dl_mono_ms() >= st->lead.next_ms)
		dl__lead_send(st);
}

void dl__lead_send(struct dl_store *st)
{
	const char *argv[LEAD_ARGC];
	size_t lens[LEAD_ARGC];
	int argc;

	if (st->lead.busy || !st->ac ||
	    (st->link != LINK_UP && st->link != LINK_SYNCING))
		return;
	argc = dl__lead_argv(st, st->lead.active ? LEAD_RENEW : LEAD_LOOK,
			     st->fence, argv, lens);
	if (dl__batch_send(st, st->lead.active ? BATCH_RENEW : BATCH_LOOK, 0,
			   argc, argv, lens)) {
		dl__link_fail(st, "cannot queue a command");
		return;
	}
	st->lead.busy = 1;
	if (dl__hz_unsure_send(st)) {
		dl__link_fail(st, "cannot queue a command");
		return;
	}
	/* A standby that does not know the cluster id yet (the active had
	 * not written it when this link came up) asks with each look. */
	if (!st->lead.active && !st->lead.seen.v.cluster[0] &&
	    dl__cluster_send_get(st, NULL)) {
		dl__link_fail(st, "cannot queue a command");
		return;
	}
	if (dl_mono_ms() >= st->dur.next_check_ms) {
		/* Redis's persistence and eviction, again: a CONFIG SET while
		 * the daemon runs (store_durable.c) */
		static const char *const cfg_argv[] = {
			"CONFIG", "GET", "appendonly", "maxmemory-policy",
			"appendfsync"};
		static const size_t cfg_lens[] = {6, 3, 10, 16, 11};

		st->dur.next_check_ms = dl_mono_ms() + DL_STORE_CONFIG_MS;
		if (dl__batch_send(st, BATCH_CONFIG, 0, 5,
				   (const char **)cfg_argv, cfg_lens))
			dl__link_fail(st, "cannot queue a command");
	}
}
