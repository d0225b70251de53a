/* SPDX-License-Identifier: MIT */
/*
 * seen.c -- what this daemon has seen Redis hold (seen.h).
 */
#include "server/seen.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/proto.h"
#include "server/log.h"

#define SEEN_MAGIC "dlockd-state 1"
#define SEEN_FILE  "dlockd.state"

/* "key value" lines after the magic; 0 if it is one of ours. */
struct seen_vals {
	uint64_t epoch, gen, mark;
	char cluster[DL_CLUSTER_ID_LEN + 1]; /* "" : none in the file */
};

static int parse(const char *id, char *text, struct seen_vals *out, char *why,
		 size_t whylen)
{
	char *line, *save = NULL, *sp;
	uint64_t epoch = 0, gen = 0, mark = 0, v;
	const char *cluster = "";
	int n = 0, same = 0;

	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save), n++) {
		if (n == 0) {
			if (strcmp(line, SEEN_MAGIC) != 0) {
				snprintf(why, whylen, "not a state file");
				return -1;
			}
			continue;
		}
		if (!(sp = strchr(line, ' ')))
			continue;
		*sp++ = '\0';
		if (strcmp(line, "redis") == 0) {
			same = strcmp(sp, id) == 0;
			if (!same) {
				snprintf(why, whylen,
					 "it describes another Redis (%.200s)",
					 sp);
				return -1;
			}
		} else if (strcmp(line, "cluster") == 0) {
			/* an id, not a number (store_cluster.c) */
			if (strlen(sp) != DL_CLUSTER_ID_LEN ||
			    strspn(sp, "0123456789abcdef") !=
				    DL_CLUSTER_ID_LEN) {
				snprintf(why, whylen, "a bad cluster id");
				return -1;
			}
			cluster = sp;
		} else if (dl_parse_u64(sp, strlen(sp), &v) != 0) {
			snprintf(why, whylen, "a bad number for %.40s", line);
			return -1;
		} else if (strcmp(line, "epoch") == 0) {
			epoch = v;
		} else if (strcmp(line, "gen") == 0) {
			gen = v;
		} else if (strcmp(line, "mark") == 0) {
			mark = v;
		}
	}
	if (!same) {
		snprintf(why, whylen, "it names no Redis");
		return -1;
	}
	out->epoch = epoch;
	out->gen = gen;
	out->mark = mark;
	snprintf(out->cluster, sizeof(out->cluster), "%s", cluster);
	return 0;
}

/* Read the state file at path for the Redis `id`: 0 and *out, ENOENT if
 * there is none, else -1 and why. */
static int read_file(const char *path, const char *id, struct seen_vals *out,
		     char *why, size_t whylen)
{
	char text[2 * DL_SEEN_ID_MAX];
	ssize_t n;
	int fd;

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
	return parse(id, text, out, why, whylen);
}

/* The file's name in state_dir: one per database and key prefix, so that
 * daemons of two keyspaces sharing a directory (two units copied from one,
 * a shared volume) never take each other's file for their own. Found from
 * outside: with one name for all, each rewrote the other's, and a daemon
 * restarted on a Redis that forgot everything did not notice it and
 * granted a held lock again. The default keyspace keeps the name earlier
 * versions used. */
static void file_name(char *out, size_t len, int db, const char *prefix)
{
	static const char hex[] = "0123456789abcdef";
	size_t n;

	if (db == 0 && strcmp(prefix, "dlock:") == 0) {
		snprintf(out, len, "%s", SEEN_FILE);
		return;
	}
	n = (size_t)snprintf(out, len, "dlockd.%d.", db);
	for (; *prefix && n + 8 < len; prefix++) {
		unsigned char ch = (unsigned char)*prefix;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_') {
			out[n++] = (char)ch;
		} else {
			out[n++] = '%';
			out[n++] = hex[ch >> 4];
			out[n++] = hex[ch & 15];
		}
	}
	snprintf(out + n, len - n, ".state");
}

void dl_seen_init(struct dl_seen *s, const char *dir, int db,
		  const char *prefix)
{
	char name[DL_SEEN_ID_MAX], legacy[sizeof(s->path)], why[300];
	struct seen_vals v;
	int rc;

	memset(s, 0, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "db=%d prefix=%s", db, prefix);
	if (!dir || !dir[0])
		return;
	file_name(name, sizeof(name), db, prefix);
	if ((size_t)snprintf(s->path, sizeof(s->path), "%s/%s", dir, name) >=
	    sizeof(s->path)) {
		dl_warn("state_dir too long: no %s kept", name);
		s->path[0] = '\0';
		return;
	}
	rc = read_file(s->path, s->id, &v, why, sizeof(why));
	if (rc == ENOENT && strcmp(name, SEEN_FILE) != 0) {
		/* written by a version with one name for every keyspace:
		 * used if it is this keyspace's (the next save moves it) */
		snprintf(legacy, sizeof(legacy), "%s/" SEEN_FILE, dir);
		if (read_file(legacy, s->id, &v, why, sizeof(why)) != 0)
			return;
		rc = 0;
	}
	if (rc == ENOENT)
		return;
	if (rc != 0) {
		dl_warn("%s: %s; ignored (it is rewritten for this Redis)",
			s->path, why);
		return;
	}
	s->epoch = s->saved_epoch = v.epoch;
	s->gen = s->saved_gen = v.gen;
	s->mark = s->saved_mark = v.mark;
	memcpy(s->cluster, v.cluster, sizeof(s->cluster));
	memcpy(s->saved_cluster, v.cluster, sizeof(s->saved_cluster));
	dl_info("%s: this daemon last saw Redis at epoch %llu, generation %llu, token mark %llu, cluster %s",
		s->path, (unsigned long long)s->epoch,
		(unsigned long long)s->gen, (unsigned long long)s->mark,
		s->cluster[0] ? s->cluster : "-");
}

void dl_seen_note(struct dl_seen *s, uint64_t epoch, uint64_t gen)
{
	if (epoch > s->epoch)
		s->epoch = epoch;
	if (gen > s->gen)
		s->gen = gen;
}

void dl_seen_note_mark(struct dl_seen *s, uint64_t mark)
{
	if (mark > s->mark)
		s->mark = mark;
}

void dl_seen_note_cluster(struct dl_seen *s, const char *id)
{
	snprintf(s->cluster, sizeof(s->cluster), "%s", id);
}

/* Write the file whole to a temporary, then rename it over the old one:
 * a crash leaves the old file or the new one, never half of one. The
 * temporary is this process's own (its pid in the name): two daemons
 * sharing the directory used one name, and one's rename could move the
 * other's half-written file into place. */
static int write_file(struct dl_seen *s, int sync)
{
	char tmp[sizeof(s->path) + 32], text[2 * DL_SEEN_ID_MAX], why[300];
	struct seen_vals v;
	const char *cluster = s->cluster;
	int fd, n, err = 0;

	/* Two daemons of one keyspace may share the directory (nodes on one
	 * machine): never lower what the other wrote. The cluster id is not
	 * a number: this daemon's is written (the one it serves); the
	 * other's is kept only while this one knows none. */
	if (read_file(s->path, s->id, &v, why, sizeof(why)) == 0) {
		dl_seen_note(s, v.epoch, v.gen);
		dl_seen_note_mark(s, v.mark);
		if (!cluster[0])
			cluster = v.cluster;
	}
	n = snprintf(text, sizeof(text),
		     SEEN_MAGIC "\nredis %s\nepoch %llu\ngen %llu\nmark %llu\n"
				"%s%s%s",
		     s->id, (unsigned long long)s->epoch,
		     (unsigned long long)s->gen, (unsigned long long)s->mark,
		     cluster[0] ? "cluster " : "", cluster,
		     cluster[0] ? "\n" : "");
	snprintf(tmp, sizeof(tmp), "%s.%ld.tmp", s->path, (long)getpid());
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) <
	    0)
		return errno;
	if (write(fd, text, (size_t)n) != n || (sync && fsync(fd) != 0))
		err = errno ? errno : EIO;
	if (close(fd) != 0 && !err)
		err = errno;
	if (!err && rename(tmp, s->path) != 0)
		err = errno;
	if (err)
		unlink(tmp);
	return err;
}

void dl_seen_save(struct dl_seen *s, uint64_t now_ms)
{
	static int warned;
	int epoch_changed = s->epoch != s->saved_epoch ||
			    s->mark != s->saved_mark ||
			    strcmp(s->cluster, s->saved_cluster) != 0,
	    err;

	if (!s->path[0] || (!epoch_changed && s->gen == s->saved_gen))
		return;
	if (!epoch_changed && now_ms - s->saved_ms < DL_SEEN_SAVE_MS)
		return;
	if ((err = write_file(s, epoch_changed)) != 0) {
		if (!warned)
			dl_error(
				"%s: cannot write it: %s (a restart will not remember what Redis held)",
				s->path, strerror(err));
		warned = 1;
		s->saved_ms = now_ms; /* retried in DL_SEEN_SAVE_MS */
		return;
	}
	warned = 0;
	s->saved_epoch = s->epoch;
	s->saved_gen = s->gen;
	s->saved_mark = s->mark;
	memcpy(s->saved_cluster, s->cluster, sizeof(s->saved_cluster));
	s->saved_ms = now_ms;
}
