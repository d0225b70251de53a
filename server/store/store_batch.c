/* SPDX-License-Identifier: MIT */
/*
 * store_batch.c -- the one way dlockd writes to Redis: batches of lock
 * records applied by Redis functions that first check a writer fence.
 *
 * Why a fence. A write sent on a connection the daemon has given up on
 * (timed out, partitioned) is not cancelled by closing the socket: the
 * kernel keeps retransmitting it, and it may reach Redis seconds later,
 * after a newer connection re-synced the state. Applied then, it would put
 * back records and a token high-water mark that are no longer true. So
 * every connection first takes a new fence value (the leadership's take,
 * store_lead.c) and every batch carries it; a function applies a batch
 * only while its fence is still the current one. A late batch of an old
 * connection is refused with a FENCED error that nobody reads. The fence
 * is also what keeps a second daemon on the same Redis from writing
 * behind the first one's back, and, by its form "<epoch>/2", what keeps
 * daemons of layout 1 away from a Redis in layout 2 (store_lead.c).
 *
 * An epoch alone does not name one writer. A take goes above every epoch
 * its taker saw, but when Redis forgot the last takes (FLUSHALL, a
 * promoted replica that missed them, an older copy), a daemon that never
 * saw them may reach the very epoch of a daemon that made one and still
 * believes itself active until its next renewal: the fence then read that
 * daemon's epoch again, and its writes (grants it acknowledged) went in
 * under the new leader's fence, which knew nothing of them (found by the
 * fault campaign). So a write also checks the leadership record: while
 * there is one, it must name the writer's process (its instance). With
 * none (its Redis expiry passed during a fail-over), the fence decides
 * alone, as nobody took over since.
 *
 * Store layout 2 (store.c): lock records are fields of DL_STORE_BUCKETS
 * hashes, <prefix>rec:<b>, b the name's bucket (bucket.h). Each write is
 * one FCALL, atomic as MULTI/EXEC was, in one round trip:
 *
 *   FCALL dlock_apply_v11 <4 + n> <fence key> <token key> <gen key>
 *         <leader key> <bucket key of lock 1> .. <bucket key of lock n>
 *         <fence> <token mark or ""> <instance>
 *         (<op> <name> <record>) x n
 *
 * op S sets the lock's field (HSET), D deletes it (HDEL; Redis removes a
 * hash whose last field goes, so a bucket without locks has no key). A
 * bucket key repeats when two locks share it: every key a function
 * touches is declared. The apply function groups the fields per bucket,
 * one HSET and one HDEL per bucket, only for a batch of more than
 * APPLY_GROUP_MIN locks: below that few locks share a bucket, and
 * building the groups costs Redis more than the calls it saves (measured
 * with tests/bench/fcall, see APPLY_GROUP_MIN). A batch names each lock
 * once (the dirty set holds a lock once), so the order of its writes
 * does not matter.
 *
 *   FCALL dlock_replace_v11 <4 + k> <fence key> <token key> <gen key>
 *         <leader key> <key 1> .. <key k>
 *         <fence> <token mark or ""> <instance>
 *         (<count> (<name> <record>) x count) x k
 *
 * replaces each key whole: DEL, then, with a count above 0, HSET of its
 * entries. A re-sync sends every bucket this way (empty ones too: they
 * are deleted), a few thousand records per call (DL_STORE_RESYNC_CHUNK),
 * so that a lock in the table is never missing from Redis, not even
 * between two calls; the migration from layout 1 uses it too, and deletes
 * the old keys with a count of 0 (store_load.c).
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
 * behind a mark that never arrived. Records carry no Redis expiry: a
 * lease's end is decided by the daemon's monotonic clock alone, and an
 * expiry on Redis's own wall clock could delete a lease its holder still
 * believes in if that clock were stepped.
 *
 * The write generation. Both functions, and every take of the
 * leadership, raise <prefix>gen by one and answer its new value: a
 * number that only grows in a Redis that keeps what it acknowledged. The
 * store remembers the largest it was answered (seen.h), and a take that
 * finds Redis below it knows that Redis went back (store_lead.c).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "server/clock.h"
#include "server/store/store_private.h"

/* Above this many locks in one batch the apply function groups them per
 * bucket (see the top comment): about two per bucket, where the calls
 * saved start to outweigh the Lua tables built (tests/bench/fcall, Redis
 * CPU per change, grouped / one call per lock: 1.17 / 0.81 at 50 locks,
 * 1.25 / 1.24 at 1000, 0.99 / 1.02 at 2000, 0.79 / 0.80 at 5000, 0.70 /
 * 0.74 at 10000). */
#define APPLY_GROUP_MIN (2 * DL_STORE_BUCKETS)

/* Arguments per HSET or HDEL of the functions: Lua's unpack() puts them
 * all on its stack, which holds a few thousand. */
#define LUA_UNPACK_MAX 2000

#define STR_(x) #x
#define STR(x)	STR_(x)

/* The library's name carries the version of its functions' contract
 * (arguments, key layout, records): any change to the code below must
 * come with new names (dlock_v11, dlock_apply_v11, ...). Every daemon loads
 * its library with FUNCTION LOAD REPLACE at each connection, so two builds
 * that shared a name on one Redis would keep replacing each other's
 * functions; builds of different versions load side by side. */
/* clang-format off */
static const char lua_writes[] =
	"#!lua name=" DL_STORE_LIBRARY "\n"
	"-- dlockd's writes and leadership: see server/store/store_batch.c and\n"
	"-- server/store/store_lead.c in the dlockd sources.\n"
	"local UNPACK, GROUP_MIN, LAYOUT = " STR(LUA_UNPACK_MAX) ", "
		STR(APPLY_GROUP_MIN) ", '" DL_STORE_LAYOUT "'\n"
	"local EPOCH_MAX = " STR(DL_EPOCH_MAX) "\n"
	"local STANDBYS_MAX = " STR(DL_STANDBYS_MAX) "\n"
	"-- keys: fence, token, gen, leader, then the records' keys\n"
	"-- args: fence, token mark, instance, then the records\n"
	"local function fenced(keys, args)\n"
	"  local fence = redis.call('GET', keys[1])\n"
	"  if fence ~= args[1] then\n"
	"    return redis.error_reply('FENCED writer fence ' .. args[1] ..\n"
	"      ' is stale, the current one is ' .. tostring(fence))\n"
	"  end\n"
	"  -- an epoch reached again after Redis forgot a take: the record,\n"
	"  -- while there is one, names the writer (store_batch.c)\n"
	"  local cur = redis.call('GET', keys[4])\n"
	"  if cur and string.match(cur, '^%d+ %S+ %S+ (%S+)$') ~= args[3] then\n"
	"    return redis.error_reply('FENCED writer fence ' .. args[1] ..\n"
	"      ' belongs to another process: the leadership record is ' .. cur)\n"
	"  end\n"
	"end\n"
	"local function mark(keys, tok)\n"
	"  if tok ~= '' then\n"
	"    local cur = redis.call('GET', keys[2])\n"
	"    if not cur or #tok > #cur or (#tok == #cur and tok > cur) then\n"
	"      redis.call('SET', keys[2], tok)\n"
	"    end\n"
	"  end\n"
	"end\n"
	"local function each(cmd, key, v)\n"
	"  for j = 1, #v, UNPACK do\n"
	"    redis.call(cmd, key, unpack(v, j, math.min(j + UNPACK - 1, #v)))\n"
	"  end\n"
	"end\n"
	"local function bump(keys)\n"
	"  return redis.call('INCR', keys[3])\n"
	"end\n"
	"local function apply(keys, args)\n"
	"  local err = fenced(keys, args)\n"
	"  if err then return err end\n"
	"  if #keys - 4 <= GROUP_MIN then\n"
	"    for i = 5, #keys do\n"
	"      local a = 3 * i - 11\n"
	"      if args[a] == 'D' then\n"
	"        redis.call('HDEL', keys[i], args[a + 1])\n"
	"      else\n"
	"        redis.call('HSET', keys[i], args[a + 1], args[a + 2])\n"
	"      end\n"
	"    end\n"
	"  else\n"
	"    local sets, dels = {}, {}\n"
	"    for i = 5, #keys do\n"
	"      local a, k = 3 * i - 11, keys[i]\n"
	"      if args[a] == 'D' then\n"
	"        local d = dels[k] or {}\n"
	"        dels[k] = d\n"
	"        d[#d + 1] = args[a + 1]\n"
	"      else\n"
	"        local s = sets[k] or {}\n"
	"        sets[k] = s\n"
	"        s[#s + 1] = args[a + 1]\n"
	"        s[#s + 1] = args[a + 2]\n"
	"      end\n"
	"    end\n"
	"    for k, s in pairs(sets) do each('HSET', k, s) end\n"
	"    for k, d in pairs(dels) do each('HDEL', k, d) end\n"
	"  end\n"
	"  mark(keys, args[2])\n"
	"  return bump(keys)\n"
	"end\n"
	"local function replace(keys, args)\n"
	"  local err = fenced(keys, args)\n"
	"  if err then return err end\n"
	"  local a = 4\n"
	"  for i = 5, #keys do\n"
	"    local c = tonumber(args[a])\n"
	"    redis.call('DEL', keys[i])\n"
	"    for j = a + 1, a + 2 * c, UNPACK do\n"
	"      redis.call('HSET', keys[i],\n"
	"        unpack(args, j, math.min(j + UNPACK - 1, a + 2 * c)))\n"
	"    end\n"
	"    a = a + 1 + 2 * c\n"
	"  end\n"
	"  mark(keys, args[2])\n"
	"  return bump(keys)\n"
	"end\n";
static const char lua_register[] =
	"redis.register_function('" DL_STORE_APPLY_FN "', apply)\n"
	"redis.register_function('" DL_STORE_REPLACE_FN "', replace)\n"
	"redis.register_function('" DL_STORE_LEAD_FN "', lead)\n";
/* clang-format on */

/* The library's text: the writes' functions, the leadership's
 * (store_lead.c), and the registrations, in that order, put together
 * once. */
const char *dl__store_library(void)
{
	static char text[DL_STORE_LIBRARY_MAX];
	int n;

	if (!text[0]) {
		n = snprintf(text, sizeof(text), "%s%s%s", lua_writes,
			     dl__lua_lead, lua_register);
		if (n < 0 || (size_t)n >= sizeof(text))
			abort(); /* DL_STORE_LIBRARY_MAX: a build error */
	}
	return text;
}

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
	static const char *const words[] = {
		"LOADING",  "BUSY",  "READONLY", "MASTERDOWN",
		"TRYAGAIN", "MOVED", "ASK",	 "CLUSTERDOWN"};
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
	wb->nentries = 0;
	wb->nkeys = 0;
}

void dl__wb_free(struct wbatch *wb)
{
	free(wb->text.p);
	free(wb->locks);
	free(wb->argv);
	free(wb->lens);
}

/* ---- the keys ----------------------------------------------------------- */

/* Each name of struct store_keys, after the prefix. */
static const struct {
	size_t off;
	const char *suffix;
} key_names[] = {
	{offsetof(struct store_keys, token), "token"},
	{offsetof(struct store_keys, fence), "fence"},
	{offsetof(struct store_keys, leader), "leader"},
	{offsetof(struct store_keys, gen), "gen"},
	{offsetof(struct store_keys, closed), "closed"},
	{offsetof(struct store_keys, horizon), "horizon"},
	{offsetof(struct store_keys, standbys), "standbys"},
	{offsetof(struct store_keys, base), "base"},
	{offsetof(struct store_keys, proofkey), "proofkey"},
	{offsetof(struct store_keys, challenge), "challenge"},
	{offsetof(struct store_keys, answers), "answers"},
	{offsetof(struct store_keys, cluster), "cluster"},
	{offsetof(struct store_keys, run), "run"},
	{offsetof(struct store_keys, part), "part"},
	{offsetof(struct store_keys, names), "locks"},
	{offsetof(struct store_keys, lock_prefix), "lock:"},
};

static char **key_at(struct store_keys *k, size_t i)
{
	return (char **)((char *)k + key_names[i].off);
}

int dl__keys_init(struct store_keys *k, const char *prefix)
{
	struct dl_buf b = {0};
	size_t i;
	uint32_t n;

	for (i = 0; i < sizeof(key_names) / sizeof(key_names[0]); i++) {
		b.len = 0;
		if (dl_buf_printf(&b, "%s%s", prefix, key_names[i].suffix) ||
		    dl_buf_add(&b, "", 1) || !(*key_at(k, i) = strdup(b.p))) {
			free(b.p);
			return DL_ENOMEM;
		}
	}
	k->lock_prefix_len = strlen(k->lock_prefix);
	/* P rec:0 .. P rec:1023, back to back (dl__rec_key) */
	b.len = 0;
	for (n = 0; n < DL_STORE_BUCKETS; n++) {
		k->rec_off[n] = (uint32_t)b.len;
		if (dl_buf_printf(&b, "%srec:%u", prefix, (unsigned)n) ||
		    dl_buf_add(&b, "", 1)) {
			free(b.p);
			return DL_ENOMEM;
		}
	}
	k->rec_off[DL_STORE_BUCKETS] = (uint32_t)b.len;
	k->rec = b.p;
	return 0;
}

void dl__keys_free(struct store_keys *k)
{
	size_t i;

	for (i = 0; i < sizeof(key_names) / sizeof(key_names[0]); i++) {
		free(*key_at(k, i));
		*key_at(k, i) = NULL;
	}
	free(k->rec);
	k->rec = NULL;
}

const char *dl__rec_key(const struct dl_store *st, uint32_t b, size_t *len)
{
	*len = st->keys.rec_off[b + 1] - st->keys.rec_off[b] - 1;
	return st->keys.rec + st->keys.rec_off[b];
}

/* A new item, its name (or key) `n` copied into the text. */
static struct wlock *wb_item(struct wbatch *wb, char op, uint32_t bucket,
			     const char *n, size_t nlen)
{
	struct wlock *w;
	size_t cap;

	if (wb->nlocks == wb->cap) {
		cap = wb->cap ? wb->cap * 2 : 64;
		w = realloc(wb->locks, cap * sizeof(*w));
		if (!w)
			return NULL;
		wb->locks = w;
		wb->cap = cap;
	}
	w = &wb->locks[wb->nlocks];
	w->op = op;
	w->bucket = bucket;
	w->noff = wb->text.len;
	w->nlen = nlen;
	w->voff = wb->text.len + nlen;
	w->vlen = 0;
	if (dl_buf_add(&wb->text, n, nlen))
		return NULL;
	wb->nlocks++;
	wb->nentries += op == 'S' || op == 'E';
	wb->nkeys += op != 'E';
	return w;
}

/* Its value: lk's record. */
static int wb_record(struct dl_store *st, struct wlock *w,
		     const struct dl_lock *lk, int64_t wall_off)
{
	struct wbatch *wb = &st->writes.wb;

	w->voff = wb->text.len;
	if (dl_record_format(st->tab, lk, wall_off, &st->writes.val) ||
	    dl_buf_add(&wb->text, st->writes.val.p, st->writes.val.len))
		return DL_ENOMEM;
	w->vlen = st->writes.val.len;
	return 0;
}

/* Its value: a count. */
static int wb_count(struct wbatch *wb, struct wlock *w, size_t n)
{
	char num[24];

	w->voff = wb->text.len;
	w->vlen = dl_u64_to_dec(n, num);
	return dl_buf_add(&wb->text, num, w->vlen) ? DL_ENOMEM : 0;
}

int dl__wb_lock(struct dl_store *st, struct dl_str name,
		const struct dl_lock *lk, int64_t wall_off)
{
	int del = !lk || dl_lock_empty(lk);
	struct wlock *w =
		wb_item(&st->writes.wb, del ? 'D' : 'S',
			dl_store_bucket(name.p, name.len), name.p, name.len);

	if (!w)
		return DL_ENOMEM;
	return del ? 0 : wb_record(st, w, lk, wall_off);
}

int dl__wb_bucket(struct dl_store *st, const struct bucket_index *bi,
		  uint32_t b, int64_t wall_off)
{
	const struct bucket_list *bl = &bi->b[b];
	size_t i, n = 0;
	struct dl_str name;
	struct wlock *w;
	int r;

	/* A re-sync formats a bucket some calls after it indexed the table:
	 * a lock emptied since is still there (dirty, and the table is
	 * pinned), and has no record any more. (Written, it would be a
	 * record without holders, read as free, until the drain after the
	 * link is up deleted it: tidiness, not safety.) */
	for (i = 0; i < bl->n; i++)
		n += !dl_lock_empty(bl->v[i]);
	if (!(w = wb_item(&st->writes.wb, 'B', b, "", 0)) ||
	    wb_count(&st->writes.wb, w, n))
		return DL_ENOMEM;
	for (i = 0; i < bl->n; i++) {
		if (dl_lock_empty(bl->v[i]))
			continue;
		name = dl_lock_name(bl->v[i]);
		if (!(w = wb_item(&st->writes.wb, 'E', b, name.p, name.len)))
			return DL_ENOMEM;
		if ((r = wb_record(st, w, bl->v[i], wall_off)) != 0)
			return r;
	}
	return 0;
}

int dl__wb_key(struct dl_store *st, const char *key, size_t len)
{
	struct wlock *w = wb_item(&st->writes.wb, 'K', 0, key, len);

	if (!w || wb_count(&st->writes.wb, w, 0))
		return DL_ENOMEM;
	return 0;
}

int dl__wb_buckets(struct dl_store *st, const struct bucket_index *bi,
		   uint32_t *b, int64_t wall_off)
{
	int r = 0;

	while (!r && *b < DL_STORE_BUCKETS &&
	       st->writes.wb.nentries < DL_STORE_RESYNC_CHUNK)
		r = dl__wb_bucket(st, bi, (*b)++, wall_off);
	return r;
}

/* Room for n arguments in wb's argv. */
static int wb_room(struct wbatch *wb, size_t n)
{
	const char **a;
	size_t *l;

	if (n <= wb->argv_cap)
		return 0;
	a = realloc(wb->argv, n * sizeof(*a));
	if (a)
		wb->argv = a;
	l = realloc(wb->lens, n * sizeof(*l));
	if (l)
		wb->lens = l;
	if (!a || !l)
		return DL_ENOMEM;
	wb->argv_cap = n;
	return 0;
}

/* Append the token mark argument: a new mark when the table's last token
 * has passed the one sent on this link, else "" (top comment). */
static void token_arg(struct dl_store *st, const char **a, size_t *l)
{
	struct wbatch *wb = &st->writes.wb;
	uint64_t last = dl_locktab_last_token(st->tab), mark;

	if (last > st->writes.token_mark || st->writes.token_mark == 0) {
		mark = last > UINT64_MAX - DL_TOKEN_RESERVE
			       ? UINT64_MAX
			       : last + DL_TOKEN_RESERVE;
		*a = wb->token;
		*l = dl_u64_to_dec(mark, wb->token);
		st->writes.token_mark = mark;
		dl_seen_note_mark(&st->lead.seen, mark);
	} else {
		*a = "";
		*l = 0;
	}
}

/* The part both functions share: FCALL fn numkeys, the fence, token,
 * generation and leader keys, the key of every item but an 'E' (a bucket,
 * or a 'K'; a bucket repeats when two locks share it), the fence, the
 * token mark and this process's instance. `room`:
 * the arguments the caller adds after them. Returns the arguments written
 * (wb->argv), or 0 when out of memory. */
static size_t wb_head(struct dl_store *st, const char *fn, size_t nkeys,
		      const char *fence, size_t room)
{
	struct wbatch *wb = &st->writes.wb;
	const struct wlock *w;
	const char **a;
	size_t *l, k = 0, i;

	if (wb_room(wb, 10 + wb->nlocks + room))
		return 0;
	a = wb->argv;
	l = wb->lens;
#define ARG(p, len) (a[k] = (p), l[k] = (len), k++)
	ARG("FCALL", 5);
	ARG(fn, strlen(fn));
	ARG(wb->numkeys, dl_u64_to_dec(4 + nkeys, wb->numkeys));
	ARG(st->keys.fence, strlen(st->keys.fence));
	ARG(st->keys.token, strlen(st->keys.token));
	ARG(st->keys.gen, strlen(st->keys.gen));
	ARG(st->keys.leader, strlen(st->keys.leader));
	for (i = 0; i < wb->nlocks; i++) {
		w = &wb->locks[i];
		if (w->op == 'K') {
			ARG(wb->text.p + w->noff, w->nlen);
		} else if (w->op != 'E') {
			a[k] = dl__rec_key(st, w->bucket, &l[k]);
			k++;
		}
	}
	ARG(fence, strlen(fence));
	token_arg(st, &a[k], &l[k]);
	k++;
	ARG(st->lead.instance, strlen(st->lead.instance));
#undef ARG
	return k;
}

int dl__wb_argv(struct dl_store *st, const char *fence, int *argc,
		const char ***argv, const size_t **lens)
{
	struct wbatch *wb = &st->writes.wb;
	size_t i, k = wb_head(st, DL_STORE_APPLY_FN, wb->nlocks, fence,
			      3 * wb->nlocks);
	const char **a;
	size_t *l;

	if (!k)
		return DL_ENOMEM;
	a = wb->argv; /* wb_head may have moved it */
	l = wb->lens;
	for (i = 0; i < wb->nlocks; i++) {
		const struct wlock *w = &wb->locks[i];

		a[k] = w->op == 'D' ? "D" : "S";
		l[k++] = 1;
		a[k] = wb->text.p + w->noff;
		l[k++] = w->nlen;
		a[k] = wb->text.p + w->voff;
		l[k++] = w->vlen;
	}
	*argc = (int)k;
	*argv = a;
	*lens = l;
	return 0;
}

int dl__wb_replace_argv(struct dl_store *st, const char *fence, int *argc,
			const char ***argv, const size_t **lens)
{
	struct wbatch *wb = &st->writes.wb;
	size_t i, k = wb_head(st, DL_STORE_REPLACE_FN, wb->nkeys, fence,
			      2 * wb->nlocks);
	const char **a;
	size_t *l;

	if (!k)
		return DL_ENOMEM;
	a = wb->argv; /* wb_head may have moved it */
	l = wb->lens;
	for (i = 0; i < wb->nlocks; i++) {
		const struct wlock *w = &wb->locks[i];

		if (w->op == 'E') {
			a[k] = wb->text.p + w->noff;
			l[k++] = w->nlen;
		}
		a[k] = wb->text.p + w->voff; /* the record, or the count */
		l[k++] = w->vlen;
	}
	*argc = (int)k;
	*argv = a;
	*lens = l;
	return 0;
}

/* ---- the table by bucket ---------------------------------------------- */

void dl__bucket_index_add(const struct dl_lock *lk, void *arg)
{
	struct bucket_index *bi = arg;
	struct dl_str name = dl_lock_name(lk);
	struct bucket_list *bl;
	const struct dl_lock **v;
	size_t cap;

	/* An empty lock still in the table (its delete not yet drained,
	 * e.g. a lazy release) has no record: its bucket goes without it. */
	if (bi->err || dl_lock_empty(lk))
		return;
	bl = &bi->b[dl_store_bucket(name.p, name.len)];
	if (bl->n == bl->cap) {
		cap = bl->cap ? bl->cap * 2 : 16;
		if (!(v = realloc(bl->v, cap * sizeof(*v)))) {
			bi->err = DL_ENOMEM;
			return;
		}
		bl->v = v;
		bl->cap = cap;
	}
	bl->v[bl->n++] = lk;
	bi->n++;
}

int dl__bucket_index(struct dl_store *st, struct bucket_index *bi)
{
	memset(bi, 0, sizeof(*bi));
	dl_locktab_foreach(st->tab, dl__bucket_index_add, bi);
	return bi->err;
}

void dl__bucket_index_free(struct bucket_index *bi)
{
	uint32_t b;

	for (b = 0; b < DL_STORE_BUCKETS; b++)
		free(bi->b[b].v);
	memset(bi, 0, sizeof(*bi));
}
