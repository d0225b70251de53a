/* SPDX-License-Identifier: MIT */
/*
 * store_batch.c -- the one way dlockd writes to Redis: a batch of lock
 * records applied by a Redis function that first checks a writer fence.
 *
 * Why a fence. A write sent on a connection the daemon has given up on
 * (timed out, partitioned) is not cancelled by closing the socket: the
 * kernel keeps retransmitting it, and it may reach Redis seconds later,
 * after a newer connection re-synced the state. Applied then, it would put
 * back records and a token high-water mark that are no longer true. So
 * every connection first takes a new fence value (INCR <prefix>fence) and
 * every batch carries it; the function applies a batch only while its
 * fence is still the current one. A late batch of an old connection is
 * refused with a FENCED error that nobody reads. The fence is also what
 * keeps a second daemon on the same Redis from writing behind the first
 * one's back (the availability work builds on it).
 *
 * The batch is one FCALL: the function runs atomically, as MULTI/EXEC did,
 * and in one round trip:
 *
 *   FCALL dlock_apply_v4 <3 + n> <fence key> <token key> <names key>
 *         <lock key 1> .. <lock key n>
 *         <fence> <token mark or ""> <lock key prefix length>
 *         (<op> <record>) x n
 *
 * with op S (SET the record), N (SET it and SADD the name) or D (DEL the
 * key and SREM the name; the record is empty).
 *
 * The token mark. What Redis must hold is a value at or above every token
 * a client was told, so that the next active daemon starts above them
 * (dl_token_floor). Writing the last token itself cost every batch a GET
 * and a SET of the token key, a third of a one-lock batch's Redis calls.
 * Instead the mark is reserved ahead: a batch carries a mark only when the
 * table's last token has passed the one sent on this link, and then sets
 * it DL_TOKEN_RESERVE past that token (raised, never lowered). A grant is
 * told only once its batch is applied, and that batch, or an earlier one
 * of the same link (applied in order), carried a mark above its token.
 * The mark sent is forgotten with the link (a new connection sends one in
 * its first batch), so a batch lost with a link cannot leave a grant
 * behind a mark that never arrived. The writes go as one MSET, one DEL, one SADD and one SREM (in
 * chunks of 1000): a handful of Redis calls per batch whatever its size,
 * which is what makes the function cheaper in Redis CPU than the MULTI/
 * EXEC of one command per write it replaced (make bench measures both). Records carry no Redis expiry: a lease's end is decided by the
 * daemon's monotonic clock alone (DESIGN.md section 5), and an expiry on
 * Redis's own wall clock could delete a lease its holder still believes
 * in if that clock were stepped.
 */
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/store_private.h"

/* The library's name carries the version of its functions' contract
 * (arguments, records): any change to the code below must come with new
 * names (dlock_v4, dlock_apply_v4, ...). Every daemon loads its library
 * with FUNCTION LOAD REPLACE at each connection, so two builds that shared
 * a name on one Redis would keep replacing each other's functions. */
const char dl__store_library[] =
	"#!lua name=dlock_v4\n"
	"-- dlockd's writes and leadership: see server/store_batch.c and\n"
	"-- server/store_lead.c in the dlockd sources.\n"
	"local function apply(keys, args)\n"
	"  local fence = redis.call('GET', keys[1])\n"
	"  if fence ~= args[1] then\n"
	"    return redis.error_reply('FENCED writer fence ' .. args[1] ..\n"
	"      ' is stale, the current one is ' .. tostring(fence))\n"
	"  end\n"
	"  local plen = tonumber(args[3])\n"
	"  local sets, dels, adds, rems = {}, {}, {}, {}\n"
	"  for i = 4, #keys do\n"
	"    local op, key = args[2 * i - 4], keys[i]\n"
	"    if op == 'D' then\n"
	"      dels[#dels + 1] = key\n"
	"      rems[#rems + 1] = string.sub(key, plen + 1)\n"
	"    else\n"
	"      sets[#sets + 1] = key\n"
	"      sets[#sets + 1] = args[2 * i - 3]\n"
	"      if op == 'N' then adds[#adds + 1] = string.sub(key, plen + 1) end\n"
	"    end\n"
	"  end\n"
	"  for j = 1, #sets, 1000 do\n"
	"    redis.call('MSET', unpack(sets, j, math.min(j + 999, #sets)))\n"
	"  end\n"
	"  for j = 1, #dels, 1000 do\n"
	"    redis.call('DEL', unpack(dels, j, math.min(j + 999, #dels)))\n"
	"  end\n"
	"  for j = 1, #adds, 1000 do\n"
	"    redis.call('SADD', keys[3], unpack(adds, j, math.min(j + 999, #adds)))\n"
	"  end\n"
	"  for j = 1, #rems, 1000 do\n"
	"    redis.call('SREM', keys[3], unpack(rems, j, math.min(j + 999, #rems)))\n"
	"  end\n"
	"  local tok = args[2]\n"
	"  if tok ~= '' then\n"
	"    local cur = redis.call('GET', keys[2])\n"
	"    if not cur or #tok > #cur or (#tok == #cur and tok > cur) then\n"
	"      redis.call('SET', keys[2], tok)\n"
	"    end\n"
	"  end\n"
	"  return #keys - 3\n"
	"end\n"
	"local function lead(keys, args)\n"
	"  local mode, node, inst = args[1], args[3], args[6]\n"
	"  local mine = tonumber(args[2])\n"
	"  local cur = redis.call('GET', keys[1])\n"
	"  local fence = tonumber(redis.call('GET', keys[2]) or '0')\n"
	"  local epoch, holder, hinst\n"
	"  if cur then\n"
	"    epoch, holder, hinst = string.match(cur, '^(%d+) (%S+) %S+ (%S+)$')\n"
	"    epoch = tonumber(epoch)\n"
	"  end\n"
	"  local this = cur and hinst == inst\n"
	"  local ours = this and epoch == mine and fence == mine\n"
	"  -- only this process writes its instance id: a record of it with a\n"
	"  -- larger epoch is a take of its own whose reply it lost\n"
	"  local mine_late = this and mine > 0 and epoch > mine\n"
	"  if mode == 'renew' and ours then\n"
	"    redis.call('PEXPIRE', keys[1], args[5])\n"
	"    return {1, args[2], 1}\n"
	"  end\n"
	"  if mode == 'resign' and ours then\n"
	"    redis.call('DEL', keys[1])\n"
	"    return {1, args[2], 1}\n"
	"  end\n"
	"  -- a Redis behind this daemon: its record (or none: the leadership\n"
	"  -- key expired during a fail-over) and a fence nobody raised since\n"
	"  local lagged = mine > 0 and fence <= mine and\n"
	"    ((this and epoch <= mine) or not cur)\n"
	"  if (mode == 'take' or mode == 'start') and (not cur or ours or lagged or\n"
	"      mine_late or (mode == 'start' and holder == node)) then\n"
	"    local kept = 0\n"
	"    if mine > 0 and (fence == mine or lagged or mine_late) then\n"
	"      kept = 1\n"
	"    end\n"
	"    local e = math.max(fence, mine, epoch or 0) + 1\n"
	"    redis.call('SET', keys[2], e)\n"
	"    redis.call('SET', keys[1], e .. ' ' .. node .. ' ' .. args[4] ..\n"
	"      ' ' .. inst, 'PX', args[5])\n"
	"    return {1, tostring(e), kept}\n"
	"  end\n"
	"  return {0, cur or '', redis.call('PTTL', keys[1])}\n"
	"end\n"
	"redis.register_function('" DL_STORE_APPLY_FN "', apply)\n"
	"redis.register_function('" DL_STORE_LEAD_FN "', lead)\n";

int64_t dl__store_wall_offset(void)
{
	return (int64_t)dl_wall_ms() - (int64_t)dl_mono_ms();
}

const char *dl__store_reply_error(const redisReply *r)
{
	size_t i;
	const char *e;

	if (r->type == REDIS_REPLY_ERROR)
		return r->str;
	if (r->type == REDIS_REPLY_ARRAY)
		for (i = 0; i < r->elements; i++)
			if ((e = dl__store_reply_error(r->element[i])) != NULL)
				return e;
	return NULL;
}

int dl__store_not_ready(const char *err)
{
	static const char *const words[] = {"LOADING", "BUSY", "READONLY",
					    "MASTERDOWN", "TRYAGAIN"};
	size_t i, n;

	for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		n = strlen(words[i]);
		if (strncmp(err, words[i], n) == 0 &&
		    (err[n] == ' ' || err[n] == '\0'))
			return 1;
	}
	return 0;
}

void dl__wb_reset(struct wbatch *wb)
{
	wb->text.len = 0;
	wb->nlocks = 0;
}

void dl__wb_free(struct wbatch *wb)
{
	free(wb->text.p);
	free(wb->locks);
	free(wb->argv);
	free(wb->lens);
}

int dl__wb_lock(struct dl_store *st, struct dl_str name,
		const struct dl_lock *lk, int add_name, int64_t wall_off)
{
	struct wbatch *wb = &st->wb;
	struct wlock *w;
	size_t cap;

	if (wb->nlocks == wb->cap) {
		cap = wb->cap ? wb->cap * 2 : 64;
		w = realloc(wb->locks, cap * sizeof(*w));
		if (!w)
			return DL_ENOMEM;
		wb->locks = w;
		wb->cap = cap;
	}
	w = &wb->locks[wb->nlocks];
	w->koff = wb->text.len;
	w->klen = st->lock_prefix_len + name.len;
	if (dl_buf_add(&wb->text, st->lock_prefix, st->lock_prefix_len) ||
	    dl_buf_add(&wb->text, name.p, name.len))
		return DL_ENOMEM;
	w->voff = wb->text.len;
	w->vlen = 0;
	if (!lk || (!lk->holders && !lk->qhead)) {
		w->op = "D";
	} else {
		w->op = add_name ? "N" : "S";
		if (dl_record_format(lk, wall_off, &st->val) ||
		    dl_buf_add(&wb->text, st->val.p, st->val.len))
			return DL_ENOMEM;
		w->vlen = st->val.len;
	}
	wb->nlocks++;
	return 0;
}

int dl__wb_argv(struct dl_store *st, const char *fence, int *argc,
		const char ***argv, const size_t **lens)
{
	struct wbatch *wb = &st->wb;
	size_t n = 9 + 3 * wb->nlocks, i, k = 0;
	uint64_t last, mark;
	const char **a;
	size_t *l;

	if (n > wb->argv_cap) {
		a = realloc(wb->argv, n * sizeof(*a));
		if (a)
			wb->argv = a;
		l = realloc(wb->lens, n * sizeof(*l));
		if (l)
			wb->lens = l;
		if (!a || !l)
			return DL_ENOMEM;
		wb->argv_cap = n;
	}
	a = wb->argv;
	l = wb->lens;
#define ARG(p, len) (a[k] = (p), l[k] = (len), k++)
	ARG("FCALL", 5);
	ARG(DL_STORE_APPLY_FN, sizeof(DL_STORE_APPLY_FN) - 1);
	ARG(wb->numkeys, dl_u64_to_dec(3 + wb->nlocks, wb->numkeys));
	ARG(st->fence_key, strlen(st->fence_key));
	ARG(st->token_key, strlen(st->token_key));
	ARG(st->names_key, strlen(st->names_key));
	for (i = 0; i < wb->nlocks; i++)
		ARG(wb->text.p + wb->locks[i].koff, wb->locks[i].klen);
	ARG(fence, strlen(fence));
	last = dl_locktab_last_token(st->tab);
	if (last > st->token_mark || st->token_mark == 0) {
		mark = last > UINT64_MAX - DL_TOKEN_RESERVE
			       ? UINT64_MAX
			       : last + DL_TOKEN_RESERVE;
		ARG(wb->token, dl_u64_to_dec(mark, wb->token));
		st->token_mark = mark;
	} else {
		ARG("", 0);
	}
	ARG(wb->plen, dl_u64_to_dec(st->lock_prefix_len, wb->plen));
	for (i = 0; i < wb->nlocks; i++) {
		ARG(wb->locks[i].op, 1);
		ARG(wb->text.p + wb->locks[i].voff, wb->locks[i].vlen);
	}
#undef ARG
	*argc = (int)k;
	*argv = a;
	*lens = l;
	return 0;
}
