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
static int parse(struct dl_seen *s, char *text, char *why, size_t whylen)
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
			same = strcmp(sp, s->id) == 0;
			if (!same) {
				snprintf(why, whylen,
					 "it describes another Redis (%.200s)",
					 sp);
				return -1;
			}
		} else if (strcmp(line, "cluster") == 0) {
			if (strlen(sp) != DL_CLUSTER_ID_LEN ||
			    strspn(sp, "0123456789abcdef") != DL_CLUSTER_ID_LEN) {
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
	s->epoch = s->saved_epoch = epoch;
	s->gen = s->saved_gen = gen;
	s->mark = s->saved_mark = mark;
	snprintf(s->cluster, sizeof(s->cluster), "%s", cluster);
	snprintf(s->saved_cluster, sizeof(s->saved_cluster), "%s", cluster);
	return 0;
}

void dl_seen_init(struct dl_seen *s, const char *dir, const char *id)
{
	char text[2 * DL_SEEN_ID_MAX], why[300];
	ssize_t n;
	int fd;

	memset(s, 0, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "%s", id);
	if (!dir || !dir[0])
		return;
	if ((size_t)snprintf(s->path, sizeof(s->path), "%s/" SEEN_FILE,
			     dir) >= sizeof(s->path)) {
		dl_warn("state_dir too long: no %s kept", SEEN_FILE);
		s->path[0] = '\0';
		return;
	}
	if ((fd = open(s->path, O_RDONLY | O_CLOEXEC)) < 0) {
		if (errno != ENOENT)
			dl_warn("%s: %s; ignored", s->path, strerror(errno));
		return;
	}
	n = read(fd, text, sizeof(text) - 1);
	close(fd);
	if (n < 0) {
		dl_warn("%s: %s; ignored", s->path, strerror(errno));
		return;
	}
	text[n] = '\0';
	if (parse(s, text, why, sizeof(why)) != 0) {
		dl_warn("%s: %s; ignored (it is rewritten for this Redis)",
			s->path, why);
		s->epoch = s->gen = s->mark = 0;
		s->cluster[0] = s->saved_cluster[0] = '\0';
		return;
	}
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
 * a crash leaves the old file or the new one, never half of one. */
static int write_file(struct dl_seen *s, int sync)
{
	char tmp[sizeof(s->path) + 8], text[2 * DL_SEEN_ID_MAX];
	int fd, n, err = 0;

	n = snprintf(text, sizeof(text),
		     SEEN_MAGIC "\nredis %s\nepoch %llu\ngen %llu\nmark %llu\n%s%s%s",
		     s->id, (unsigned long long)s->epoch,
		     (unsigned long long)s->gen, (unsigned long long)s->mark,
		     s->cluster[0] ? "cluster " : "", s->cluster,
		     s->cluster[0] ? "\n" : "");
	snprintf(tmp, sizeof(tmp), "%s.tmp", s->path);
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
			dl_error("%s: cannot write it: %s (a restart will not remember what Redis held)",
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
