/* SPDX-License-Identifier: MIT */
/*
 * users.c -- the users file, grants and secrets (see users.h).
 *
 * A parse makes one table: the users sorted by name (looked up by binary
 * search at each AUTH), the prefixes of every grant in one array, and the
 * file's text, which the prefixes point into. Errors name the file and
 * line and never quote a word of the line: a word that is not understood
 * may be a secret pasted where its hash should be.
 */
#include "server/users.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* Largest quota a line may give (locks=, waits=, conns=, watches=). */
#define QUOTA_MAX 1000000000ULL

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int str_eq(struct dl_str s, const char *lit)
{
	return s.len == strlen(lit) && memcmp(s.p, lit, s.len) == 0;
}

static int has_prefix(struct dl_str s, const char *lit, struct dl_str *rest)
{
	size_t n = strlen(lit);

	if (s.len < n || memcmp(s.p, lit, n) != 0)
		return 0;
	*rest = (struct dl_str){s.p + n, s.len - n};
	return 1;
}

/* ---- parsing ------------------------------------------------------------ */

struct parse {
	struct dl_users *u;
	size_t cap, pcap; /* room in u->v and u->prefixes */
	const char *file;
	int line;
	char *err;
	size_t errlen;
};

static int bad(struct parse *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int bad(struct parse *p, const char *fmt, ...)
{
	char what[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	seterr(p->err, p->errlen, "%s:%d: %s", p->file, p->line, what);
	return DL_EBADARG;
}

static int add_prefix(struct parse *p, struct dl_str s)
{
	struct dl_str *v;
	size_t cap;

	if (p->u->nprefixes == p->pcap) {
		cap = p->pcap ? p->pcap * 2 : 64;
		v = realloc(p->u->prefixes, cap * sizeof(*v));
		if (!v)
			return DL_ENOMEM;
		p->u->prefixes = v;
		p->pcap = cap;
	}
	p->u->prefixes[p->u->nprefixes++] = s;
	return 0;
}

/* "<prefix>,<prefix>..." or "*" into g. */
static int parse_grant(struct parse *p, const char *right, struct dl_str v,
		       struct dl_grant *g)
{
	const char *s = v.p, *end = v.p + v.len, *comma;
	struct dl_str w;
	int r;

	g->first = (uint32_t)p->u->nprefixes;
	while (s <= end) {
		comma = memchr(s, ',', (size_t)(end - s));
		w = (struct dl_str){s, (size_t)((comma ? comma : end) - s)};
		if (str_eq(w, "*")) {
			g->all = 1;
		} else if (w.len == 0 || dl_check_name(w.p, w.len) ||
			   memchr(w.p, '*', w.len)) {
			return bad(p,
				   "%s: a prefix is 1 to %d bytes of printable "
				   "ASCII without space, '=' or '*' ('*' alone "
				   "is every name), prefixes separated by ','",
				   right, DL_NAME_MAX);
		} else if (g->n == DL_GRANT_PREFIX_MAX) {
			return bad(p, "%s: more than %d prefixes", right,
				   DL_GRANT_PREFIX_MAX);
		} else {
			if ((r = add_prefix(p, w)) != 0)
				return r;
			g->n++;
		}
		if (!comma)
			break;
		s = comma + 1;
	}
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int parse_hash(struct parse *p, struct dl_str v, struct dl_user *u)
{
	size_t i;
	int hi, lo;

	if (v.len != 2 * DL_SECRET_HASH_LEN)
		return bad(p, "sha256: expected %d hex digits",
			   2 * DL_SECRET_HASH_LEN);
	for (i = 0; i < DL_SECRET_HASH_LEN; i++) {
		hi = hexval(v.p[2 * i]);
		lo = hexval(v.p[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return bad(p, "sha256: expected %d hex digits",
				   2 * DL_SECRET_HASH_LEN);
		u->hash[i] = (unsigned char)(hi << 4 | lo);
	}
	u->has_secret = 1;
	return 0;
}

static int parse_uid(struct parse *p, struct dl_str v, struct dl_user *u)
{
	char login[256], buf[4096];
	struct passwd pw, *res = NULL;
	uint64_t n;

	if (dl_parse_u64(v.p, v.len, &n) == 0) {
		if (n >= UINT32_MAX)
			return bad(p, "uid=: out of range");
		u->uid = (uint32_t)n;
	} else {
		if (v.len == 0 || v.len >= sizeof(login))
			return bad(p, "uid=: a number or a login name");
		memcpy(login, v.p, v.len);
		login[v.len] = '\0';
		if (getpwnam_r(login, &pw, buf, sizeof(buf), &res) != 0 || !res)
			return bad(p, "uid=%s: no such login", login);
		u->uid = (uint32_t)res->pw_uid;
	}
	u->has_uid = 1;
	return 0;
}

static int parse_quota(struct parse *p, const char *key, struct dl_str v,
		       uint64_t *q)
{
	if (dl_parse_u64(v.p, v.len, q) != 0 || *q == 0 || *q > QUOTA_MAX)
		return bad(p, "%s: a number from 1 to %llu", key,
			   (unsigned long long)QUOTA_MAX);
	return 0;
}

/* One word after the user's name; `seen` catches a key given twice. */
static int parse_word(struct parse *p, struct dl_str w, int i,
		      struct dl_user *u, unsigned *seen)
{
	static const char *const rights[] = {"lock=", "read=", "break="};
	static const char *const quotas[] = {
		"locks=", "waits=", "conns=", "watches="};
	struct dl_str v;
	unsigned bit;
	int k;

	for (k = 0; k < DL_RIGHT_ADMIN; k++) {
		if (!has_prefix(w, rights[k], &v))
			continue;
		bit = 1u << k;
		if (*seen & bit)
			return bad(p, "%s given twice", rights[k]);
		*seen |= bit;
		return parse_grant(p, rights[k], v, &u->grant[k]);
	}
	for (k = 0; k < DL_QUOTA_COUNT_; k++) {
		if (!has_prefix(w, quotas[k], &v))
			continue;
		bit = 1u << (8 + k);
		if (*seen & bit)
			return bad(p, "%s given twice", quotas[k]);
		*seen |= bit;
		return parse_quota(p, quotas[k], v, &u->quota[k]);
	}
	if (str_eq(w, "admin")) {
		if (u->admin)
			return bad(p, "admin given twice");
		u->admin = 1;
		return 0;
	}
	if (has_prefix(w, "sha256:", &v)) {
		if (u->has_secret)
			return bad(p, "sha256: given twice");
		return parse_hash(p, v, u);
	}
	if (has_prefix(w, "uid=", &v)) {
		if (u->has_uid)
			return bad(p, "uid= given twice");
		return parse_uid(p, v, u);
	}
	/* never quoted: it may be a secret written where its hash goes */
	return bad(p,
		   "word %d not understood (expected sha256:<hex>, uid=, "
		   "lock=, read=, break=, admin, locks=, waits=, conns=, "
		   "watches=)",
		   i + 1);
}

/* Split s[0..len) into words on blanks (at most max). */
static int split(const char *s, size_t len, struct dl_str *w, int max)
{
	size_t i = 0, j;
	int n = 0;

	while (i < len) {
		while (i < len && (s[i] == ' ' || s[i] == '\t'))
			i++;
		if (i == len)
			break;
		j = i;
		while (j < len && s[j] != ' ' && s[j] != '\t')
			j++;
		if (n == max)
			return -1;
		w[n++] = (struct dl_str){s + i, j - i};
		i = j;
	}
	return n;
}

/* Words a line may have: the name and one of each key. */
#define LINE_WORDS 12

static int parse_line(struct parse *p, const char *s, size_t len)
{
	struct dl_str w[LINE_WORDS];
	struct dl_user *u;
	unsigned seen = 0;
	int n, i, r;
	size_t cap;

	while (len && (*s == ' ' || *s == '\t')) {
		s++;
		len--;
	}
	if (len == 0 || *s == '#')
		return 0; /* blank, or a comment */
	n = split(s, len, w, LINE_WORDS);
	if (n < 0)
		return bad(p, "more than %d words", LINE_WORDS);
	if (dl_check_user(w[0].p, w[0].len))
		return bad(p,
			   "a line starts with the user's name: 1 to %d "
			   "letters, digits and . _ -",
			   DL_USER_MAX);
	if (str_eq(w[0], DL_USER_RESERVED) || str_eq(w[0], DL_USER_DEFAULT) ||
	    str_eq(w[0], DL_USER_RECLAIMED))
		return bad(p, "the user name '%.*s' is reserved", (int)w[0].len,
			   w[0].p);
	if (p->u->n == p->cap) {
		cap = p->cap ? p->cap * 2 : 16;
		u = realloc(p->u->v, cap * sizeof(*u));
		if (!u)
			return DL_ENOMEM;
		p->u->v = u;
		p->cap = cap;
	}
	u = &p->u->v[p->u->n];
	memset(u, 0, sizeof(*u));
	memcpy(u->name, w[0].p, w[0].len);
	u->line = p->line;
	for (i = 1; i < n; i++)
		if ((r = parse_word(p, w[i], i, u, &seen)) != 0)
			return r;
	if (!u->has_secret && !u->has_uid)
		return bad(p,
			   "user '%s' has neither sha256:<hex> nor uid=: "
			   "it could never log in",
			   u->name);
	p->u->n++;
	return 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct dl_user *)a)->name,
		      ((const struct dl_user *)b)->name);
}

/* Duplicate names (the table is sorted) and duplicate uids. */
static int check_unique(struct parse *p)
{
	struct dl_users *u = p->u;
	size_t i, j;

	for (i = 1; i < u->n; i++)
		if (strcmp(u->v[i - 1].name, u->v[i].name) == 0) {
			p->line = u->v[i].line > u->v[i - 1].line
					  ? u->v[i].line
					  : u->v[i - 1].line;
			return bad(p, "user '%s' given twice", u->v[i].name);
		}
	for (i = 0; i < u->n; i++)
		for (j = i + 1; u->v[i].has_uid && j < u->n; j++)
			if (u->v[j].has_uid && u->v[j].uid == u->v[i].uid) {
				p->line = u->v[j].line > u->v[i].line
						  ? u->v[j].line
						  : u->v[i].line;
				return bad(p, "uid %u given to two users",
					   (unsigned)u->v[i].uid);
			}
	return 0;
}

int dl_users_parse(const char *text, size_t len, const char *file,
		   struct dl_users **out, char *err, size_t errlen)
{
	struct parse p = {.file = file, .err = err, .errlen = errlen};
	const char *s, *end, *eol;
	size_t n;
	int r = 0;

	*out = NULL;
	if (!(p.u = calloc(1, sizeof(*p.u))) ||
	    !(p.u->text = malloc(len + 1))) {
		free(p.u);
		return DL_ENOMEM;
	}
	memcpy(p.u->text, text, len);
	p.u->text[len] = '\0';
	s = p.u->text;
	end = s + len;
	if (memchr(s, '\0', len)) {
		p.line = 1;
		r = bad(&p, "NUL byte in the file");
	}
	while (r == 0 && s < end) {
		p.line++;
		eol = memchr(s, '\n', (size_t)(end - s));
		n = (size_t)((eol ? eol : end) - s);
		if (n && s[n - 1] == '\r')
			n--;
		r = parse_line(&p, s, n);
		s = eol ? eol + 1 : end;
	}
	if (r == 0) {
		qsort(p.u->v, p.u->n, sizeof(*p.u->v), by_name);
		r = check_unique(&p);
	}
	if (r != 0) {
		if (r == DL_ENOMEM)
			seterr(err, errlen, "%s: out of memory", file);
		dl_users_free(p.u);
		return r;
	}
	*out = p.u;
	return 0;
}

int dl_users_load(const char *path, struct dl_users **out, char *err,
		  size_t errlen)
{
	FILE *f = fopen(path, "r");
	char *buf;
	size_t n;
	int r;

	*out = NULL;
	if (!f) {
		seterr(err, errlen, "%s: cannot open: %s", path,
		       strerror(errno));
		return DL_EBADARG;
	}
	if (!(buf = malloc(DL_USERS_FILE_MAX + 1))) {
		fclose(f);
		return DL_ENOMEM;
	}
	n = fread(buf, 1, DL_USERS_FILE_MAX + 1, f);
	r = ferror(f);
	fclose(f);
	if (r || n > DL_USERS_FILE_MAX) {
		seterr(err, errlen, "%s: %s", path,
		       r ? "read error" : "larger than 4 MiB");
		free(buf);
		return DL_EBADARG;
	}
	r = dl_users_parse(buf, n, path, out, err, errlen);
	free(buf);
	return r;
}

void dl_users_free(struct dl_users *u)
{
	if (!u)
		return;
	/* the hashes are not secrets, but there is no need to leave them */
	if (u->v)
		OPENSSL_cleanse(u->v, u->n * sizeof(*u->v));
	free(u->v);
	free(u->prefixes);
	free(u->text);
	free(u);
}

/* ---- lookups and rights ------------------------------------------------- */

struct dl_user *dl_users_find(const struct dl_users *u, struct dl_str name)
{
	char key[DL_USER_MAX + 1];
	size_t lo = 0, hi, mid;
	int c;

	if (!u || name.len == 0 || name.len > DL_USER_MAX)
		return NULL;
	memcpy(key, name.p, name.len);
	key[name.len] = '\0';
	hi = u->n;
	while (lo < hi) {
		mid = lo + (hi - lo) / 2;
		c = strcmp(key, u->v[mid].name);
		if (c == 0)
			return &u->v[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

struct dl_user *dl_users_by_uid(const struct dl_users *u, uint32_t uid)
{
	size_t i;

	for (i = 0; u && i < u->n; i++)
		if (u->v[i].has_uid && u->v[i].uid == uid)
			return &u->v[i];
	return NULL;
}

int dl_users_check(const struct dl_users *u, struct dl_str name,
		   struct dl_str secret, struct dl_user **out)
{
	static const unsigned char none[DL_SECRET_HASH_LEN];
	unsigned char h[DL_SECRET_HASH_LEN];
	struct dl_user *user = dl_users_find(u, name);
	int same;

	*out = NULL;
	if (dl_secret_hash(secret, h) != 0)
		return DL_EDENIED;
	same = CRYPTO_memcmp(h, user && user->has_secret ? user->hash : none,
			     sizeof(h)) == 0;
	OPENSSL_cleanse(h, sizeof(h));
	if (!user || !user->has_secret || !same)
		return DL_EDENIED;
	*out = user;
	return 0;
}

static int prefix_of(struct dl_str p, struct dl_str s)
{
	/* an empty string may have no bytes at all (p NULL): memcmp must
	 * not see it */
	return s.len >= p.len && (p.len == 0 || memcmp(s.p, p.p, p.len) == 0);
}

/* A granted prefix of user's right r is a prefix of `name` -- or, with
 * `under`, `name` is a prefix of it (a name under `name` is granted). */
static int granted(const struct dl_users *u, const struct dl_user *user,
		   enum dl_right r, struct dl_str name, int under)
{
	const struct dl_grant *g;
	struct dl_str p;
	uint32_t i;

	if (r == DL_RIGHT_ADMIN)
		return user->admin;
	g = &user->grant[r];
	if (g->all)
		return 1;
	for (i = 0; i < g->n; i++) {
		p = u->prefixes[g->first + i];
		if (prefix_of(p, name) || (under && prefix_of(name, p)))
			return 1;
	}
	return 0;
}

int dl_user_may(const struct dl_users *u, const struct dl_user *user,
		enum dl_right r, struct dl_str name)
{
	return granted(u, user, r, name, 0);
}

int dl_user_may_all(const struct dl_users *u, const struct dl_user *user,
		    enum dl_right r, struct dl_str prefix)
{
	/* every name with `prefix` has a granted prefix of its own when one
	 * granted prefix is a prefix of `prefix` */
	return dl_user_may(u, user, r, prefix);
}

size_t dl_user_prefixes(const struct dl_users *u, const struct dl_user *user,
			enum dl_right r, const struct dl_str **out)
{
	const struct dl_grant *g = &user->grant[r];

	*out = NULL;
	if (g->all || g->n == 0)
		return 0;
	*out = u->prefixes + g->first;
	return g->n;
}

int dl_user_may_some(const struct dl_users *u, const struct dl_user *user,
		     enum dl_right r, struct dl_str prefix)
{
	return granted(u, user, r, prefix, 1);
}

int dl_user_covers(const struct dl_users *nu, const struct dl_user *now,
		   const struct dl_users *bu, const struct dl_user *before)
{
	const struct dl_grant *g;
	uint32_t i;
	int r;

	if (before->admin && !now->admin)
		return 0;
	for (r = 0; r < DL_RIGHT_ADMIN; r++) {
		g = &before->grant[r];
		if (g->all && !now->grant[r].all)
			return 0;
		for (i = 0; !g->all && i < g->n; i++)
			if (!dl_user_may_all(nu, now, (enum dl_right)r,
					     bu->prefixes[g->first + i]))
				return 0;
	}
	return 1;
}

int dl_user_same_secret(const struct dl_user *a, const struct dl_user *b)
{
	if (a->has_secret != b->has_secret)
		return 0;
	return !a->has_secret ||
	       CRYPTO_memcmp(a->hash, b->hash, sizeof(a->hash)) == 0;
}

void dl_user_default(struct dl_user *u)
{
	int r;

	memset(u, 0, sizeof(*u));
	for (r = 0; r < DL_RIGHT_ADMIN; r++)
		u->grant[r].all = 1;
	u->admin = 1;
}

const char *dl_user_name(const struct dl_user *u)
{
	return u->name[0] ? u->name : DL_USER_DEFAULT;
}

void dl_users_carry(struct dl_users *next, const struct dl_users *old)
{
	struct dl_user *o;
	size_t i;

	for (i = 0; next && i < next->n; i++) {
		o = dl_users_find(old,
				  (struct dl_str){next->v[i].name,
						  strlen(next->v[i].name)});
		if (o)
			next->v[i].rt = o->rt;
	}
}

/* ---- secrets ------------------------------------------------------------ */

int dl_secret_hash(struct dl_str s, unsigned char out[DL_SECRET_HASH_LEN])
{
	unsigned int n = 0;

	if (EVP_Digest(s.p, s.len, out, &n, EVP_sha256(), NULL) != 1 ||
	    n != DL_SECRET_HASH_LEN)
		return DL_EINTERNAL;
	return 0;
}

int dl_secret_equal(struct dl_str a, struct dl_str b)
{
	unsigned char ha[DL_SECRET_HASH_LEN], hb[DL_SECRET_HASH_LEN];
	int same;

	if (dl_secret_hash(a, ha) != 0 || dl_secret_hash(b, hb) != 0)
		return 0;
	same = CRYPTO_memcmp(ha, hb, sizeof(ha)) == 0;
	OPENSSL_cleanse(ha, sizeof(ha));
	OPENSSL_cleanse(hb, sizeof(hb));
	return same;
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = hex[b[i] >> 4];
		out[2 * i + 1] = hex[b[i] & 15];
	}
	out[2 * n] = '\0';
}

int dl_secret_hash_text(struct dl_str s, char hash[DL_SECRET_HASH_TEXT + 1])
{
	unsigned char h[DL_SECRET_HASH_LEN];

	if (dl_secret_hash(s, h) != 0)
		return DL_EINTERNAL;
	memcpy(hash, "sha256:", 7);
	to_hex(h, sizeof(h), hash + 7);
	return 0;
}

int dl_secret_new(char secret[DL_SECRET_TEXT + 1],
		  char hash[DL_SECRET_HASH_TEXT + 1])
{
	unsigned char b[DL_SECRET_BYTES];
	size_t got = 0;
	ssize_t r;

	while (got < sizeof(b)) {
		r = getrandom(b + got, sizeof(b) - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return DL_EINTERNAL;
		got += (size_t)r;
	}
	to_hex(b, sizeof(b), secret);
	OPENSSL_cleanse(b, sizeof(b));
	return dl_secret_hash_text((struct dl_str){secret, DL_SECRET_TEXT},
				   hash);
}
