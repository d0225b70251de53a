/* SPDX-License-Identifier: MIT */
/*
 * check.c -- the history checker of the fault campaign.
 *
 *   check <dir> [<forgets>]
 *                    reads every <dir>/<owner>.hist (worker.c writes them;
 *                    the file name is the owner), prints what it counted
 *                    and every violation, exits 1 if there is one.
 *                    <forgets>: one window a line, "<from> [<to>]", in
 *                    which Redis was made to forget with no daemon
 *                    holding its table (below); one time: from = to.
 *
 * From the records it builds, per lock, the holding intervals:
 *   - a grant (G) holds from the moment it was received to the earliest of
 *     its UNLOCK being sent (U), the library reporting it lost (L, which
 *     may come before its G, and names the deadline it then counted on),
 *     and its local deadline (the latest of G and its renewals R). A worker
 * killed while holding leaves an open interval: it lasts to that deadline,
 *     which is what the server promised;
 *   - a `dlock run` command (A records of one token) holds from its first
 *     record to its last: it must never run while someone else holds.
 *
 * and checks:
 *   1. mutual exclusion: no two intervals of different owners on one lock
 *      overlap (touching is fine: times are whole milliseconds) -- unless
 *      both are shared (G's mode s), or both are permits of a semaphore
 *      (mode p<n>) and no more than n overlap at any moment;
 *   2. fencing: a token belongs to one lease: granted to one owner on one
 *      lock (the same owner may get it again: a reentry of a lease the
 *      server still has, e.g. one its client gave up for want of
 *      confirmation); per lock, an interval that begins after another
 *      ended has the larger token, where one of the two is exclusive
 *      (two readers or two permits granted in one order may be received
 *      in the other); empty intervals, a grant that arrived after its
 *      deadline, are left out;
 *   3. durability: the server never drops a lease early. A loss reported
 *      by the server -- `* EXPIRED` (reason 1) or NOT_HOLDER to a refresh
 *      (reason 2) -- before the local deadline means it forgot or cut a
 *      lease its holder could still believe in (the server's deadline is
 *      never before the client's, which is counted from the request's
 *      send time). A loss for want of confirmation (3) is legitimate, and
 *      so is one across a moment in <forgets>: Redis lost the lease and
 *      no daemon had it (the server then grants nothing until the lease
 *      horizon -- every lease told may have ended -- so 1. and 2. still
 *      hold; a holder that reclaims it keeps it).
 *   4. elections (locks E0.., PROTOCOL.md's LOCK value=): a term is a
 *      lease of an exclusive lock, so 1. and 2. judge terms as any
 *      grants (a G each); and a follower is never told a value its
 *      leader did not say for that term. Each observation `O lock token
 *      value` (a watch event, a STATUS read) must match a value some
 *      worker said (V) for that lock, no later than it was observed;
 *      where someone was granted that token on that lock (G), the value
 *      must be one that owner said for that token -- with its proclaim
 *      (V lock token value), or with the LOCK that brought the G (V
 *      lock 0 value, bound to the next G of the lock in its file) or
 *      that never told it its token (an E after it, or the worker died:
 *      such a value may show with any token but another owner's). A
 *      reentry's value (V lock token value r) must never show for the
 *      lease it re-entered (a reentry leaves the value as it is), only
 *      as one never learnt (the reentry made a new lease). A token
 *      granted to nobody that shows a value (a grant whose reply was
 *      lost, a lease reclaimed under a new token) may show any value
 *      said for that lock. An election lease always has a value, so a
 *      grant, value or STATUS with none ("-") is one no leader said;
 *   5. news of waiters: `W lock token n` goes only to the owner granted
 *      that token on that lock (its G, before or after: the library's
 *      thread writes W, the worker's G), with n >= 1. A W whose G was
 *      never written is the worker's death between the two only if the
 *      worker wrote nothing after it; where another owner has the G it
 *      is always a violation.
 *   6. multi-locks (LOCK a b ...): their leases are G records like any,
 *      judged by 1. and 2. against every other holder; a block the
 *      worker did not receive whole (B: fewer lines than its header
 *      said, or a line that is not a grant) is a violation -- a client
 *      must get all of its locks or none.
 *
 * Nothing here knows the server: it judges what clients saw.
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_ 64

struct span {
	char lock[NAME_MAX_];
	char owner[NAME_MAX_];
	uint64_t token;
	int64_t start, end; /* ms; end <= start: empty */
	int run;	    /* a dlock run command's A records */
	int shared;	    /* G mode s */
	int limit;	    /* G mode p<n>: n; else 1 */
	int open;	    /* no U or L: the worker died holding it */
};

struct hist {
	struct span *v;
	size_t n, cap;
	size_t records, grants, lost_by_server, lost_unconfirmed, failed, alive,
		violations, lost_forgotten;
	size_t told_by[4];	/* O records: g, v, e, s */
	size_t news_unrecorded; /* W of a grant its worker died before
				   writing */
	size_t multis;		/* M records: multi-lock blocks */
};

/* ---- elections and news of waiters (4. and 5.) ------------------------ */

#define VALUE_MAX_ 160

/* A value a worker said for an election's lease (V). */
struct said {
	char lock[NAME_MAX_], owner[NAME_MAX_], value[VALUE_MAX_];
	uint64_t token; /* 0: the term it was said for was never learnt */
	int64_t t;
	int pending; /* token 0, its LOCK not yet answered (G or E) */
	int reentry; /* V ... r: a reentry of lease `token` said it, which
			must leave that lease's value as it is */
};
/* What an observer was told (O). */
struct told {
	char lock[NAME_MAX_], value[VALUE_MAX_], holder[NAME_MAX_],
		observer[NAME_MAX_];
	uint64_t token;
	int64_t t;
	char how;
};
/* News of waiters (W). */
struct news {
	char lock[NAME_MAX_], owner[NAME_MAX_];
	uint64_t token;
	int64_t n, t;
	size_t seq;  /* records of its file before it */
	int went_on; /* its worker's thread wrote after it (G R U E V) */
};

static struct said *said;
static struct told *told;
static struct news *news;
static size_t nsaid, ntold, nnews, capsaid, captold, capnews;
/* the current file: its records so far, the last one its worker's thread
 * wrote, where its V and W begin */
static size_t file_seq, worker_seq, said_from, news_from;

static void *grow(void *v, size_t *cap, size_t n, size_t size)
{
	if (n < *cap)
		return v;
	*cap = *cap ? *cap * 2 : 256;
	if (!(v = realloc(v, *cap * size))) {
		perror("realloc");
		exit(2);
	}
	return v;
}

static struct span *span_new(struct hist *h)
{
	struct span *v;

	if (h->n == h->cap) {
		h->cap = h->cap ? h->cap * 2 : 1024;
		v = realloc(h->v, h->cap * sizeof(*v));
		if (!v) {
			perror("realloc");
			exit(2);
		}
		h->v = v;
	}
	memset(&h->v[h->n], 0, sizeof(h->v[0]));
	h->v[h->n].limit = 1;
	return &h->v[h->n++];
}

static void violation(struct hist *h, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void violation(struct hist *h, const char *fmt, ...)
{
	va_list ap;

	h->violations++;
	printf("VIOLATION: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* The open grant of (owner, lock, token), or NULL. */
static struct span *find(struct hist *h, size_t from, const char *lock,
			 uint64_t token, int run)
{
	size_t i = h->n;

	while (i-- > from)
		if (h->v[i].token == token && h->v[i].run == run &&
		    strcmp(h->v[i].lock, lock) == 0)
			return &h->v[i];
	return NULL;
}

/* Moments Redis was made to forget while no daemon held its table (the
 * campaign's forget_while_down, ...): a lease granted before one and
 * ended by the server after it was lost with Redis's memory, a known cost
 * (the server cannot vouch for it, and grants nothing meanwhile), not a
 * broken promise. Mutual exclusion and fencing still hold everywhere. */
/* A forget is a window, not a moment: the campaign notes the time before
 * it sends FLUSHALL and after the reply, and a grant received in between
 * may have been written just before the flush (found in a Sentinel run:
 * a grant received 12 ms after the noted moment, while redis-cli was still
 * asking Sentinel for the primary, was flushed). */
struct forget {
	int64_t from, to;
};
static struct forget *forgets;
static size_t nforgets;

static int forgotten(int64_t granted, int64_t lost)
{
	size_t i;

	for (i = 0; i < nforgets; i++)
		if (granted <= forgets[i].to && forgets[i].from <= lost)
			return 1;
	return 0;
}

static void read_forgets(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[128];
	struct forget w;

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		struct forget *v;
		int n = sscanf(line, "%" SCNd64 " %" SCNd64, &w.from, &w.to);

		if (n < 1)
			continue;
		if (n == 1 || w.to < w.from)
			w.to = w.from;
		v = realloc(forgets, (nforgets + 1) * sizeof(*v));
		if (!v)
			exit(2);
		forgets = v;
		forgets[nforgets++] = w;
	}
	fclose(f);
}

/* A loss (L) recorded before its grant (G): the library's thread writes
 * L the moment it gives a lease up, the worker's thread writes G when
 * dlock_acquire() returns, so the two may come in either order. Kept
 * until the G of the same lock and token in the same file. */
#define EARLY_MAX 16
static struct early {
	char lock[NAME_MAX_];
	uint64_t token;
	int64_t end; /* the earliest of the loss and the deadline it names */
} early[EARLY_MAX];
static size_t nearly;

/* One record of owner's file; `from` is the first span of this file. */
static void record(struct hist *h, size_t from, const char *owner,
		   const char *line)
{
	char kind, lock[NAME_MAX_], mode[16] = "x";
	int64_t t, d = 0;
	uint64_t token = 0;
	int reason = 0, n;
	struct span *s;

	n = sscanf(line, "%" SCNd64 " %c %63s %" SCNu64 " %" SCNd64 " %15s", &t,
		   &kind, lock, &token, &d, mode);
	if (n < 3)
		return;
	h->records++;
	file_seq++;
	if (strchr("GRUEV", kind))
		worker_seq = file_seq;
	switch (kind) {
	case 'V': {
		struct said *v;

		said = grow(said, &capsaid, nsaid, sizeof(*said));
		v = memset(&said[nsaid++], 0, sizeof(*v));
		snprintf(v->lock, sizeof(v->lock), "%s", lock);
		snprintf(v->owner, sizeof(v->owner), "%s", owner);
		if (sscanf(line, "%*d %*c %*s %*u %159s %15s", v->value,
			   mode) == 2 &&
		    mode[0] == 'r')
			v->reentry = 1;
		v->token = token;
		v->t = t;
		v->pending = token == 0;
		break;
	}
	case 'O': {
		struct told *o;

		told = grow(told, &captold, ntold, sizeof(*told));
		o = memset(&told[ntold++], 0, sizeof(*o));
		snprintf(o->lock, sizeof(o->lock), "%s", lock);
		snprintf(o->observer, sizeof(o->observer), "%s", owner);
		sscanf(line, "%*d %*c %*s %*u %159s %c %63s", o->value, &o->how,
		       o->holder);
		o->token = token;
		o->t = t;
		h->told_by[o->how == 'g'   ? 0
			   : o->how == 'v' ? 1
			   : o->how == 'e' ? 2
					   : 3]++;
		break;
	}
	case 'W': {
		struct news *w;

		news = grow(news, &capnews, nnews, sizeof(*news));
		w = memset(&news[nnews++], 0, sizeof(*w));
		snprintf(w->lock, sizeof(w->lock), "%s", lock);
		snprintf(w->owner, sizeof(w->owner), "%s", owner);
		w->token = token;
		w->n = n >= 5 ? d : 0;
		w->t = t;
		w->seq = file_seq;
		break;
	}
	case 'G':
		/* the term of the values its LOCK said (V lock 0) */
		for (size_t i = said_from; i < nsaid; i++)
			if (said[i].pending &&
			    strcmp(said[i].lock, lock) == 0) {
				said[i].token = token;
				said[i].pending = 0;
			}
		s = span_new(h);
		snprintf(s->lock, sizeof(s->lock), "%s", lock);
		snprintf(s->owner, sizeof(s->owner), "%s", owner);
		s->token = token;
		s->start = t;
		s->end = d;
		s->open = 1;
		s->shared = mode[0] == 's';
		s->limit = mode[0] == 'p' ? atoi(mode + 1) : 1;
		if (s->limit < 1)
			s->limit = 1;
		h->grants++;
		for (size_t i = 0; i < nearly; i++) {
			if (early[i].token != token ||
			    strcmp(early[i].lock, lock) != 0)
				continue;
			s->end = early[i].end < s->end ? early[i].end : s->end;
			s->open = 0;
			early[i] = early[--nearly];
			break;
		}
		break;
	case 'R':
		/* the deadline the library counts on now: a REFRESH with a
		 * shorter TTL moves it earlier (worker.c, change_ttl) */
		if ((s = find(h, from, lock, token, 0)) && s->open)
			s->end = d;
		break;
	case 'U':
		if ((s = find(h, from, lock, token, 0)) && s->open) {
			s->end = t < s->end ? t : s->end;
			s->open = 0;
		}
		break;
	case 'L':
		sscanf(line, "%*d %*c %*s %*u %d %" SCNd64, &reason, &d);
		if (reason == 3)
			h->lost_unconfirmed++;
		else
			h->lost_by_server++;
		s = find(h, from, lock, token, 0);
		if (reason != 3 && t < d && s && forgotten(s->start, t))
			h->lost_forgotten++;
		else if (reason != 3 && t < d)
			violation(h,
				  "%s lost %s token %" PRIu64 " by the "
				  "server's word (reason %d) at %" PRId64
				  ", %" PRId64 " ms before its deadline",
				  owner, lock, token, reason, t, d - t);
		/* held until the loss, or the deadline the library counted
		 * on then if earlier: a shortening REFRESH moves it, and its
		 * R record is not written when the lease is lost first */
		if (d > 0 && d < t)
			t = d;
		if (s && s->open) {
			s->end = t < s->end ? t : s->end;
			s->open = 0;
		} else if (!s && nearly < EARLY_MAX) {
			snprintf(early[nearly].lock, sizeof(early[0].lock),
				 "%s", lock);
			early[nearly].token = token;
			early[nearly++].end = t;
		}
		break;
	case 'A':
		h->alive++;
		if ((s = find(h, from, lock, token, 1)) != NULL) {
			s->end = t;
			break;
		}
		s = span_new(h);
		snprintf(s->lock, sizeof(s->lock), "%s", lock);
		snprintf(s->owner, sizeof(s->owner), "%s", owner);
		s->token = token;
		s->start = s->end = t;
		s->run = 1;
		break;
	case 'M':
		h->multis++;
		break;
	case 'B':
		violation(
			h,
			"%s: a multi-lock block of %s not whole (line %" PRIu64
			")",
			owner, lock, token);
		break;
	case 'E':
		h->failed++;
		/* its LOCK did not grant: the term it said its value for,
		 * if the server granted one, was never learnt */
		for (size_t i = said_from; i < nsaid; i++)
			if (said[i].pending && strcmp(said[i].lock, lock) == 0)
				said[i].pending = 0;
		break;
	}
}

static void read_file(struct hist *h, const char *dir, const char *file)
{
	char path[4096], owner[NAME_MAX_], line[512];
	size_t from = h->n, len = strlen(file) - 5;
	FILE *f;

	nearly = 0;
	file_seq = worker_seq = 0;
	said_from = nsaid;
	news_from = nnews;
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	snprintf(owner, sizeof(owner), "%.*s", (int)len, file);
	if (!(f = fopen(path, "r"))) {
		perror(path);
		exit(2);
	}
	while (fgets(line, sizeof(line), f))
		record(h, from, owner, line);
	fclose(f);
	for (size_t i = news_from; i < nnews; i++)
		news[i].went_on = worker_seq > news[i].seq;
	for (size_t i = said_from; i < nsaid; i++)
		said[i].pending = 0; /* the worker died in its LOCK */
}

static int by_lock_then_start(const void *a, const void *b)
{
	const struct span *x = a, *y = b;
	int c = strcmp(x->lock, y->lock);

	if (c)
		return c;
	return x->start < y->start ? -1 : x->start > y->start;
}

static int by_token(const void *a, const void *b)
{
	uint64_t x = (*(const struct span *const *)a)->token;
	uint64_t y = (*(const struct span *const *)b)->token;

	return x < y ? -1 : x > y;
}

static void print_span(const char *what, const struct span *s)
{
	printf("  %s: %s token %" PRIu64 " %s [%" PRId64 ", %" PRId64 "]%s\n",
	       what, s->owner, s->token,
	       s->run	      ? "(dlock run)"
	       : s->shared    ? "(shared grant)"
	       : s->limit > 1 ? "(permit)"
			      : "(grant)",
	       s->start, s->end, s->open ? " (holder died)" : "");
}

/* May a and b (different owners) hold the lock at once? Two readers; two
 * permits (the count is checked apart). A `dlock run` is exclusive. */
static int may_overlap(const struct span *a, const struct span *b)
{
	if (a->run || b->run)
		return 0;
	return (a->shared && b->shared) ||
	       (a->limit > 1 && b->limit > 1 && !a->shared && !b->shared);
}

/* Is s after p in token order (or the same lease again)? */
static int token_after(const struct span *p, const struct span *s)
{
	return s->token > p->token ||
	       (s->token == p->token && strcmp(s->owner, p->owner) == 0);
}

/* 1. and 2. (order) per lock: a sweep over its intervals by start,
 * keeping those still running (`act`: ends after the current start) and
 * the last to have ended of those over (`done`: of any mode; `done_x`:
 * exclusive only), whose tokens a new interval must exceed. */
static void check_lock(struct hist *h, size_t from, size_t to)
{
	const struct span **act = malloc((to - from) * sizeof(*act) + 1);
	const struct span *s, *done = NULL, *done_x = NULL, *p;
	size_t i, j, k, nact = 0, permits;

	for (i = from; i < to; i++) {
		s = &h->v[i];
		if (s->end <= s->start && !s->run)
			continue; /* never held: arrived after its deadline */
		permits = 1;
		for (j = k = 0; j < nact; j++) {
			if (act[j]->end <= s->start) { /* over before s began */
				p = act[j];
				if (!done || p->token > done->token)
					done = p;
				if (!p->shared && p->limit == 1 &&
				    (!done_x || p->token > done_x->token))
					done_x = p;
				continue;
			}
			act[k++] = act[j];
			if (strcmp(act[j]->owner, s->owner) == 0)
				continue;
			if (!may_overlap(act[j], s)) {
				violation(h, "two holders of %s at once",
					  s->lock);
				print_span("first ", act[j]);
				print_span("second", s);
			} else if (s->limit > 1 && act[j]->token != s->token) {
				permits++;
			}
		}
		if (permits > (size_t)s->limit) {
			violation(h, "%zu holders of %s at once, limit %d",
				  permits, s->lock, s->limit);
			for (j = 0; j < k; j++)
				print_span("holder", act[j]);
			print_span("new   ", s);
		}
		nact = k;
		act[nact++] = s;
		/* an exclusive grant follows everything over; a reader or a
		 * permit follows the writers over */
		p = !s->shared && s->limit == 1 ? done : done_x;
		if (p && !token_after(p, s)) {
			violation(h, "tokens of %s go backwards", s->lock);
			print_span("earlier", p);
			print_span("later  ", s);
		}
	}
	free(act);
}

/* 2. every grant's token is its own. */
static void check_tokens(struct hist *h)
{
	struct span **p = malloc(h->n * sizeof(*p) + 1);
	size_t i, k = 0;

	for (i = 0; i < h->n; i++)
		if (!h->v[i].run)
			p[k++] = &h->v[i];
	qsort(p, k, sizeof(*p), by_token);
	for (i = 1; i < k; i++)
		if (p[i]->token == p[i - 1]->token &&
		    (strcmp(p[i]->owner, p[i - 1]->owner) != 0 ||
		     strcmp(p[i]->lock, p[i - 1]->lock) != 0)) {
			violation(h, "token %" PRIu64 " granted twice",
				  p[i]->token);
			print_span("one  ", p[i - 1]);
			print_span("other", p[i]);
		}
	free(p);
}

/* ---- 4. and 5. ------------------------------------------------------------
 */

static int by_lock_then_token(const void *a, const void *b)
{
	const struct span *x = *(const struct span *const *)a;
	const struct span *y = *(const struct span *const *)b;
	int c = strcmp(x->lock, y->lock);

	if (c)
		return c;
	return x->token < y->token ? -1 : x->token > y->token;
}

static int by_lock_then_value(const void *a, const void *b)
{
	const struct said *x = *(const struct said *const *)a;
	const struct said *y = *(const struct said *const *)b;
	int c = strcmp(x->lock, y->lock);

	return c ? c : strcmp(x->value, y->value);
}

/* The grants (G) of token on lock: *n of them from the returned index of
 * g, which is sorted by lock then token. */
static size_t grants_of(struct span **g, size_t k, const char *lock,
			uint64_t token, size_t *n)
{
	size_t lo = 0, hi = k, i;
	int c;

	while (lo < hi) {
		i = (lo + hi) / 2;
		c = strcmp(g[i]->lock, lock);
		if (c < 0 || (c == 0 && g[i]->token < token))
			lo = i + 1;
		else
			hi = i;
	}
	for (i = lo;
	     i < k && g[i]->token == token && strcmp(g[i]->lock, lock) == 0;
	     i++)
		;
	*n = i - lo;
	return lo;
}

/* The values said (V) of lock equal to value, as grants_of. */
static size_t said_of(struct said **v, size_t k, const char *lock,
		      const char *value, size_t *n)
{
	size_t lo = 0, hi = k, i;
	int c;

	while (lo < hi) {
		i = (lo + hi) / 2;
		c = strcmp(v[i]->lock, lock);
		if (c < 0 || (c == 0 && strcmp(v[i]->value, value) < 0))
			lo = i + 1;
		else
			hi = i;
	}
	for (i = lo; i < k && strcmp(v[i]->value, value) == 0 &&
		     strcmp(v[i]->lock, lock) == 0;
	     i++)
		;
	*n = i - lo;
	return lo;
}

static void print_told(const struct told *o)
{
	printf("  told:  %s at %" PRId64 " (%s): %s token %" PRIu64
	       " of %s says %s\n",
	       o->observer, o->t,
	       o->how == 'g'   ? "granted"
	       : o->how == 'v' ? "new value"
	       : o->how == 'e' ? "its end"
			       : "status",
	       o->lock, o->token, o->holder, o->value);
}

/* 4. every value a follower was told is one the term's leader said. */
static void check_told(struct hist *h, struct span **g, size_t ng)
{
	struct said **v = malloc(nsaid * sizeof(*v) + 1);
	size_t i, j, k, a, na, b, nb;

	for (i = 0; i < nsaid; i++)
		v[i] = &said[i];
	qsort(v, nsaid, sizeof(*v), by_lock_then_value);
	for (i = 0; i < ntold; i++) {
		const struct told *o = &told[i];
		const struct said *late = NULL, *other = NULL, *kept = NULL;
		int ok = 0;

		a = grants_of(g, ng, o->lock, o->token, &na);
		if (strcmp(o->value, "-") == 0) {
			violation(h, "a lease of election %s with no value",
				  o->lock);
			print_told(o);
			continue;
		}
		b = said_of(v, nsaid, o->lock, o->value, &nb);
		for (j = b; j < b + nb && !ok; j++) {
			/* a reentry's: never its lease's; perhaps a new
			 * lease's, whose term its worker never learnt */
			uint64_t tok = v[j]->reentry ? 0 : v[j]->token;

			if (v[j]->t > o->t) {
				late = v[j];
				continue;
			}
			if (v[j]->reentry && v[j]->token == o->token) {
				kept = v[j];
				continue;
			}
			if (na == 0) { /* a term nobody learnt it had */
				ok = 1;
				break;
			}
			for (k = a; k < a + na && !ok; k++)
				ok = strcmp(g[k]->owner, v[j]->owner) == 0 &&
				     (tok == o->token || tok == 0);
			if (!ok)
				other = v[j];
		}
		if (ok)
			continue;
		if (kept)
			violation(h,
				  "a reentry changed the value of election %s "
				  "(a reentry leaves it as it is)",
				  o->lock);
		else if (other)
			violation(h,
				  "a value of election %s that its leader did "
				  "not say for the term",
				  o->lock);
		else if (late)
			violation(h,
				  "a value of election %s told before it was "
				  "said",
				  o->lock);
		else
			violation(h, "a value of election %s nobody said",
				  o->lock);
		print_told(o);
		if (na)
			print_span("term  ", g[a]);
		if (kept || other || late) {
			const struct said *w = kept    ? kept
					       : other ? other
						       : late;

			printf("  said:  %s at %" PRId64 " for ", w->owner,
			       w->t);
			if (w->reentry)
				printf("a reentry of token %" PRIu64 "\n",
				       w->token);
			else if (w->token)
				printf("token %" PRIu64 "\n", w->token);
			else
				printf("a term it never learnt\n");
		}
	}
	free(v);
}

/* 5. news of waiters goes to the lease's owner only. */
static void check_news(struct hist *h, struct span **g, size_t ng)
{
	size_t i, k, a, na;

	for (i = 0; i < nnews; i++) {
		const struct news *w = &news[i];
		const struct span *mine = NULL, *theirs = NULL;

		if (w->n < 1)
			violation(h,
				  "%s told %" PRId64 " requests wait for %s "
				  "token %" PRIu64,
				  w->owner, w->n, w->lock, w->token);
		a = grants_of(g, ng, w->lock, w->token, &na);
		for (k = a; k < a + na; k++) {
			if (strcmp(g[k]->owner, w->owner) == 0)
				mine = g[k];
			else
				theirs = g[k];
		}
		if (mine)
			continue;
		if (theirs) {
			violation(h,
				  "news of waiters for another owner's lease "
				  "of %s",
				  w->lock);
			printf("  told:  %s at %" PRId64 ": %" PRId64
			       " wait for token %" PRIu64 "\n",
			       w->owner, w->t, w->n, w->token);
			print_span("lease ", theirs);
		} else if (w->went_on) {
			violation(h,
				  "%s told of waiters for %s token %" PRIu64
				  " at %" PRId64 ", a lease it was never "
				  "granted",
				  w->owner, w->lock, w->token, w->t);
		} else {
			h->news_unrecorded++;
		}
	}
}

static void check_elections(struct hist *h)
{
	struct span **g = malloc(h->n * sizeof(*g) + 1);
	size_t i, k = 0;

	for (i = 0; i < h->n; i++)
		if (!h->v[i].run)
			g[k++] = &h->v[i];
	qsort(g, k, sizeof(*g), by_lock_then_token);
	check_told(h, g, k);
	check_news(h, g, k);
	free(g);
}

int main(int argc, char **argv)
{
	struct hist h = {0};
	struct dirent *e;
	size_t i, from;
	DIR *d;

	if (argc < 2 || argc > 3 || !(d = opendir(argv[1]))) {
		fprintf(stderr,
			"usage: check <history dir> [<forgets file>]\n");
		return 2;
	}
	if (argc == 3)
		read_forgets(argv[2]);
	while ((e = readdir(d)))
		if (strlen(e->d_name) > 5 &&
		    strcmp(e->d_name + strlen(e->d_name) - 5, ".hist") == 0)
			read_file(&h, argv[1], e->d_name);
	closedir(d);
	check_elections(&h);
	check_tokens(&h);
	qsort(h.v, h.n, sizeof(*h.v), by_lock_then_start);
	for (from = 0, i = 1; i <= h.n; i++)
		if (i == h.n || strcmp(h.v[i].lock, h.v[from].lock) != 0) {
			check_lock(&h, from, i);
			from = i;
		}
	printf("history: %zu records, %zu grants, %zu lock failures "
	       "(busy, timeout, unavailable), %zu leases lost (%zu by the "
	       "server, %zu unconfirmed), %zu dlock-run alive records\n",
	       h.records, h.grants, h.failed,
	       h.lost_by_server + h.lost_unconfirmed, h.lost_by_server,
	       h.lost_unconfirmed, h.alive);
	{
		size_t unlearnt = 0;

		for (i = 0; i < nsaid; i++)
			unlearnt += said[i].token == 0;
		printf("elections: %zu values said (V; %zu for a term never "
		       "learnt), %zu observed (O: %zu grants, %zu new values, "
		       "%zu ends, %zu status reads); news of waiters: %zu (W; "
		       "%zu of a grant its worker died before recording)\n",
		       nsaid, unlearnt, ntold, h.told_by[0], h.told_by[1],
		       h.told_by[2], h.told_by[3], nnews, h.news_unrecorded);
	}
	printf("multi-locks: %zu blocks received whole (M)\n", h.multis);
	if (nforgets)
		printf("%zu leases lost with Redis's memory (%zu times it was made to forget with no daemon holding its table)\n",
		       h.lost_forgotten, nforgets);
	printf("violations: %zu\n", h.violations);
	free(h.v);
	free(forgets);
	free(said);
	free(told);
	free(news);
	return h.violations ? 1 : 0;
}
