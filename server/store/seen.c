/* SPDX-License-Identifier: MIT */
/*
 * seen.c -- what this daemon knows of a keyspace outside Redis (seen.h).
 */
#include "server/store/seen.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "proto/proto.h"
#include "server/clock.h"
#include "server/log.h"

#define SEEN_MAGIC    "dlockd-state 2"
#define SEEN_MAGIC_V1 "dlockd-state 1"
#define SEEN_V1_FILE  "dlockd.state"
#define SEEN_MEMORY   "dlockd.memory.state"
#define SEEN_LOCK     "dlockd.lock"
/* A state file is a few hundred bytes; more is not one of ours. */
#define SEEN_TEXT_MAX 4096
#define BOOT_ID_LEN   36

/* ---- clocks ------------------------------------------------------------- */

const char *dl__seen_boot_id(void)
{
	static char id[BOOT_ID_LEN + 1];
	static int read_once;
	FILE *f;

	if (!read_once) {
		read_once = 1;
		if ((f = fopen("/proc/sys/kernel/random/boot_id", "re"))) {
			if (!fgets(id, sizeof(id), f))
				id[0] = '\0';
			id[strcspn(id, "\n")] = '\0';
			fclose(f);
		}
	}
	return id;
}

uint64_t dl__seen_boottime_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t dl__seen_remaining(uint64_t left, const char *boot, uint64_t boottime,
			    const char *now_boot_id, uint64_t now_boot)
{
	uint64_t gone;

	/* Another boot (or one unknown): the machine was down for a while
	 * nobody measured; counted as nothing, which can only close
	 * longer than needed. */
	if (!boot[0] || !now_boot_id[0] || strcmp(boot, now_boot_id) != 0 ||
	    now_boot < boottime)
		return left;
	gone = now_boot - boottime;
	return left > gone ? left - gone : 0;
}

/* A monotonic end as what remains of it now, and back. */
static uint64_t left_of(uint64_t end, uint64_t now)
{
	return end > now ? end - now : 0;
}

static uint64_t end_of(uint64_t left, uint64_t now)
{
	return left ? now + left : 0;
}

/* ---- the file's text ----------------------------------------------------- */

struct file {
	int version; /* 1 or 2 */
	char where[DL_SEEN_ID_MAX];
	char keyspace[DL_SEEN_ID_MAX];
	struct dl_seen_vals v; /* horizon and closed: monotonic ends */
	char name[256];	       /* in the directory */
};

static int valid_cluster(const char *s)
{
	return strlen(s) == DL_CLUSTER_ID_LEN &&
	       strspn(s, "0123456789abcdef") == DL_CLUSTER_ID_LEN;
}

static void raise_vals(struct dl_seen_vals *to, const struct dl_seen_vals *v)
{
	if (v->epoch > to->epoch)
		to->epoch = v->epoch;
	if (v->gen > to->gen)
		to->gen = v->gen;
	if (v->mark > to->mark)
		to->mark = v->mark;
	if (v->lead > to->lead || (v->lead == to->lead && !to->leadinst)) {
		to->lead = v->lead;
		to->leadinst = v->leadinst;
	}
	if (v->horizon > to->horizon)
		to->horizon = v->horizon;
	if (v->leading > to->leading)
		to->leading = v->leading;
	if (v->closed > to->closed) {
		to->closed = v->closed;
		memcpy(to->why, v->why, sizeof(to->why));
	}
	/* nor is a Redis process: this daemon's latest stands */
	if (!to->run)
		to->run = v->run;
	/* keys are not numbers: a file's fills what is not known */
	if (!to->proofkey[0])
		memcpy(to->proofkey, v->proofkey, sizeof(to->proofkey));
	/* ... and the one before: the file's, when it is not ours; else the
	 * one the file kept before it (found from outside: a restart dropped
	 * the key before a change, and its proofs with it) */
	if (!to->proofkey_old[0] && strcmp(v->proofkey, to->proofkey) != 0)
		memcpy(to->proofkey_old, v->proofkey, sizeof(to->proofkey_old));
	else if (!to->proofkey_old[0])
		memcpy(to->proofkey_old, v->proofkey_old,
		       sizeof(to->proofkey_old));
}

/* The text of a file (either version) into *f; 0, or -1 and why. */
static int parse(char *text, struct file *f, char *why, size_t whylen)
{
	char *line, *save = NULL, *sp, boot[BOOT_ID_LEN + 1] = "";
	uint64_t v, boottime = 0, horizon = 0, closed = 0, leading = 0, now,
		    now_boot;
	int n = 0, rc;

	memset(f, 0, sizeof(*f));
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), n++) {
		if (n == 0) {
			if (strcmp(line, SEEN_MAGIC) == 0)
				f->version = 2;
			else if (strcmp(line, SEEN_MAGIC_V1) == 0)
				f->version = 1;
			else
				break;
			continue;
		}
		if (!(sp = strchr(line, ' ')))
			continue;
		*sp++ = '\0';
		if (strcmp(line, "redis") == 0) {
			/* version 1 named the keyspace here */
			snprintf(f->version == 1 ? f->keyspace : f->where,
				 DL_SEEN_ID_MAX, "%s", sp);
		} else if (strcmp(line, "keyspace") == 0) {
			snprintf(f->keyspace, sizeof(f->keyspace), "%s", sp);
		} else if (strcmp(line, "cluster") == 0) {
			if (!valid_cluster(sp)) {
				snprintf(why, whylen, "a bad cluster id");
				return -1;
			}
			memcpy(f->v.cluster, sp, DL_CLUSTER_ID_LEN + 1);
		} else if (strcmp(line, "boot") == 0) {
			char *t = strchr(sp, ' ');

			if (!t || (size_t)(t - sp) > BOOT_ID_LEN ||
			    dl_parse_u64(t + 1, strlen(t + 1), &boottime)) {
				snprintf(why, whylen, "a bad boot line");
				return -1;
			}
			memcpy(boot, sp, (size_t)(t - sp));
			boot[t - sp] = '\0';
		} else if (strcmp(line, "proofkey") == 0) {
			char *t = strchr(sp, ' ');
			unsigned char k[DL_PROOF_KEY_LEN];

			if (t)
				*t++ = '\0';
			if (dl_proof_key_parse(sp, k) != 0 ||
			    (t && dl_proof_key_parse(t, k) != 0)) {
				snprintf(why, whylen, "a bad proofkey line");
				return -1;
			}
			snprintf(f->v.proofkey, sizeof(f->v.proofkey), "%s",
				 sp);
			snprintf(f->v.proofkey_old, sizeof(f->v.proofkey_old),
				 "%s", t ? t : "");
		} else if (strcmp(line, "closed") == 0) {
			char *t = strchr(sp, ' ');
			size_t l = t ? (size_t)(t - sp) : strlen(sp);

			if (dl_parse_u64(sp, l, &closed)) {
				snprintf(why, whylen, "a bad closed line");
				return -1;
			}
			snprintf(f->v.why, sizeof(f->v.why), "%s",
				 t ? t + 1 : "");
		} else if ((rc = dl_parse_u64(sp, strlen(sp), &v)) != 0) {
			snprintf(why, whylen, "a bad number for %.40s", line);
			return -1;
		} else if (strcmp(line, "epoch") == 0) {
			f->v.epoch = v;
		} else if (strcmp(line, "gen") == 0) {
			f->v.gen = v;
		} else if (strcmp(line, "mark") == 0) {
			f->v.mark = v;
		} else if (strcmp(line, "lead") == 0) {
			f->v.lead = v;
		} else if (strcmp(line, "leadinst") == 0) {
			f->v.leadinst = v;
		} else if (strcmp(line, "horizon") == 0) {
			horizon = v;
		} else if (strcmp(line, "leading") == 0) {
			leading = v;
		} else if (strcmp(line, "run") == 0) {
			f->v.run = v;
		}
	}
	if (!f->version) {
		snprintf(why, whylen, "not a state file");
		return -1;
	}
	if (!f->keyspace[0]) {
		snprintf(why, whylen, "it names no keyspace");
		return -1;
	}
	now = dl_mono_ms();
	now_boot = dl__seen_boottime_ms();
	f->v.horizon = end_of(dl__seen_remaining(horizon, boot, boottime,
						 dl__seen_boot_id(), now_boot),
			      now);
	f->v.closed = end_of(dl__seen_remaining(closed, boot, boottime,
						dl__seen_boot_id(), now_boot),
			     now);
	/* the other way round for a leadership: it is a proof only on the
	 * same boot, when the time since is known */
	f->v.leading =
		strcmp(boot, dl__seen_boot_id()) == 0 && boot[0]
			? end_of(dl__seen_remaining(leading, boot, boottime,
						    boot, now_boot),
				 now)
			: 0;
	return 0;
}

/* Read dir/name into *f: 0, ENOENT, or -1 and why. */
static int read_file(const char *dir, const char *name, struct file *f,
		     char *why, size_t whylen)
{
	char path[sizeof(((struct dl_seen *)0)->path)], text[SEEN_TEXT_MAX];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		if (errno == ENOENT)
			return ENOENT;
		snprintf(why, whylen, "%s", strerror(errno));
		return -1;
	}
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n < 0) {
		snprintf(why, whylen, "%s", strerror(errno));
		return -1;
	}
	text[n] = '\0';
	if (parse(text, f, why, whylen) != 0)
		return -1;
	snprintf(f->name, sizeof(f->name), "%s", name);
	return 0;
}

/* ---- where a Redis is ---------------------------------------------------- */

void dl_seen_where(char *out, size_t len, const struct dl_redis_addr *a)
{
	const char *host = a->host, *path = a->path, *master = a->master;
	int port = a->port, i;
	struct addrinfo hints, *res = NULL, *ai;
	char ip[64], *real;
	size_t n = 0;

	out[0] = '\0';
	if (a->cluster) {
		for (i = 0; i < a->nseeds && n + 80 < len; i++)
			n += (size_t)snprintf(out + n, len - n,
					      "%scluster:%s:%d", n ? "," : "",
					      a->seed_host[i], a->seed_port[i]);
		return;
	}
	if (master) {
		snprintf(out, len, "sentinel:%s", master);
		return;
	}
	if (path) {
		/* the socket's real path: a symlink or a relative name of
		 * one socket is one Redis */
		real = realpath(path, NULL);
		snprintf(out, len, "unix:%s", real ? real : path);
		free(real);
		return;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_ADDRCONFIG;
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
		snprintf(out, len, "tcp:%s:%d", host, port);
		return;
	}
	for (ai = res; ai && n + 80 < len; ai = ai->ai_next) {
		if (getnameinfo(ai->ai_addr, ai->ai_addrlen, ip, sizeof(ip),
				NULL, 0, NI_NUMERICHOST) != 0)
			continue;
		n += (size_t)snprintf(out + n, len - n,
				      ai->ai_family == AF_INET6
					      ? "%stcp:[%s]:%d"
					      : "%stcp:%s:%d",
				      n ? "," : "", ip, port);
	}
	freeaddrinfo(res);
	if (!n)
		snprintf(out, len, "tcp:%s:%d", host, port);
}

/* 1 if the two descriptions share an address. */
static int same_redis(const char *a, const char *b)
{
	char buf[DL_SEEN_ID_MAX], *tok, *save = NULL;
	size_t bl = strlen(b), tl;
	const char *p;

	snprintf(buf, sizeof(buf), "%s", a);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		tl = strlen(tok);
		for (p = b; (p = strstr(p, tok)) != NULL; p += tl)
			if ((p == b || p[-1] == ',') &&
			    (p + tl == b + bl || p[tl] == ','))
				return 1;
	}
	return 0;
}

/* ---- setting up and choosing the file ------------------------------------ */

static void set_path(struct dl_seen *s, const char *name)
{
	if ((size_t)snprintf(s->path, sizeof(s->path), "%s/%s", s->dir, name) >=
	    sizeof(s->path)) {
		dl_warn("state_dir too long: no %s kept", name);
		s->path[0] = '\0';
	}
}

static void adopt(struct dl_seen *s, const struct file *f)
{
	if (!s->v.cluster[0])
		memcpy(s->v.cluster, f->v.cluster, sizeof(s->v.cluster));
	memcpy(s->saved.cluster, f->v.cluster, sizeof(s->saved.cluster));
	memcpy(s->file.cluster, f->v.cluster, sizeof(s->file.cluster));
	raise_vals(&s->v, &f->v);
	raise_vals(&s->file, &f->v);
	raise_vals(&s->saved, &f->v);
	/* a file of the first version kept no horizon: it bounds nothing */
	s->has_file = f->version == 2;
	dl_info("%s/%s: this daemon last knew Redis at epoch %llu, generation %llu, token mark %llu, cluster %s, lead %llu; horizon %llu ms, closed %llu ms from now",
		s->dir, f->name, (unsigned long long)f->v.epoch,
		(unsigned long long)f->v.gen, (unsigned long long)f->v.mark,
		f->v.cluster[0] ? f->v.cluster : "-",
		(unsigned long long)f->v.lead,
		(unsigned long long)left_of(f->v.horizon, dl_mono_ms()),
		(unsigned long long)left_of(f->v.closed, dl_mono_ms()));
}

void dl_seen_init(struct dl_seen *s, const char *dir, const char *where, int db,
		  const char *prefix)
{
	struct file f;
	char why[300];
	int rc;

	memset(s, 0, sizeof(*s));
	snprintf(s->keyspace, sizeof(s->keyspace), "db=%d prefix=%s", db,
		 prefix);
	if (dir && dir[0]) {
		char lock[sizeof(s->dir) + 16];

		snprintf(s->dir, sizeof(s->dir), "%s", dir);
		snprintf(lock, sizeof(lock), "%s/" SEEN_LOCK, dir);
		s->dir_used = access(lock, F_OK) == 0;
	}
	if (where) {
		snprintf(s->where, sizeof(s->where), "%s", where);
		return;
	}
	/* memory only: one file for the token mark, read now */
	s->memory = s->bound = 1;
	snprintf(s->where, sizeof(s->where), "memory");
	if (!s->dir[0])
		return;
	set_path(s, SEEN_MEMORY);
	rc = read_file(s->dir, SEEN_MEMORY, &f, why, sizeof(why));
	f.v.cluster[0] = '\0';
	if (rc == 0)
		adopt(s, &f);
	else if (rc != ENOENT)
		dl_warn("%s: %s; ignored (it is rewritten)", s->path, why);
}

/* The version-1 file names of this keyspace: the one of its keyspace,
 * then the one every keyspace used before that. */
static void v1_names(const struct dl_seen *s, char names[2][256])
{
	static const char hex[] = "0123456789abcdef";
	const char *prefix = strstr(s->keyspace, "prefix=") + 7;
	int db = atoi(s->keyspace + 3);
	size_t n;

	snprintf(names[1], 256, "%s", SEEN_V1_FILE);
	if (db == 0 && strcmp(prefix, "dlock:") == 0) {
		names[0][0] = '\0';
		return;
	}
	n = (size_t)snprintf(names[0], 256, "dlockd.%d.", db);
	for (; *prefix && n + 8 < 256; prefix++) {
		unsigned char ch = (unsigned char)*prefix;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_') {
			names[0][n++] = (char)ch;
		} else {
			names[0][n++] = '%';
			names[0][n++] = hex[ch >> 4];
			names[0][n++] = hex[ch & 15];
		}
	}
	snprintf(names[0] + n, 256 - n, ".state");
}

/* Every version-2 file of this keyspace in the directory. */
static int scan(const struct dl_seen *s, struct file *out, int max)
{
	DIR *d = opendir(s->dir);
	struct dirent *e;
	char why[300];
	size_t l;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL && n < max) {
		l = strlen(e->d_name);
		if (l != strlen("dlockd.") + DL_CLUSTER_ID_LEN + 6 ||
		    strncmp(e->d_name, "dlockd.", 7) != 0 ||
		    strcmp(e->d_name + l - 6, ".state") != 0)
			continue;
		if (read_file(s->dir, e->d_name, &out[n], why, sizeof(why))) {
			dl_warn("%s/%s: %s; ignored", s->dir, e->d_name, why);
			continue;
		}
		if (out[n].version == 2 &&
		    strcmp(out[n].keyspace, s->keyspace) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* Choose among the files of this keyspace (see seen.h); the chosen one
 * is merged into s, and s->path names the file to write from now on. */
static int choose(struct dl_seen *s, const char *redis_id, char *why,
		  size_t len)
{
	struct file *fs = calloc(DL_SEEN_FILES_MAX, sizeof(*fs)), v1;
	char names[2][256], w[300];
	int n, i, best = -1, rc = 0;

	if (!fs)
		return 0; /* as if there were none: only detection is lost */
	n = scan(s, fs, DL_SEEN_FILES_MAX);
	for (i = 0; i < n; i++) {
		if (redis_id && strcmp(fs[i].v.cluster, redis_id) == 0) {
			best = i; /* Redis's own id: moved with its data */
			break;
		}
		if (!same_redis(fs[i].where, s->where))
			continue;
		if (redis_id && fs[i].v.cluster[0]) {
			snprintf(
				why, len,
				"CLUSTER MISMATCH: Redis holds the cluster id %s, but %s/%s, written for this Redis (%s), db and prefix, says cluster %s: this keyspace is another cluster's lock table now (check redis and redis_prefix), or Redis went back and a daemon that did not know %s gave it a new id. Not serving as the active until resolved: DEL the cluster key (the active writes %s back), or remove %s/%s and restart this daemon to join the other",
				redis_id, s->dir, fs[i].name, s->where,
				fs[i].v.cluster, fs[i].v.cluster,
				fs[i].v.cluster, s->dir, fs[i].name);
			rc = DL_EBADARG;
			break;
		}
		if (!redis_id && (best < 0 || fs[i].v.epoch > fs[best].v.epoch))
			best = i; /* Redis lost its id: this address's */
	}
	if (rc == 0 && best >= 0) {
		adopt(s, &fs[best]);
	} else if (rc == 0) {
		/* a file of the first version, if it is this keyspace's */
		v1_names(s, names);
		for (i = 0; i < 2; i++) {
			if (!names[i][0] ||
			    read_file(s->dir, names[i], &v1, w, sizeof(w)) != 0)
				continue;
			if (v1.version != 1 ||
			    strcmp(v1.keyspace, s->keyspace) != 0)
				continue;
			if (redis_id && v1.v.cluster[0] &&
			    strcmp(v1.v.cluster, redis_id) != 0) {
				dl_warn("%s/%s: of cluster %s, not Redis's %s, and written before files named the Redis they describe; ignored",
					s->dir, names[i], v1.v.cluster,
					redis_id);
				continue;
			}
			adopt(s, &v1);
			snprintf(s->legacy, sizeof(s->legacy), "%.3800s/%.255s",
				 s->dir, names[i]);
			break;
		}
	}
	free(fs);
	return rc;
}

int dl_seen_bind(struct dl_seen *s, const char *redis_id, char *why, size_t len)
{
	char name[64];
	int rc = 0;

	if (s->memory)
		return 0;
	if (s->bound) {
		if (!redis_id || !s->v.cluster[0])
			goto named;
		if (strcmp(redis_id, s->v.cluster) == 0)
			return 0;
		snprintf(
			why, len,
			"CLUSTER MISMATCH: Redis holds the cluster id %s, but this daemon is of cluster %s: this Redis, db and prefix are another cluster's lock table (check redis and redis_prefix), or Redis went back and a daemon that did not know %s gave it a new id. Not serving as the active until resolved: DEL the cluster key (the active writes %s back), or remove dlockd.%s.state from state_dir and restart this daemon to join the other",
			redis_id, s->v.cluster, s->v.cluster, s->v.cluster,
			s->v.cluster);
		return DL_EBADARG;
	}
	s->bound = 1;
	if (s->dir[0] && (rc = choose(s, redis_id, why, len)) != 0) {
		s->bound = 0; /* asked again at the next read of the id */
		return rc;
	}
	if (redis_id && s->v.cluster[0] &&
	    strcmp(redis_id, s->v.cluster) != 0) {
		/* a version-1 file would have been refused above */
		s->bound = 0;
		snprintf(why, len, "CLUSTER MISMATCH: Redis holds %s, not %s",
			 redis_id, s->v.cluster);
		return DL_EBADARG;
	}
named:
	if (redis_id && !s->v.cluster[0])
		memcpy(s->v.cluster, redis_id, DL_CLUSTER_ID_LEN + 1);
	if (s->v.cluster[0] && s->dir[0] && !s->path[0]) {
		snprintf(name, sizeof(name), "dlockd.%s.state", s->v.cluster);
		set_path(s, name);
	}
	return 0;
}

void dl_seen_note_cluster(struct dl_seen *s, const char *id)
{
	char why[600];

	if (s->memory) {
		/* each process is a cluster of its own: not in the file */
		memcpy(s->v.cluster, id, DL_CLUSTER_ID_LEN + 1);
		return;
	}
	if (s->v.cluster[0] && strcmp(s->v.cluster, id) == 0)
		return;
	if (s->v.cluster[0]) {
		/* the store refuses another id (dl_seen_bind) first */
		dl_warn("cluster id %s replaces %s", id, s->v.cluster);
		memcpy(s->v.cluster, id, DL_CLUSTER_ID_LEN + 1);
		s->path[0] = '\0';
	}
	/* choose again knowing the id: its file, if there is one */
	s->bound = 0;
	if (dl_seen_bind(s, id, why, sizeof(why)) != 0)
		dl_error("%s", why);
}

void dl_seen_note(struct dl_seen *s, uint64_t epoch, uint64_t gen)
{
	if (epoch > s->v.epoch)
		s->v.epoch = epoch;
	if (gen > s->v.gen)
		s->v.gen = gen;
}

void dl_seen_note_mark(struct dl_seen *s, uint64_t mark)
{
	if (mark > s->v.mark)
		s->v.mark = mark;
}

void dl_seen_note_lead(struct dl_seen *s, uint64_t epoch, uint64_t inst)
{
	dl_seen_note(s, epoch, 0);
	if (epoch > s->v.lead) {
		s->v.lead = epoch;
		s->v.leadinst = inst;
	}
}

void dl_seen_note_run(struct dl_seen *s, uint64_t run)
{
	if (run)
		s->v.run = run;
}

void dl_seen_note_horizon(struct dl_seen *s, uint64_t end)
{
	if (end > s->v.horizon)
		s->v.horizon = end;
}

void dl_seen_note_proofkey(struct dl_seen *s, const char *hex)
{
	if (strcmp(s->v.proofkey, hex) == 0)
		return;
	if (s->v.proofkey[0])
		memcpy(s->v.proofkey_old, s->v.proofkey,
		       sizeof(s->v.proofkey_old));
	snprintf(s->v.proofkey, sizeof(s->v.proofkey), "%s", hex);
}

void dl_seen_note_closed(struct dl_seen *s, uint64_t end, const char *why)
{
	if (end > s->v.closed || end == 0) {
		s->v.closed = end;
		snprintf(s->v.why, sizeof(s->v.why), "%s", end ? why : "");
	}
}

/* ---- writing ------------------------------------------------------------- */

/* The directory's lock, held while the file is read, merged and replaced:
 * two daemons sharing the directory must not lose each other's writes (a
 * horizon another made durable, replaced by one merged before it). */
static int lock_dir(const struct dl_seen *s)
{
	char path[sizeof(s->dir) + 16];
	int fd;

	snprintf(path, sizeof(path), "%s/" SEEN_LOCK, s->dir);
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
		return -1;
	while (flock(fd, LOCK_EX) != 0)
		if (errno != EINTR) {
			close(fd);
			return -1;
		}
	return fd;
}

static int sync_dir(const struct dl_seen *s)
{
	int fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return errno;
	if (fsync(fd) != 0)
		err = errno;
	close(fd);
	return err;
}

/* Write the file whole to a temporary, then rename it over the old one:
 * a crash leaves the old file or the new one, never half of one. The
 * temporary is this process's own (its pid in the name). */
static int write_file(struct dl_seen *s, int sync)
{
	char tmp[sizeof(s->path) + 32], text[SEEN_TEXT_MAX], why[300];
	const char *name = strrchr(s->path, '/') + 1;
	uint64_t now = dl_mono_ms();
	const char *cluster = s->memory ? "" : s->v.cluster;
	struct file f;
	int fd, n, err = 0, lk;

	if ((lk = lock_dir(s)) < 0)
		return errno ? errno : EIO;
	/* never lower what another daemon sharing the directory wrote */
	if (read_file(s->dir, name, &f, why, sizeof(why)) == 0 &&
	    (s->memory || strcmp(f.v.cluster, s->v.cluster) == 0))
		raise_vals(&s->v, &f.v);
	n = snprintf(
		text, sizeof(text),
		SEEN_MAGIC
		"\nredis %s\nkeyspace %s\n%s%s%sepoch %llu\n"
		"gen %llu\nmark %llu\nlead %llu\nleadinst %llu\nboot %s %llu\n"
		"horizon %llu\nleading %llu\nclosed %llu %s\nrun %llu\n"
		"%s%s%s%s%s",
		s->where, s->keyspace, cluster[0] ? "cluster " : "", cluster,
		cluster[0] ? "\n" : "", (unsigned long long)s->v.epoch,
		(unsigned long long)s->v.gen, (unsigned long long)s->v.mark,
		(unsigned long long)s->v.lead,
		(unsigned long long)s->v.leadinst, dl__seen_boot_id(),
		(unsigned long long)dl__seen_boottime_ms(),
		(unsigned long long)left_of(s->v.horizon, now),
		(unsigned long long)left_of(s->v.leading, now),
		(unsigned long long)left_of(s->v.closed, now), s->v.why,
		(unsigned long long)s->v.run,
		s->v.proofkey[0] ? "proofkey " : "", s->v.proofkey,
		s->v.proofkey_old[0] ? " " : "", s->v.proofkey_old,
		s->v.proofkey[0] ? "\n" : "");
	snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", s->path, (long)getpid());
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) <
	    0) {
		err = errno;
		close(lk);
		return err;
	}
	if (write(fd, text, (size_t)n) != n || (sync && fsync(fd) != 0))
		err = errno ? errno : EIO;
	if (close(fd) != 0 && !err)
		err = errno;
	if (!err && rename(tmp, s->path) != 0)
		err = errno;
	if (!err && sync)
		err = sync_dir(s);
	if (err)
		unlink(tmp);
	close(lk);
	return err;
}

static int changed(const struct dl_seen *s)
{
	return s->v.epoch != s->saved.epoch || s->v.mark != s->saved.mark ||
	       s->v.lead != s->saved.lead || s->v.horizon != s->saved.horizon ||
	       s->v.leading != s->saved.leading ||
	       s->v.closed != s->saved.closed || s->v.run != s->saved.run ||
	       strcmp(s->v.cluster, s->saved.cluster) != 0 ||
	       strcmp(s->v.proofkey, s->saved.proofkey) != 0;
}

int dl_seen_save(struct dl_seen *s, uint64_t now_ms, int sync)
{
	static int warned;
	int urgent = changed(s), err;

	if (!s->path[0] || (!urgent && !sync && s->v.gen == s->saved.gen))
		return s->failed ? DL_EUNAVAILABLE : 0;
	if (!urgent && !sync && now_ms - s->saved_ms < DL_SEEN_SAVE_MS)
		return s->failed ? DL_EUNAVAILABLE : 0;
	s->saved_ms = now_ms;
	/* Always fsynced: in a power cut, the case this file is for, a
	 * write left in the page cache is lost with Redis's last second,
	 * and a file that lags Redis does not notice the loss (0.7 ms a
	 * write on the test VM, at most ten a second). */
	(void)sync;
	if ((err = write_file(s, 1)) == 0) {
		if (warned)
			dl_notice("%s: written again", s->path);
		warned = s->failed = s->removed = 0;
		s->saved = s->v;
		if (s->legacy[0]) {
			/* merged into this one: a later start must not
			 * read it for another Redis */
			unlink(s->legacy);
			s->legacy[0] = '\0';
		}
		return 0;
	}
	/* A file left as it was would later be read as a bound of the
	 * leases told since: gone, a restart knows it knows nothing. */
	if (unlink(s->path) == 0 || errno == ENOENT) {
		if (!warned)
			dl_error(
				"%s: cannot write it: %s; removed, so that a restart does not take it for what this daemon knows (a restart will not notice that Redis went back, and closes grants for max_ttl if it does)",
				s->path, strerror(err));
		warned = 1;
		s->failed = 0;
		s->removed = 1;
		return 0;
	}
	if (!warned || !s->failed)
		dl_error(
			"%s: cannot write it (%s) nor remove it (%s): no grant is told until it can be (a stale file would be taken for a bound after a restart)",
			s->path, strerror(err), strerror(errno));
	warned = s->failed = 1;
	return DL_EUNAVAILABLE;
}

/* Without a file (no state_dir, or one that could not be written and is
 * gone) a restart knows nothing, and nothing is to be waited for. */
uint64_t dl_seen_durable_horizon(const struct dl_seen *s)
{
	return !s->path[0] || s->removed ? s->v.horizon : s->saved.horizon;
}

uint64_t dl_seen_durable_mark(const struct dl_seen *s)
{
	return !s->path[0] || s->removed ? s->v.mark : s->saved.mark;
}

int dl_seen_file_proves(const struct dl_seen *s)
{
	return s->has_file && s->file.lead && s->file.lead == s->file.epoch &&
	       s->file.leading > dl_mono_ms();
}

void dl_seen_note_leading(struct dl_seen *s, uint64_t until)
{
	s->v.leading = until;
}
